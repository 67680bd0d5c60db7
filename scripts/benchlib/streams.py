"""Several streams in one application against an application per stream, on the same records.

Two streams of ``SHARDS`` shards each hold ``RECORDS`` records of ``SIZE`` bytes (written once,
as the throughput section fills its stream). In each run both contenders read every record of
both streams from TRIM_HORIZON, one after the other (which goes first alternates from run to
run), each under fresh application names (empty tables):

- ``two-stream app``: one application listing both streams, 2 clients;
- ``two single-stream apps``: an application per stream, 2 clients each (4 clients).

Every client is a Kinsumer of this process (default config) read by a thread of its own through
``next_record()``. The clock runs from the first ``run()`` to the last record of both streams;
every DynamoDB call the clients make over the same time is counted with a botocore
``before-call`` hook (the table creation before and the stop after are not counted). Each record
is checked off by stream, shard and sequence number: a run raises if one is missing.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence

import attrs

from demo.servers import LocalServer
from kinsumer import Kinsumer

from .steady import CallCounter
from .throughput import Filled, fill

__all__ = ["CLIENTS", "CONTENDERS", "RECORDS", "SHARDS", "SIZE", "StreamsRead", "compare", "fill_streams"]

SHARDS = 4  # per stream
RECORDS = 50_000  # per stream: a read of some 5 s, past the first commits and membership rounds
SIZE = 100  # bytes per record
CLIENTS = 2  # per application
DEADLINE = 60.0  # seconds a contender may take to deliver every record
CONTENDERS = ("two-stream app", "two single-stream apps")


@attrs.frozen
class StreamsRead:
    """One contender's read of both streams."""

    contender: str
    records: int  # distinct records delivered (every record of both streams)
    seconds: float  # first run() to the last record
    dynamodb_calls: int  # every client's, over the same seconds
    shards: int  # of both streams
    duplicates: int  # records delivered more than once

    @property
    def rate(self) -> float:
        return self.records / self.seconds

    @property
    def calls_per_shard_minute(self) -> float:
        return self.dynamodb_calls / self.shards / (self.seconds / 60)


class _Tally:
    """The records delivered, by stream; ``done`` is set when every written record has come."""

    def __init__(self, written: dict[str, int]) -> None:
        self._written = written
        self._seen: dict[str, set[tuple[str, str]]] = {stream: set() for stream in written}
        self._left = sum(written.values())
        self._lock = threading.Lock()
        self.duplicates = 0
        self.done = threading.Event()
        self.ended = 0.0
        self.errors: list[BaseException] = []

    def read(self, k: Kinsumer) -> None:
        """A reader thread's body: take records until ``k`` stops."""
        try:
            while (record := k.next_record()) is not None:
                key = (record.shard_id, record.sequence_number)
                with self._lock:
                    seen = self._seen[record.stream]
                    if key in seen:
                        self.duplicates += 1
                        continue
                    seen.add(key)
                    self._left -= 1
                    if self._left == 0:
                        self.ended = time.perf_counter()
                        self.done.set()
        except BaseException as exc:  # noqa: BLE001 - reported on the measuring thread
            self.errors.append(exc)
            self.done.set()

    def missing(self) -> dict[str, int]:
        """Records of each stream not delivered (only streams that lack some)."""
        with self._lock:
            left = {stream: self._written[stream] - len(seen) for stream, seen in self._seen.items()}
        return {stream: n for stream, n in left.items() if n}


def fill_streams(server: LocalServer) -> list[Filled]:
    """The two streams, ``RECORDS`` records of ``SIZE`` bytes in each."""
    return [fill(server, SHARDS, RECORDS, SIZE) for _ in range(2)]


def _clients(server: LocalServer, streams: Sequence[str] | str, counter: CallCounter) -> list[Kinsumer]:
    """``CLIENTS`` clients of a fresh application reading ``streams``, counting their DynamoDB calls."""
    app = f"bench-streams-{uuid.uuid4().hex[:8]}"
    clients = []
    for n in range(CLIENTS):
        dynamodb = server.client("dynamodb")
        dynamodb.meta.events.register("before-call.dynamodb", counter)
        clients.append(Kinsumer(streams, app, f"streams-{n}", kinesis=server.client("kinesis"), dynamodb=dynamodb))
    return clients


def read_both(server: LocalServer, filled: Sequence[Filled], contender: str) -> StreamsRead:
    """Every record of both streams through ``contender``'s clients (see the module's docstring)."""
    names = [f.stream for f in filled]
    counter = CallCounter()
    if contender == CONTENDERS[0]:
        apps = [_clients(server, names, counter)]
    else:
        apps = [_clients(server, name, counter) for name in names]
    clients = [k for app in apps for k in app]
    for app in apps:
        app[0].create_required_tables()
    tally = _Tally({f.stream: f.total for f in filled})
    readers = [threading.Thread(target=tally.read, args=(k,), name=f"bench-reader-{i}") for i, k in enumerate(clients)]
    try:
        counter.counting = True
        started = time.perf_counter()
        for k in clients:
            k.run()
        for thread in readers:
            thread.start()
        finished = tally.done.wait(DEADLINE)
        calls, counter.counting = counter.calls, False
        if tally.errors:
            raise tally.errors[0]
        missing = tally.missing()
        if not finished or missing:
            raise RuntimeError(f"{contender}: records missing after {DEADLINE:.0f} s, by stream: {missing}")
    finally:
        counter.counting = False
        for k in clients:
            k.stop()
        for thread in readers:
            if thread.ident is not None:
                thread.join()
        for app in apps:
            app[0].delete_tables()
    return StreamsRead(
        contender, sum(f.total for f in filled), tally.ended - started, calls, SHARDS * len(filled), tally.duplicates
    )


def compare(server: LocalServer, runs: int, say: Callable[[str], None] | None = None) -> dict[str, list[StreamsRead]]:
    """``runs`` runs of both contenders on the same two streams (filled once, deleted at the end), taking
    turns at going first."""
    kinesis = server.client("kinesis")
    filled = fill_streams(server)
    measured: dict[str, list[StreamsRead]] = {contender: [] for contender in CONTENDERS}
    try:
        for n in range(runs):
            order = CONTENDERS if n % 2 == 0 else CONTENDERS[::-1]
            for contender in order:
                result = read_both(server, filled, contender)
                measured[contender].append(result)
                if say is not None:
                    say(
                        f"  run {n + 1}, {contender}: {result.rate:,.0f} records/s ({result.records} in "
                        f"{result.seconds:.2f} s), {result.dynamodb_calls} DynamoDB calls = "
                        f"{result.calls_per_shard_minute:.0f} per shard-minute, {result.duplicates} duplicates"
                    )
    finally:
        for f in filled:
            kinesis.delete_stream(StreamName=f.stream)
    return measured
