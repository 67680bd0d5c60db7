"""What every benchmark shares: a measurement, medians, and the result table's rows."""

from __future__ import annotations

import asyncio
import pathlib
import statistics
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

import attrs

from kinsumer import Kinsumer

__all__ = [
    "HERE", "REPO", "Measure", "PutToNext", "Row", "median", "new_stream", "rate_text", "read_through_next",
    "read_through_process",
]  # fmt: skip

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]


@attrs.frozen
class Measure:
    """``records`` read in ``seconds``; ``startup``: seconds until the first record, if known.

    ``cpu``: CPU-seconds this process (all its threads) spent over the same ``seconds``, if
    measured; the servers run in processes of their own and are not counted.
    """

    records: int
    seconds: float
    startup: float | None = None
    cpu: float | None = None
    #: CPU-seconds from the first record to the last (``records - 1`` records), if measured.
    steady_cpu: float | None = None
    #: An asyncio reader's: how late a ticker task's 1 ms sleeps woke (seconds), while it read.
    loop_lags: tuple[float, ...] = ()

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_per_100k(self) -> float:
        """CPU-seconds per 100,000 records (NaN if not measured)."""
        return self.cpu / self.records * 100_000 if self.cpu is not None and self.records else float("nan")


@attrs.frozen
class Row:
    """One line of the result table."""

    benchmark: str
    server: str
    figure: str
    detail: str = ""


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def rate_text(rate: float) -> str:
    return f"{rate / 1000:.1f}k rec/s"


def new_stream(kinesis: Any, prefix: str, shards: int) -> str:
    """Create a uniquely named stream and wait until it is ACTIVE; its name."""
    stream = f"{prefix}-{uuid.uuid4().hex[:8]}"
    kinesis.create_stream(StreamName=stream, ShardCount=shards)
    kinesis.get_waiter("stream_exists").wait(StreamName=stream, WaiterConfig={"Delay": 0.2, "MaxAttempts": 150})
    return stream


def read_through_next(k: Kinsumer, total: int) -> Measure:
    """Create ``k``'s tables, run it, take ``total`` records through ``next()``, stop, drop the tables.

    The clock runs from ``run()`` to the last record; ``startup`` is the time to the first one.
    """
    k.create_required_tables()
    try:
        started, cpu = time.perf_counter(), time.process_time()
        k.run()
        sink = 0
        first: float | None = None
        first_cpu = 0.0
        for _ in range(total):
            data = k.next(timeout=60)
            if data is None:
                raise RuntimeError(f"the consumer stopped after {_} of {total} records")
            sink += len(data)
            if first is None:
                first, first_cpu = time.perf_counter(), time.process_time()
        ended, cpu, steady = time.perf_counter(), time.process_time() - cpu, time.process_time() - first_cpu
    finally:
        k.stop()
        k.delete_tables()
    return Measure(total, ended - started, startup=(first or ended) - started, cpu=cpu, steady_cpu=steady)


TICK = 0.001  # seconds a ticker task sleeps between its turns


def read_through_async_for(k: Kinsumer, total: int) -> Measure:
    """Like :func:`read_through_next`, with ``async for`` in ``async with`` (an asyncio program), and a
    ticker task beside it noting how late each of its 1 ms sleeps wakes: the loop's lag."""
    k.create_required_tables()
    lags: list[float] = []

    async def main() -> Measure:
        loop = asyncio.get_running_loop()
        reading = True

        async def ticker() -> None:
            while reading:
                before = loop.time()
                await asyncio.sleep(TICK)
                lags.append(max(0.0, loop.time() - before - TICK))

        ticks = asyncio.create_task(ticker())
        started, cpu = time.perf_counter(), time.process_time()
        first: float | None = None
        count = sink = 0
        async with k:
            async for record in k:
                sink += len(record.data)
                count += 1
                if first is None:
                    first = time.perf_counter()
                if count == total:
                    break
            ended, cpu = time.perf_counter(), time.process_time() - cpu
            reading = False
            await ticks
        if count < total:
            raise RuntimeError(f"the consumer stopped after {count} of {total} records")
        return Measure(total, ended - started, startup=(first or ended) - started, cpu=cpu, loop_lags=tuple(lags))

    try:
        return asyncio.run(main())
    finally:
        k.delete_tables()


def read_through_process(k: Kinsumer, total: int, concurrency: int = 1) -> Measure:
    """Like :func:`read_through_next`, with ``total`` records through ``k.process(handler)`` (the same per-record
    work: taking the payload); the handler stops the consumer after the last one."""
    k.create_required_tables()
    lock = threading.Lock()
    count, sink = [0], [0]
    first: list[float] = []
    finished = threading.Event()

    def handler(record: Any) -> None:
        with lock:
            sink[0] += len(record.data)
            count[0] += 1
            if not first:
                first.append(time.perf_counter())
            if count[0] == total:
                finished.set()

    def stop_when_done() -> None:
        finished.wait(600)
        k.stop()

    stopper = threading.Thread(target=stop_when_done, daemon=True)
    try:
        started, cpu = time.perf_counter(), time.process_time()
        k.run()
        stopper.start()
        k.process(handler, concurrency=concurrency)
        if not finished.is_set():
            raise RuntimeError(f"process() returned after {count[0]} of {total} records")
        ended, cpu = time.perf_counter(), time.process_time() - cpu
    finally:
        finished.set()
        k.stop()
        k.delete_tables()
    return Measure(total, ended - started, startup=(first[0] if first else ended) - started, cpu=cpu)


class PutToNext:
    """End-to-end latency: a producer puts its send time every ``interval`` seconds; consumers
    note put → ``next()`` for the records sent inside the window."""

    def __init__(self, kinesis: Any, stream: str, interval: float) -> None:
        self._kinesis, self._stream, self._interval = kinesis, stream, interval
        self._window = (0.0, 0.0)
        self._lock = threading.Lock()
        self._latencies: list[float] = []
        self._stop = threading.Event()
        self._producer = threading.Thread(target=self._produce, name="bench-producer")

    def consume(self, k: Kinsumer) -> None:
        """A reader thread's body: take records until ``k`` stops."""
        while (data := k.next()) is not None:
            self._note(data)

    def handle(self, k: Kinsumer) -> None:
        """A reader thread's body: ``k.process()`` until ``k`` stops."""
        k.process(lambda record: self._note(record.data))

    def _note(self, data: bytes) -> None:
        now, sent = time.time(), float(data)
        if self._window[0] <= sent < self._window[1]:
            with self._lock:
                self._latencies.append(now - sent)

    def _produce(self) -> None:
        i = 0
        while not self._stop.wait(self._interval):
            self._kinesis.put_record(StreamName=self._stream, Data=b"%.6f" % time.time(), PartitionKey=f"k{i}")
            i += 1

    def start(self) -> None:
        self._producer.start()

    def measure(self, seconds: float) -> None:
        """Note the latencies of the records sent during the next ``seconds``."""
        self._window = (time.time(), time.time() + seconds)
        time.sleep(seconds)

    def stop(self) -> None:
        self._stop.set()
        if self._producer.is_alive():
            self._producer.join()

    def latencies(self) -> list[float]:
        """Seconds, sorted."""
        with self._lock:
            return sorted(self._latencies)
