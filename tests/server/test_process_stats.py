"""What process*() tells the stats receiver, on moto's server: each record handed over once
(``record_delivered``, as ``next()`` counts it), and each record its handler did once (``record_handled``), on
every path: one worker, several, by key, and batches; retried records count once, dead-lettered ones not. The
same holds for a receiver that takes runs (``records_delivered``, ``records_handled``)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from demo.servers import LocalServer
from kinsumer import Failure, Kinsumer, Record, StatReceiver
from tests.helpers import wait_until
from tests.server.conftest import SERVER_CONFIG

pytestmark = pytest.mark.server

RECORDS, FAILS_ONCE, ALWAYS_FAILS = 40, {3, 17}, {9}


class Counted(StatReceiver):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.delivered: Counter[str] = Counter()
        self.handled: Counter[str] = Counter()
        self.durations: list[float] = []
        self.dead = 0

    def record_delivered(self, shard_id: str, latency_seconds: float) -> None:
        with self.lock:
            self.delivered[shard_id] += 1

    def record_handled(self, shard_id: str, seconds: float) -> None:
        with self.lock:
            self.handled[shard_id] += 1
            self.durations.append(seconds)

    def dead_lettered(self, shard_id: str, reason: str) -> None:
        with self.lock:
            self.dead += 1


class CountedRuns(Counted):
    """A receiver of runs: one call for several records where process() hands them over in a row."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[int] = []

    def records_delivered(self, shard_id: str, count: int, latency_seconds: float) -> None:
        with self.lock:
            self.delivered[shard_id] += count
            self.runs.append(count)

    def records_handled(self, shard_id: str, count: int, seconds: float) -> None:
        with self.lock:
            self.handled[shard_id] += count
            self.durations.append(seconds)


@pytest.mark.parametrize("receiver", [Counted, CountedRuns], ids=["records", "runs"])
@pytest.mark.parametrize(
    "options",
    [{}, {"concurrency": 3}, {"concurrency": 3, "ordering": "key"}, {"batches": True}],
    ids=["one worker", "three workers", "by key", "batches"],
)
def test_each_record_is_delivered_once_and_handled_once_unless_dead_lettered(
    moto_server: LocalServer,
    new_stream: Callable[[int], str],
    app: str,
    options: dict[str, Any],
    receiver: type[Counted],
) -> None:
    stream = new_stream(2)
    kinesis = moto_server.client("kinesis")
    for i in range(RECORDS):
        kinesis.put_record(StreamName=stream, Data=json.dumps({"id": i}).encode(), PartitionKey=f"k{i % 5}")
    stats = receiver()
    one_worker = not options
    calls: Counter[int] = Counter()
    done: set[int] = set()
    dead: list[int] = []
    lock = threading.Lock()

    def handle_one(record: Record) -> None:
        i = int(json.loads(record.data)["id"])
        with lock:
            calls[i] += 1
            if i in ALWAYS_FAILS or (i in FAILS_ONCE and calls[i] == 1):
                raise ValueError(f"record {i}")
            done.add(i)

    def handle_batch(records: list[Record]) -> list[Record]:
        failed = []
        for record in records:
            try:
                handle_one(record)
            except ValueError:
                failed.append(record)
        return failed

    def sink(failure: Failure) -> None:
        with lock:
            dead.append(int(json.loads(failure.record.data)["id"]))

    batches = options.pop("batches", False)
    config = attrs.evolve(SERVER_CONFIG, stats=stats)
    k = Kinsumer(stream, app, "c1", config, kinesis=kinesis, dynamodb=moto_server.client("dynamodb"))
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with k:
                if batches:
                    k.process_batches(handle_batch, max_records=8, max_wait=0.2, max_attempts=2, dead_letter=sink)
                else:
                    k.process(handle_one, max_attempts=2, dead_letter=sink, **options)
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(done) + len(dead) == RECORDS or bool(errors), 60, "every record done or dead")
        wait_until(lambda: sum(stats.handled.values()) >= len(done), 10, "the last handled record counted")
    finally:
        k.stop()
        thread.join(30)
    assert not errors and not thread.is_alive(), errors
    assert sorted(dead) == sorted(ALWAYS_FAILS) and done == set(range(RECORDS)) - ALWAYS_FAILS
    with stats.lock:
        assert sum(stats.delivered.values()) == RECORDS  # each once, retries not again
        assert sum(stats.handled.values()) == RECORDS - len(ALWAYS_FAILS)  # retried ones once, dead ones not
        assert set(stats.handled) <= set(stats.delivered) and len(stats.delivered) == 2
        assert stats.dead == len(ALWAYS_FAILS)
        assert all(0 <= seconds < 30 for seconds in stats.durations)
        if isinstance(stats, CountedRuns) and one_worker:  # the records stored before it began: runs of several
            assert max(stats.runs) > 1, stats.runs
