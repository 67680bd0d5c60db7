"""A kinsumer client as its own process, for the multi-process tests.

    python -m tests.procs.client --spec '{"kinesis": URL, "dynamodb": URL, "stream": S, "app": A,
                                          "name": N, "out": DIR, ...}'

Every record is written to ``DIR/N.deliveries`` (``id shard sequence key counter time``) with
an unbuffered write *before* the next one is asked for, so after a SIGKILL the file holds at
least every record the consumer counted as processed. Stats go to ``DIR/N.events``. SIGTERM
stops the client cleanly (exit 0); an exception from ``next*()`` is written to ``DIR/N.error``
(exit 3). Optional: manual checkpointing through a thread pool, ``process()`` with a handler that
kills its process on chosen records (exit 17), and injected faults.
"""

from __future__ import annotations

import heapq
import json
import logging
import os
import pathlib
import random
import signal
import sys
import threading
import time
import traceback
import tracemalloc
from typing import Any

import botocore.exceptions

from demo import servers
from kinsumer import AlreadyStarted, Checkpoint, Config, Failure, Kinsumer, Record, StatReceiver
from tests.faults import error_response


class FileStats(StatReceiver):
    """Appends one line per event: ``time kind shard/operation detail``."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, *fields: object) -> None:
        os.write(self._fd, (" ".join(str(f) for f in (f"{time.time():.6f}", *fields)) + "\n").encode())

    def records_fetched(self, shard_id: str, count: int, millis_behind_latest: int | None) -> None:
        self.write("fetched", shard_id, count)

    def checkpoint_written(self, shard_id: str) -> None:
        self.write("checkpoint", shard_id)

    def shard_gained(self, shard_id: str) -> None:
        self.write("gained", shard_id)

    def shard_lost(self, shard_id: str) -> None:
        self.write("lost", shard_id)

    def handoff(self, shard_id: str, seconds: float, clean: bool) -> None:
        self.write("handoff", shard_id, int(clean))

    def error_retried(self, operation: str, error: str) -> None:
        self.write("retried", operation, error)

    def error_abandoned(self, operation: str, error: str) -> None:
        self.write("abandoned", operation, error)


def record_client_table_calls(dynamodb: Any, stats: FileStats) -> None:
    """A ``call`` event for each API call on the clients table (not for botocore's retries of it): the
    heartbeats (PutItem) and the membership reads (Scan, GetItem), which the tests count rounds by."""

    def note(params: dict[str, Any], model: Any, **_: Any) -> None:
        table = str(params.get("TableName", ""))
        if table.endswith("_clients"):
            stats.write("call", model.name, "clients")

    dynamodb.meta.events.register("before-parameter-build.dynamodb", note)


class Faults:
    """Injected with botocore hooks: error answers by operation, and connection resets."""

    def __init__(self, spec: dict[str, Any], stats: FileStats) -> None:
        self._rng = random.Random(spec.get("seed", 0))
        self._lock = threading.Lock()
        self._spec = spec
        self._stats = stats

    def attach(self, client: Any) -> None:
        service = client.meta.service_model.service_id.hyphenize()
        client.meta.events.register(f"before-send.{service}", self._before_send)

    def _draw(self, rates: dict[str, float]) -> str | None:
        with self._lock:
            roll = self._rng.random()
        for code, rate in rates.items():
            if roll < rate:
                return code
            roll -= rate
        return None

    def _before_send(self, request: Any, **_: Any) -> Any:
        target = request.headers.get("X-Amz-Target", b"")
        operation = (target.decode() if isinstance(target, bytes) else target).rsplit(".", 1)[-1]
        service = "dynamodb" if "DynamoDB" in str(target) else "kinesis"
        if self._draw({"reset": self._spec.get("reset", 0.0)}):
            self._stats.write("injected", operation, "ConnectionReset")
            raise botocore.exceptions.ConnectionClosedError(endpoint_url=request.url)
        code = self._draw(self._spec.get(operation, {})) or self._draw(self._spec.get(service, {}))
        if code is None:
            return None
        self._stats.write("injected", operation, code)
        return error_response(request.url, code)


def trace_allocations(spec: dict[str, Any]) -> None:
    """``spec["tracemalloc"]`` (``{"dir": D, "warm": S, "every": S, "frames": N}``): Python's allocations traced
    from the start; a snapshot written to ``D/warm.snapshot`` ``warm`` seconds in, then to ``D/last.snapshot``
    every ``every`` seconds (the soak compares the two: scripts/soak.py --tracemalloc)."""
    folder = pathlib.Path(spec["dir"])
    tracemalloc.start(int(spec.get("frames", 12)))

    def dump(name: str) -> None:
        snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        snapshot.dump(str(folder / f"{name}.tmp"))
        (folder / f"{name}.tmp").replace(folder / f"{name}.snapshot")  # whole, or not at all

    def run() -> None:
        time.sleep(float(spec["warm"]))
        dump("warm")
        while True:
            time.sleep(float(spec["every"]))
            dump("last")

    threading.Thread(target=run, name="tracemalloc", daemon=True).start()


def main() -> int:
    spec: dict[str, Any] = json.loads(sys.argv[sys.argv.index("--spec") + 1])
    if spec.get("tracemalloc"):
        trace_allocations(spec["tracemalloc"])
    # kinsumer's log on stderr (N.stderr), shown with a failed test (tests/procs/conftest.py)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    logging.getLogger("kinsumer").setLevel(spec.get("log", logging.INFO))
    out = os.path.join(spec["out"], spec["name"])
    stats = FileStats(out + ".events")
    config = Config(stats=stats, manual_checkpointing=bool(spec.get("manual")), **spec.get("config", {}))
    faults = Faults(spec["faults"], stats) if spec.get("faults") else None
    # with injected faults, botocore retries nothing: every fault reaches kinsumer's own handling
    options: dict[str, Any] = {"retries": {"total_max_attempts": 1}} if faults else {}
    kinesis = servers.client(spec["kinesis"], "kinesis", **options)
    dynamodb = servers.client(spec["dynamodb"], "dynamodb", **options)
    record_client_table_calls(dynamodb, stats)
    if faults:
        faults.attach(kinesis)
        faults.attach(dynamodb)
    consumer = Kinsumer(spec["stream"], spec["app"], spec["name"], config, kinesis=kinesis, dynamodb=dynamodb)
    HOME[0] = consumer.streams[0]
    stop_asked = threading.Event()

    def on_sigterm(*_: object) -> None:
        stats.write("stopping", spec["name"])  # stop() starts: its bound counts from here
        stop_asked.set()
        threading.Thread(target=consumer.stop, daemon=True).start()

    signal.signal(signal.SIGTERM, on_sigterm)
    stats.write("listening", spec["name"])  # from here on SIGTERM is a clean stop (see ClientProcess.stop)
    deliveries = os.open(out + ".deliveries", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        consumer.run()
    except AlreadyStarted:
        if not stop_asked.is_set():
            raise
        stats.write("stopped", spec["name"])  # SIGTERM came before run() began: a client that never ran
        return 0
    stats.write("running", spec["name"])
    try:
        if spec.get("process"):
            consume_with_a_handler(consumer, deliveries, spec["process"], out, stats)
        elif config.manual_checkpointing:
            consume_manually(consumer, deliveries, spec)
        else:
            while (record := consumer.next_record()) is not None:
                os.write(deliveries, line(record))
    except Exception:
        with open(out + ".error", "w") as f:
            f.write(traceback.format_exc())
        consumer.stop()
        return 3
    consumer.stop()
    stats.write("stopped", spec["name"])
    return 0


def consume_with_a_handler(
    consumer: Kinsumer, deliveries: int, spec: dict[str, Any], out: str, stats: FileStats
) -> None:
    """``process()`` with a handler that kills its process on ``poison`` ids (always) and on ``die_once``
    ids (the first time, anywhere: a marker file says it happened); failures go to ``N.dead``."""
    poison, die_once, hang = set(spec.get("poison", ())), set(spec.get("die_once", ())), set(spec.get("hang", ()))
    dead = os.open(out + ".dead", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def handler(record: Record) -> None:
        rid = json.loads(record.data)["id"]
        once = os.path.join(os.path.dirname(out), f"died-once-{rid}")
        if rid in poison or (rid in die_once and not os.path.exists(once)):
            if rid in die_once:
                open(once, "w").close()
            stats.write("dying", rid)
            os._exit(17)  # no cleanup, no release: as a native crash or the OOM killer
        if rid in hang:  # a call that never returns (as a socket without a timeout)
            stats.write("hanging", rid)
            time.sleep(3600)
        os.write(deliveries, line(record))

    def sink(failure: Failure) -> None:
        rid = json.loads(failure.record.data)["id"]
        os.write(dead, f"{rid} {failure.reason} {failure.attempts} {failure.record.shard_id}\n".encode())

    consumer.process(
        handler, max_attempts=int(spec.get("max_attempts", 3)), dead_letter=sink, backoff=0.01,
        concurrency=int(spec.get("concurrency", 1)), timeout=spec.get("timeout"),
        ordering=spec.get("ordering", "shard"),
    )  # fmt: skip


def consume_manually(consumer: Kinsumer, deliveries: int, spec: dict[str, Any]) -> None:
    """Checkpoints after a random delay each: out of order, sometimes late, never later than ``ack_delay``."""
    rng = random.Random(spec.get("seed", 0))
    delay = float(spec.get("ack_delay", 0.0))
    acks = AckClock()
    acks.start()
    try:
        while True:
            record, checkpoint = consumer.next_record_with_checkpointer()
            if record is None or checkpoint is None:
                return
            os.write(deliveries, line(record))
            acks.add(checkpoint, time.monotonic() + rng.random() * delay)
    finally:
        acks.finish()


class AckClock(threading.Thread):
    """Calls each checkpoint at its own time, in the order of those times.

    (A pool of threads that each sleep their delay falls behind a reader faster than the pool:
    acknowledgements came seconds late, and a handoff timed out waiting for them.)
    """

    def __init__(self) -> None:
        super().__init__(name="acks", daemon=True)
        self._due: list[tuple[float, int, Checkpoint]] = []
        self._cond = threading.Condition()
        self._count = 0
        self._finishing = False

    def add(self, checkpoint: Checkpoint, at: float) -> None:
        with self._cond:
            self._count += 1
            heapq.heappush(self._due, (at, self._count, checkpoint))
            self._cond.notify()

    def finish(self) -> None:
        """Call what is left at its time, then end."""
        with self._cond:
            self._finishing = True
            self._cond.notify()
        self.join()

    def run(self) -> None:
        while True:
            with self._cond:
                while not self._due or self._due[0][0] > time.monotonic():
                    if not self._due and self._finishing:
                        return
                    self._cond.wait(None if not self._due else self._due[0][0] - time.monotonic())
                _, _, checkpoint = heapq.heappop(self._due)
            checkpoint()


def line(record: Any) -> bytes:
    """``id shard sequence key counter time``; the shard as its row's key (``<stream>/<shard>`` for a
    stream after the first of several)."""
    body = json.loads(record.data)
    shard = record.shard_id if record.stream == HOME[0] else f"{record.stream}/{record.shard_id}"
    fields = (body["id"], shard, record.sequence_number, body["key"], body["counter"], f"{time.time():.6f}")
    return (" ".join(str(f) for f in fields) + "\n").encode()


#: The application's first stream (set by main()): its shards are named by their IDs alone.
HOME = [""]


if __name__ == "__main__":
    sys.exit(main())
