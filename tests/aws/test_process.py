"""Kinsumer.process() and process_batches() on moto's in-process mock: retries, dead letters, order, batches."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from kinsumer import Config, ConfigError, Failure, Kinsumer, KinsumerError, NotStarted, Record, RecordFailed
from kinsumer.coordination import checkpoints_table
from kinsumer.running import _STOP_GRACE
from tests.aws.conftest import FAST as AWS_FAST
from tests.faults import FaultPlan
from tests.helpers import CountingStats, wait_until

FAST = attrs.evolve(AWS_FAST, handoff_timeout=2)
QUICK = {"backoff": 0.01, "max_backoff": 0.05}


def make(kinesis: Any, db: Any, shards: int = 2, config: Config = FAST, name: str = "worker") -> Kinsumer:
    if "clicks" not in kinesis.list_streams()["StreamNames"]:
        kinesis.create_stream(StreamName="clicks", ShardCount=shards)
    k = Kinsumer("clicks", "app", name, config, kinesis=kinesis, dynamodb=db)
    k.create_required_tables()
    return k


def put(kinesis: Any, count: int, first: int = 0, keys: int = 8) -> list[int]:
    for i in range(first, first + count):
        kinesis.put_record(StreamName="clicks", Data=json.dumps({"id": i}).encode(), PartitionKey=f"k{i % keys}")
    return list(range(first, first + count))


def rid(record: Record) -> int:
    return int(json.loads(record.data)["id"])


class Handled:
    """What a handler saw: every call, in order, per shard; stops the consumer once ``until`` ids are done."""

    def __init__(self, k: Kinsumer, until: int, fail: Callable[[int, int], bool] = lambda rid, n: False) -> None:
        self.k, self.until, self.fail = k, until, fail
        self.lock = threading.Lock()
        self.calls: dict[int, int] = defaultdict(int)
        self.done: list[Record] = []
        self.in_shard: dict[str, int] = defaultdict(int)
        self.overlap = False
        self.dead: list[Failure] = []
        self.events: list[tuple[str, int]] = []  # ("done" | "dead", id), in the order they happened
        self._stopping = False

    def __call__(self, record: Record) -> None:
        with self.lock:
            self.in_shard[record.shard_id] += 1
            self.overlap |= self.in_shard[record.shard_id] > 1
            self.calls[rid(record)] += 1
            attempt = self.calls[rid(record)]
        try:
            if self.fail(rid(record), attempt):
                raise ValueError(f"record {rid(record)} is bad")
            with self.lock:
                self.done.append(record)
                self.events.append(("done", rid(record)))
        finally:
            with self.lock:
                self.in_shard[record.shard_id] -= 1
            self._maybe_stop()

    def sink(self, failure: Failure) -> None:
        with self.lock:
            self.dead.append(failure)
            self.events.append(("dead", rid(failure.record)))
        self._maybe_stop()

    def _maybe_stop(self) -> None:
        with self.lock:
            finished = len({rid(r) for r in self.done} | {rid(f.record) for f in self.dead}) >= self.until
            if not finished or self._stopping:
                return
            self._stopping = True
        threading.Thread(target=self.k.stop, daemon=True).start()

    def in_order(self) -> bool:
        by_shard: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for r in self.done:
            by_shard[r.shard_id].append((int(r.sequence_number), r.sub_sequence_number or 0))
        return all(seqs == sorted(seqs) for seqs in by_shard.values())


def run_process(k: Kinsumer, **kwargs: Any) -> None:
    with k:
        k.process(**kwargs)


def test_every_record_is_handled_once_in_shard_order_and_process_returns_at_stop(kinesis: Any, db: Any) -> None:
    k = make(kinesis, db)
    produced = put(kinesis, 60)
    handled = Handled(k, len(produced))
    run_process(k, handler=handled)
    assert sorted(rid(r) for r in handled.done) == produced
    assert handled.in_order() and not handled.dead


def test_a_failing_record_is_retried_then_dead_lettered_once_and_later_records_of_its_shard_wait(
    kinesis: Any, db: Any
) -> None:
    stats = CountingStats()
    k = make(kinesis, db, config=attrs.evolve(FAST, stats=stats))
    produced = put(kinesis, 40)
    handled = Handled(k, len(produced), fail=lambda i, n: i == 7 or (i == 11 and n <= 2))
    run_process(k, handler=handled, max_attempts=3, dead_letter=handled.sink, **QUICK)
    (failure,) = handled.dead
    assert (rid(failure.record), failure.attempts, failure.reason) == (7, 3, "raised")
    assert failure.error == "ValueError: record 7 is bad"
    assert (failure.stream, failure.application, failure.client_id) == ("clicks", "app", k.client_id)
    assert sorted(rid(r) for r in handled.done) == [i for i in produced if i != 7]  # 11 made it on its third call
    assert handled.calls[7] == 3 and handled.calls[11] == 3
    assert handled.in_order()
    seven = failure.record  # no later record of its shard was handled before it went to the sink
    later = {rid(r) for r in handled.done if r.shard_id == seven.shard_id and r.sequence_number > seven.sequence_number}
    assert later and all(handled.events.index(("done", i)) > handled.events.index(("dead", 7)) for i in later)
    assert stats.calls["dead_lettered"] == 1 and stats.calls["handler_failed"] == 5
    assert stats.calls["handler_retried"] == 4


def test_without_a_sink_record_failed_leaves_the_record_for_the_next_owner(kinesis: Any, db: Any) -> None:
    k = make(kinesis, db, shards=1)
    put(kinesis, 10)
    handled = Handled(k, 100, fail=lambda i, n: i == 4)
    with pytest.raises(RecordFailed, match=r"shardId-000000000000 at \d+ could not be handled: its handler raised 2 "
                       r"times \(last: ValueError: record 4 is bad\); pass dead_letter=") as info:  # fmt: skip
        run_process(k, handler=handled, max_attempts=2, **QUICK)
    assert isinstance(info.value, KinsumerError) and info.value.failure.attempts == 2
    assert [rid(r) for r in handled.done] == [0, 1, 2, 3]
    row = checkpoints_table.read_row(db, "app_checkpoints", "shardId-000000000000")
    assert row is not None and row.sequence_number == handled.done[-1].sequence_number  # not past record 4
    again = make(kinesis, db, shards=1, name="next-owner")
    retried = Handled(again, 6)
    run_process(again, handler=retried)
    assert [rid(r) for r in retried.done] == [4, 5, 6, 7, 8, 9]  # the next owner tries 4 again


def test_a_sink_that_raises_is_tried_again_then_record_failed_says_so(kinesis: Any, db: Any) -> None:
    k = make(kinesis, db, shards=1)
    put(kinesis, 3)
    handled = Handled(k, 100, fail=lambda i, n: i == 1)
    sink_calls = []

    def broken_sink(failure: Failure) -> None:
        sink_calls.append(failure)
        raise ConnectionError("the queue is down")

    with pytest.raises(RecordFailed, match=r"the dead-letter sink failed too \(ConnectionError: the queue") as info:
        run_process(k, handler=handled, max_attempts=2, dead_letter=broken_sink, **QUICK)
    assert len(sink_calls) == 2 and info.value.sink_error == "ConnectionError: the queue is down"


def test_concurrency_runs_shards_side_by_side_never_two_records_of_one_shard_and_keeps_order(
    kinesis: Any, db: Any
) -> None:
    k = make(kinesis, db, shards=4)
    produced = put(kinesis, 200, keys=40)
    running, most = [0], [0]
    lock = threading.Lock()
    flaky = Handled(k, len(produced), fail=lambda i, n: i % 17 == 0 and n == 1)

    def handler(record: Record) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        try:
            threading.Event().wait(0.002)  # long enough for calls to overlap
            flaky(record)
        finally:
            with lock:
                running[0] -= 1

    run_process(k, handler=handler, concurrency=4, **QUICK)
    assert sorted(rid(r) for r in flaky.done) == produced
    assert flaky.in_order() and not flaky.overlap
    assert most[0] > 1, "no two handler calls ever ran at once"


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"backoff": -1}, "backoff"),
        ({"backoff": 2.0, "max_backoff": 1.0}, "max_backoff"),
        ({"concurrency": 0}, "concurrency"),
        ({"dead_letter": "sqs"}, "dead_letter"),
        ({"ordering": "partition_key"}, "ordering"),
    ],
)
def test_bad_options_are_config_errors_naming_the_argument(
    kinesis: Any, db: Any, kwargs: dict[str, Any], name: str
) -> None:
    k = make(kinesis, db)
    with pytest.raises(ConfigError) as info:
        k.process(lambda r: None, **kwargs)
    assert info.value.field == name


def test_batches_are_consecutive_records_of_one_shard_partial_failures_go_again_and_a_raising_batch_is_bisected(
    kinesis: Any, db: Any
) -> None:
    k = make(kinesis, db, shards=2)
    produced = put(kinesis, 120, keys=16)
    done: list[Record] = []
    sizes: list[int] = []
    calls: dict[int, int] = defaultdict(int)
    dead: list[Failure] = []
    stopping = threading.Event()

    def finished() -> None:
        if len({rid(r) for r in done} | {rid(f.record) for f in dead}) >= len(produced) and not stopping.is_set():
            stopping.set()
            threading.Thread(target=k.stop, daemon=True).start()

    def handler(batch: list[Record]) -> list[Record] | None:
        sizes.append(len(batch))
        assert len({r.shard_id for r in batch}) == 1
        for r in batch:
            calls[rid(r)] += 1
        if any(rid(r) == 30 for r in batch):  # raises in every batch it is in: bisected down to it alone
            raise RuntimeError("30 breaks the batch")
        failed = [r for r in batch if rid(r) == 50 and calls[50] <= 1]  # fails once, reported
        good = batch if not failed else batch[: batch.index(failed[0])]
        done.extend(good)
        finished()
        return failed or None

    def sink(failure: Failure) -> None:
        dead.append(failure)
        finished()

    with k:
        k.process_batches(handler, max_records=25, max_wait=0.05, max_attempts=2, dead_letter=sink, **QUICK)
    assert [rid(f.record) for f in dead] == [30] and dead[0].attempts == 2 and "30 breaks" in dead[0].error
    assert sorted({rid(r) for r in done}) == [i for i in produced if i != 30]
    assert len(done) == len({rid(r) for r in done}), "a record was handled twice"
    assert max(sizes) <= 25 and any(size > 1 for size in sizes)
    by_shard: dict[str, list[int]] = defaultdict(list)
    for r in done:
        by_shard[r.shard_id].append(int(r.sequence_number))
    assert all(seqs == sorted(seqs) for seqs in by_shard.values())


def test_process_before_run_says_so(kinesis: Any, db: Any) -> None:
    k = make(kinesis, db)
    with pytest.raises(NotStarted):
        k.process(lambda r: None)


def test_a_shard_retrying_a_record_shows_in_status_and_in_the_row_for_kinsumer_status(kinesis: Any, db: Any) -> None:
    from kinsumer.status import read_status

    k = make(kinesis, db, shards=1)
    put(kinesis, 3)
    release = threading.Event()
    handled = Handled(k, 3, fail=lambda i, n: i == 1 and not release.is_set())
    seen: dict[str, Any] = {}

    def watch() -> None:
        def retrying() -> bool:
            owned = k.status().shards
            row = read_status(kinesis, db, "clicks", "app", max_age=10).shards[0]
            seen.update(owned=owned[0].retrying if owned else None, row=row.retrying)
            return bool(owned and owned[0].retrying and row.retrying)

        wait_until(retrying, 30, "the retry to show")
        release.set()  # the next call succeeds

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    run_process(k, handler=handled, max_attempts=1_000, backoff=0.2, max_backoff=0.2)
    watcher.join(30)
    assert seen["owned"] >= 1 and seen["row"].startswith("attempt ") and "ValueError" in seen["row"]
    assert sorted(rid(r) for r in handled.done) == [0, 1, 2]
    row = checkpoints_table.read_row(db, "app_checkpoints", "shardId-000000000000")
    assert row is not None and row.retrying is None  # the note went once the record was done


@pytest.mark.parametrize("concurrency", [1, 3])
def test_an_error_the_consumer_cannot_retry_is_raised_from_process_as_from_next(
    kinesis: Any, db: Any, concurrency: int
) -> None:
    from kinsumer import TableNotFound

    k = make(kinesis, db)
    put(kinesis, 5)
    k.run()
    db.delete_table(TableName="app_checkpoints")
    with pytest.raises(TableNotFound) as info:
        k.process(lambda record: None, concurrency=concurrency)
    assert info.value.table_name == "app_checkpoints"
    k.stop()


@pytest.mark.parametrize(("api", "concurrency"), [("process", 3), ("aprocess", 1)])
def test_stop_ends_process_while_no_reservation_can_be_written(
    kinesis: Any, db: Any, concurrency: int, api: str
) -> None:
    """Every wait inside process() / aprocess() ends when the consumer stops (issue 35): here its workers
    wait for the crash-loop guard's first reservation, which DynamoDB refuses, so no record may go to the
    handler; stop() must still end them, within its bound."""
    k = make(kinesis, db)
    put(kinesis, 20)
    broken = threading.Event()
    failing = FaultPlan(db, "UpdateItem", lambda n: "InternalServerError" if broken.is_set() else None)
    k.run()
    wait_until(lambda: sum(s.captured for s in k.status().shards) == 2, 10, "both shards captured")
    broken.set()  # from here on no checkpoint write succeeds: no reservation, no commit, no release
    calls: list[Record] = []
    ended = threading.Event()

    def consume() -> None:
        try:
            if api == "process":
                k.process(calls.append, concurrency=concurrency)
            else:

                async def handler(record: Record) -> None:
                    calls.append(record)

                asyncio.run(k.aprocess(handler, concurrency=concurrency))
        finally:
            ended.set()

    threading.Thread(target=consume, daemon=True).start()
    wait_until(lambda: failing.injected["InternalServerError"] >= 3, 20, "process() trying to write a reservation")
    assert calls == []  # nothing goes to a handler past what the row reserves
    stopping = threading.Thread(target=k.stop, daemon=True)
    stopping.start()
    bound = FAST.handoff_timeout + _STOP_GRACE
    assert ended.wait(bound), f"process() still running {bound:g} s after stop()"
    stopping.join(bound)
    assert not stopping.is_alive(), f"stop() still running after {bound:g} s"
    assert calls == []
