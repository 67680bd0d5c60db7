"""The Kinsumer's public behaviour against moto's in-process mock: errors, lifecycle, delivery."""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import attrs
import boto3
import botocore.config
import botocore.exceptions
import pytest

from demo.servers import free_port
from kinsumer import (
    AlreadyStarted,
    AWSError,
    CheckpointModeError,
    Config,
    Kinsumer,
    NoRecordWithin,
    NotStarted,
    Record,
    StatReceiver,
    StreamNotFound,
    TableNotFound,
)
from kinsumer.coordination import checkpoints_table
from kinsumer.coordination.commit_schedule import CommitSchedule
from kinsumer.reading.polling import PollingReader
from tests.aws.conftest import FAST
from tests.helpers import CountingStats, wait_until

SHARD = "shardId-000000000000"


@pytest.fixture
def stream(kinesis: Any) -> str:
    kinesis.create_stream(StreamName="clicks", ShardCount=1)
    return "clicks"


def make(kinesis: Any, db: Any, config: Config = FAST, stream: str = "clicks", tables: bool = True) -> Kinsumer:
    k = Kinsumer(stream, "app", "worker", config, kinesis=kinesis, dynamodb=db)
    if tables:
        k.create_required_tables()
    return k


@pytest.fixture
def consumer(kinesis: Any, db: Any, stream: str) -> Iterator[Kinsumer]:
    k = make(kinesis, db)
    yield k
    k.stop()


def put(kinesis: Any, *payloads: bytes) -> None:
    for p in payloads:
        kinesis.put_record(StreamName="clicks", Data=p, PartitionKey="k")


def stored_checkpoint(db: Any) -> checkpoints_table.CheckpointRow | None:
    return checkpoints_table.read_row(db, "app_checkpoints", SHARD)


# ---------------------------------------------------------------- bad input


def test_the_names_go_by_keyword_and_the_client_name_is_no_identity(kinesis: Any, db: Any) -> None:
    """Two clients named alike are two clients, each with a new random ID; a fixed client_id is the identity."""
    a = Kinsumer(stream_name="clicks", application_name="app", client_name="worker-1", config=FAST, kinesis=kinesis,
                 dynamodb=db)  # fmt: skip
    b = Kinsumer("clicks", "app", "worker-1", FAST, kinesis=kinesis, dynamodb=db)
    assert (a.stream_name, a.application_name, a.client_name) == ("clicks", "app", "worker-1")
    assert a.client_id != b.client_id and str(uuid.UUID(a.client_id)) == a.client_id
    fixed = Kinsumer("clicks", "app", "other", attrs.evolve(FAST, client_id="worker-1"), kinesis=kinesis, dynamodb=db)
    assert fixed.client_id == "worker-1"


def test_unknown_stream_raises_from_run(kinesis: Any, db: Any) -> None:
    k = make(kinesis, db, stream="nope")
    with pytest.raises(StreamNotFound, match="'nope'"):
        k.run()
    assert db.scan(TableName="app_clients")["Items"] == []
    k.stop()


def test_missing_tables_are_named_with_the_fix(kinesis: Any, db: Any, stream: str) -> None:
    k = make(kinesis, db, tables=False)
    with pytest.raises(TableNotFound) as info:
        k.run()
    assert info.value.table_name == "app_clients"
    assert "create_required_tables()" in str(info.value)


def test_an_unreachable_endpoint_is_a_kinsumer_error_from_run_and_the_admin_calls() -> None:
    closed_port = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    options = botocore.config.Config(connect_timeout=1, retries={"max_attempts": 1})
    clients = {
        service: boto3.client(service, endpoint_url=closed_port, region_name="us-east-1", config=options)
        for service in ("kinesis", "dynamodb")
    }
    k = Kinsumer("clicks", "app", "worker", FAST, **clients)
    for call in (k.create_required_tables, k.delete_tables, k.run):
        with pytest.raises(AWSError, match="cannot reach") as info:
            call()
        assert isinstance(info.value.__cause__, botocore.exceptions.EndpointConnectionError)


def test_next_in_manual_mode_names_the_right_call(kinesis: Any, db: Any, stream: str) -> None:
    k = make(kinesis, db, attrs.evolve(FAST, manual_checkpointing=True))
    with pytest.raises(CheckpointModeError, match=r"next\(\) is not available.*use next_with_checkpointer\(\)"):
        k.next()
    with pytest.raises(CheckpointModeError, match="next_record_with_checkpointer"):
        k.next_record()


def test_checkpointer_calls_in_auto_mode_name_the_right_call(consumer: Kinsumer) -> None:
    with pytest.raises(CheckpointModeError, match=r"use next\(\) or next_record\(\)"):
        consumer.next_with_checkpointer()
    with pytest.raises(CheckpointModeError):
        consumer.next_record_with_checkpointer()


@pytest.mark.parametrize(
    ("called", "call"),
    [
        ("next()", lambda k: k.next()),
        ("next_record()", lambda k: k.next_record()),
        ("next(k)", next),
        ("for record in k", lambda k: [r for r in k]),
        ("process()", lambda k: k.process(lambda record: None)),
        ("process_batches()", lambda k: k.process_batches(lambda records: None)),
    ],
)
def test_a_call_before_run_names_itself(consumer: Kinsumer, called: str, call: Any) -> None:
    with pytest.raises(NotStarted, match=r"call run\(\) first") as info:
        call(consumer)
    assert str(info.value).startswith(f"{called} before run()")
    assert info.value.called == called


@pytest.mark.parametrize(
    ("called", "call"),
    [
        ("next_with_checkpointer()", lambda k: k.next_with_checkpointer()),
        ("next_record_with_checkpointer()", lambda k: k.next_record_with_checkpointer()),
    ],
)
def test_a_manual_call_before_run_names_itself(kinesis: Any, db: Any, stream: str, called: str, call: Any) -> None:
    k = make(kinesis, db, attrs.evolve(FAST, manual_checkpointing=True))
    with pytest.raises(NotStarted) as info:
        call(k)
    assert str(info.value).startswith(f"{called} before run()")


@pytest.mark.parametrize(
    ("called", "call"),
    [
        ("anext()", lambda k: k.anext()),
        ("anext_record()", lambda k: k.anext_record()),
        ("aprocess()", lambda k: k.aprocess(_async_handler)),
        ("aprocess_batches()", lambda k: k.aprocess_batches(_async_handler)),
    ],
)
def test_an_async_call_before_run_names_itself(consumer: Kinsumer, called: str, call: Any) -> None:
    with pytest.raises(NotStarted) as info:
        asyncio.run(call(consumer))
    assert str(info.value).startswith(f"{called} before run()")


async def _async_handler(record: object) -> None:
    return None


def test_run_twice(consumer: Kinsumer) -> None:
    consumer.run()
    with pytest.raises(AlreadyStarted, match=r"run\(\) was already called"):
        consumer.run()
    consumer.stop()
    with pytest.raises(AlreadyStarted, match=r"run\(\) was already called"):
        consumer.run()


def test_run_after_a_stop_that_came_first_says_so(consumer: Kinsumer) -> None:
    consumer.stop()
    with pytest.raises(AlreadyStarted, match=r"stop\(\) was called before run\(\).*create a new one"):
        consumer.run()


def test_status_after_stop_lists_no_shard(consumer: Kinsumer, kinesis: Any) -> None:
    put(kinesis, b"a")
    consumer.run()
    assert consumer.next(timeout=10) == b"a"
    assert [s.captured for s in consumer.status().shards] == [True]
    consumer.stop()
    status = consumer.status()
    assert (status.state, status.shards, status.is_leader) == ("stopped", (), False)


# ---------------------------------------------------------------- lifecycle


def test_stop_is_idempotent_and_next_returns_none_after(consumer: Kinsumer, db: Any) -> None:
    consumer.run()
    consumer.stop()
    consumer.stop()
    assert consumer.next() is None
    assert consumer.next_record(timeout=0.1) is None
    assert db.scan(TableName="app_clients")["Items"] == []  # deregistered


def test_stop_from_another_thread_wakes_a_blocked_next(consumer: Kinsumer) -> None:
    consumer.run()
    result: list[object] = ["unset"]
    reader = threading.Thread(target=lambda: result.__setitem__(0, consumer.next()))
    reader.start()
    consumer.stop()
    reader.join(10)
    assert not reader.is_alive()
    assert result == [None]


def test_next_with_a_timeout_raises_timeout_error(consumer: Kinsumer) -> None:
    consumer.run()
    with pytest.raises(TimeoutError):
        consumer.next(timeout=0.3)


def test_context_manager_and_iteration(kinesis: Any, db: Any, stream: str) -> None:
    put(kinesis, b"a", b"b", b"c")
    got: list[Record] = []
    with make(kinesis, db) as k:
        for record in k:
            got.append(record)
            if len(got) == 3:
                break
    assert [r.data for r in got] == [b"a", b"b", b"c"]
    assert {r.shard_id for r in got} == {SHARD}
    assert all(r.partition_key == "k" and r.retrieved_at >= r.approximate_arrival_timestamp for r in got)
    assert k.next() is None


def test_the_kinsumer_is_its_own_iterator_and_next_of_it_gives_records_until_stopped(
    kinesis: Any, db: Any, stream: str
) -> None:
    put(kinesis, b"a", b"b", b"c")
    with make(kinesis, db) as k:
        assert iter(k) is k
        first = next(k)
        rest = [next(k), next(k)]
        stopper = threading.Thread(target=k.stop)  # next(k) waits for records: a stop from elsewhere ends it
        stopper.start()
        with pytest.raises(StopIteration):
            next(k)
        stopper.join(30)
    assert [first.data, *(r.data for r in rest)] == [b"a", b"b", b"c"]
    with pytest.raises(StopIteration):  # and keeps saying so, as an iterator must
        next(k)
    assert list(k) == []
    row = stored_checkpoint(db)
    assert row is not None and row.sequence_number == rest[-1].sequence_number  # the last one counted on the stop


def test_next_of_a_kinsumer_in_manual_mode_says_what_to_call(kinesis: Any, db: Any, stream: str) -> None:
    k = make(kinesis, db, attrs.evolve(FAST, manual_checkpointing=True))
    with pytest.raises(CheckpointModeError, match=r"next\(k\) is not available.*use next_with_checkpointer\(\)"):
        next(k)
    with pytest.raises(CheckpointModeError, match=r"for record in k is not available"):
        iter(k)


# ---------------------------------------------------------------- delivery semantics


def test_auto_mode_counts_a_record_only_when_the_next_is_asked_for(consumer: Kinsumer, kinesis: Any, db: Any) -> None:
    put(kinesis, b"1", b"2", b"3")
    consumer.run()
    first = consumer.next_record(timeout=10)
    second = consumer.next_record(timeout=10)
    assert first is not None and second is not None
    # `first` is committed while `second` is in hand, and what any later commit would store stays `first`
    wait_until(lambda: (r := stored_checkpoint(db)) is not None and r.sequence_number is not None, 10, "a commit")
    row = stored_checkpoint(db)
    assert row is not None and row.sequence_number == first.sequence_number
    assert [s.checkpoint for s in consumer.status().shards] == [first.sequence_number]
    third = consumer.next_record(timeout=10)
    assert third is not None
    wait_until(lambda: stored_checkpoint(db).sequence_number == second.sequence_number, 10, "second committed")  # type: ignore[union-attr]


def test_the_stat_receiver_is_flushed_once_as_stop_ends(kinesis: Any, db: Any, stream: str) -> None:
    log = EventLog()
    put(kinesis, b"a")
    k = make(kinesis, db, attrs.evolve(FAST, stats=log))
    k.run()
    assert k.next(timeout=10) == b"a"
    assert "flush" not in log.events
    k.stop()
    k.stop()  # idempotent: no second flush
    assert log.events == ["gained", "lost", "flush"]


def test_a_clean_stop_counts_the_record_in_hand(consumer: Kinsumer, kinesis: Any, db: Any) -> None:
    put(kinesis, b"1", b"2")
    consumer.run()
    assert consumer.next(timeout=10) == b"1"
    consumer.stop()
    row = stored_checkpoint(db)
    assert row is not None and row.owner_id is None
    assert int(row.sequence_number or 0) > 0
    restarted = make(kinesis, db)
    with restarted:
        assert restarted.next(timeout=10) == b"2"


def test_an_exception_in_the_with_body_does_not_count_the_record_in_hand(kinesis: Any, db: Any, stream: str) -> None:
    put(kinesis, b"1", b"2")
    with pytest.raises(RuntimeError), make(kinesis, db) as k:
        assert k.next(timeout=10) == b"1"
        raise RuntimeError("processing failed")
    with make(kinesis, db) as again:
        assert again.next(timeout=10) == b"1"


def test_manual_checkpoints_advance_over_the_contiguous_prefix(kinesis: Any, db: Any, stream: str) -> None:
    put(kinesis, *(str(i).encode() for i in range(5)))
    with make(kinesis, db, attrs.evolve(FAST, manual_checkpointing=True)) as k:
        taken = [k.next_record_with_checkpointer(timeout=10) for _ in range(5)]
        records = [r for r, _ in taken]
        marks = [c for _, c in taken]
        assert all(r is not None for r in records) and all(c is not None for c in marks)
        for i in (4, 2, 0):
            marks[i]()  # type: ignore[misc]
        wait_until(lambda: stored_checkpoint(db).sequence_number == records[0].sequence_number, 10, "prefix 0")  # type: ignore[union-attr]
        marks[1]()  # type: ignore[misc]
        marks[1]()  # type: ignore[misc]  # idempotent
        wait_until(lambda: stored_checkpoint(db).sequence_number == records[2].sequence_number, 10, "prefix 2")  # type: ignore[union-attr]
        with pytest.raises(TimeoutError):
            k.next_with_checkpointer(timeout=0.1)
    row = stored_checkpoint(db)
    assert row is not None and row.sequence_number == records[2].sequence_number  # 3 never acknowledged


def test_the_checkpointer_calls_return_a_pair_that_says_by_its_checkpoint_whether_it_holds_a_record(
    kinesis: Any, db: Any, stream: str
) -> None:
    """The pair unpacks as the tuple it always was, and once stopped it is ``(None, None)``, with names a type
    checker narrows on (tests/typed/checkpointed.py proves that part with mypy)."""
    put(kinesis, b"x", b"y")
    with make(kinesis, db, attrs.evolve(FAST, manual_checkpointing=True)) as k:
        got = k.next_with_checkpointer(timeout=10)
        assert got.checkpoint is not None and got.value == b"x"
        data, checkpoint = got
        assert (data, checkpoint) == (got.value, got.checkpoint) and got[1] is checkpoint
        checkpoint()
        whole = k.next_record_with_checkpointer(timeout=10)
        assert whole.checkpoint is not None and whole.value.data == b"y"
        whole.checkpoint()
        wait_until(lambda: getattr(stored_checkpoint(db), "sequence_number", None) == whole.value.sequence_number,
                   10, "the checkpoint of y")  # fmt: skip
    stopped = k.next_with_checkpointer()
    assert stopped == (None, None) and stopped.checkpoint is None and stopped.value is None
    assert k.next_record_with_checkpointer() == (None, None)
    data, checkpoint = stopped
    assert data is None and checkpoint is None

    async def taken_after_stop() -> tuple[object, object]:
        return await k.anext_with_checkpointer(), await k.anext_record_with_checkpointer()

    assert asyncio.run(taken_after_stop()) == ((None, None), (None, None))


def test_threads_sharing_a_consumer_register_each_shards_records_in_shard_order(
    kinesis: Any, db: Any, stream: str
) -> None:
    """The contiguous-prefix tracker relies on it: a record registered before an earlier one
    could be checkpointed while the earlier one is still unprocessed."""
    count = 600
    for start in range(0, count, 300):
        batch = [{"Data": b"%d" % i, "PartitionKey": "k"} for i in range(start, start + 300)]
        kinesis.put_records(StreamName=stream, Records=batch)
    taken: list[tuple[int, int]] = []  # (delivery token, sequence number)
    lock = threading.Lock()
    with make(kinesis, db, attrs.evolve(FAST, manual_checkpointing=True, buffer_size=50)) as k:

        def consume() -> None:
            while True:
                try:
                    record, checkpoint = k.next_record_with_checkpointer(timeout=2)
                except TimeoutError:
                    return
                assert record is not None and checkpoint is not None
                with lock:
                    taken.append((checkpoint._token, int(record.sequence_number)))
                checkpoint()

        threads = [threading.Thread(target=consume) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert len(taken) == count
    in_token_order = [seq for _, seq in sorted(taken)]
    assert in_token_order == sorted(in_token_order)


def test_stop_gives_up_waiting_for_manual_checkpoints_after_the_handoff_timeout(
    kinesis: Any, db: Any, stream: str
) -> None:
    put(kinesis, b"x")
    stats = CountingStats()
    k = make(kinesis, db, attrs.evolve(FAST, manual_checkpointing=True, handoff_timeout=0.5, stats=stats))
    k.run()
    data, never_called = k.next_with_checkpointer(timeout=10)
    assert data == b"x" and never_called is not None
    k.stop()
    assert [(shard, clean) for shard, _, clean in stats.handoffs] == [(SHARD, False)]
    row = stored_checkpoint(db)
    assert row is not None and row.owner_id is None and row.sequence_number is None
    never_called()  # after the release: a no-op
    assert stored_checkpoint(db) == row


# ---------------------------------------------------------------- background failures


def test_a_deleted_table_is_raised_from_next(consumer: Kinsumer, db: Any) -> None:
    consumer.run()
    db.delete_table(TableName="app_checkpoints")
    with pytest.raises(TableNotFound) as info:
        while True:
            consumer.next(timeout=10)
    assert info.value.table_name == "app_checkpoints"
    with pytest.raises(TableNotFound):  # sticky until stop
        consumer.next()
    consumer.stop()
    assert consumer.next() is None


def test_access_denied_on_get_records_is_raised_from_next(consumer: Kinsumer, kinesis: Any) -> None:
    def deny(**_: Any) -> None:
        raise botocore.exceptions.ClientError(
            {"Error": {"Code": "AccessDeniedException", "Message": "not allowed"}}, "GetRecords"
        )

    kinesis.meta.events.register("before-call.kinesis.GetRecords", deny)
    consumer.run()
    with pytest.raises(AWSError) as info:
        consumer.next(timeout=10)
    assert info.value.code == "AccessDeniedException"
    assert info.value.operation == "GetRecords"
    assert isinstance(info.value.__cause__, botocore.exceptions.ClientError)


# ---------------------------------------------------------------- reading


def test_get_records_calls_on_a_shard_are_at_least_throttle_delay_apart_even_when_retried(
    kinesis: Any, db: Any, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[float] = []  # when the reader made each attempt, as it noted it for its throttle
    plan = iter(range(1_000_000))
    attempt = PollingReader._attempt

    def noted(reader: PollingReader, iterator: str, limit: int) -> dict[str, Any]:
        try:
            return attempt(reader, iterator, limit)
        finally:
            sent.append(reader._attempts[-1])  # the reader's own time of this attempt, not a later hook's

    def throttle_every_other(**_: Any) -> None:
        if next(plan) % 2:
            raise botocore.exceptions.ClientError(
                {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}}, "GetRecords"
            )

    monkeypatch.setattr(PollingReader, "_attempt", noted)
    kinesis.meta.events.register("before-call.kinesis.GetRecords", throttle_every_other)
    put(kinesis, b"a", b"b")
    with make(kinesis, db) as k:  # one shard, so one reader makes every call
        assert k.next(timeout=10) == b"a"
        assert k.next(timeout=10) == b"b"
        wait_until(lambda: len(sent) >= 8, 20, "eight GetRecords calls")
    gaps = [later - earlier for earlier, later in itertools.pairwise(sent[:8])]
    # the bug this guards against sent the call after a retry 2.5 ms after the previous one; the reader's
    # timers may fire a clock tick (1 ns) early, and a difference of floats be a hair short
    assert min(gaps) >= FAST.throttle_delay - 1e-6, gaps


def is_commit(params: dict[str, Any]) -> bool:
    """An UpdateItem of the checkpoints table that commits: not a capture (SET #owner) nor a release
    (REMOVE #owner); it may remove the sub-sequence of a checkpoint that covers a whole record."""
    update = params["UpdateExpression"]
    return params["TableName"].endswith("_checkpoints") and update.startswith("SET #lu") and "#owner" not in update


def injected_500() -> botocore.exceptions.ClientError:
    return botocore.exceptions.ClientError(
        {"Error": {"Code": "InternalServerError", "Message": "injected"}}, "UpdateItem"
    )


def is_clock_commit(params: dict[str, Any]) -> bool:
    """A commit made by the commit thread."""
    return threading.current_thread().name == "kinsumer-commits" and is_commit(params)


def stall_the_heartbeat(db: Any) -> threading.Event:
    """While the returned event is set, every heartbeat fails with a 500 (a pause, DynamoDB out of reach)."""
    stalled = threading.Event()

    def fail(params: dict[str, Any], **_: Any) -> None:
        if stalled.is_set() and params["TableName"] == "app_clients":
            raise injected_500()

    db.meta.events.register("provide-client-params.dynamodb.PutItem", fail)
    return stalled


def take_over_once_dead(db: Any) -> None:
    """Another client takes the shard as it may once our client looks dead (it never heartbeats itself)."""
    max_age_ms = FAST.effective_client_record_max_age * 1000

    def our_row_is_old() -> bool:
        rows = db.scan(TableName="app_clients", ConsistentRead=True)["Items"]
        return bool(rows) and all(time.time() * 1000 - int(r["LastUpdate"]["N"]) > max_age_ms for r in rows)

    wait_until(our_row_is_old, 10, "our client to look dead")
    thief = checkpoints_table.capture(
        db, "app_checkpoints", SHARD, owner_id="thief", owner_name="thief", taking=stored_checkpoint(db)
    )
    assert thief is not None


def test_commits_keep_their_own_clock_while_the_reader_retries(
    kinesis: Any, db: Any, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commits come from the commit thread, at most every commit_frequency, never from a reader's retry wait."""
    commits: list[tuple[float, str, str]] = []  # (when the committer started it, its thread, the sequence number)
    started = threading.local()  # the committer's time of the commit being written, on its thread
    start = CommitSchedule.started

    def note_start(schedule: CommitSchedule, shard_id: str, now: float) -> None:
        started.now = now
        start(schedule, shard_id, now)

    def note_commit(params: dict[str, Any], **_: Any) -> None:
        # a commit that stores no checkpoint (a lease confirmed after a heartbeat a loaded machine made late, or
        # the arrival of a record held) has no :seq: it is not one of the checkpoints this test follows
        seq = params["ExpressionAttributeValues"].get(":seq")
        if is_commit(params) and seq is not None:
            at = getattr(started, "now", math.nan)  # nan: a commit the clock did not start (a reader's)
            commits.append((at, threading.current_thread().name, seq["S"]))

    def throttle(**_: Any) -> None:
        if throttled.is_set():
            raise botocore.exceptions.ClientError(
                {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}}, "GetRecords"
            )

    throttled = threading.Event()
    monkeypatch.setattr(CommitSchedule, "started", note_start)
    db.meta.events.register("provide-client-params.dynamodb.UpdateItem", note_commit)
    kinesis.meta.events.register("before-call.kinesis.GetRecords", throttle)
    put(kinesis, *[str(i).encode() for i in range(8)])
    with make(kinesis, db) as k:
        previous = k.next_record(timeout=10)  # the first page holds all 8
        assert previous is not None and previous.data == b"0"
        throttled.set()  # from now on the reader only retries
        first = len(commits)
        for n in range(1, 6):  # each record asked for moves the checkpoint past the one before: a commit is due
            record = k.next_record(timeout=10)
            assert record is not None and record.data == str(n).encode()
            sequence = previous.sequence_number
            wait_until(lambda: any(c[2] == sequence for c in commits), 10, f"the commit of record {n - 1}")  # noqa: B023
            previous = record
        last = k.next_record(timeout=10)
    assert {name for _, name, _ in commits} == {"kinsumer-commits"}
    gaps = [later[0] - earlier[0] for earlier, later in itertools.pairwise(commits[first:])]
    assert all(gap >= FAST.commit_frequency - 1e-6 for gap in gaps), gaps  # (a difference of floats: to the µs)
    stored = stored_checkpoint(db)  # the clean stop counted the record in hand
    assert last is not None and stored is not None and stored.sequence_number == last.sequence_number


def test_an_idle_shard_writes_nothing_and_stays_owned_through_heartbeats(kinesis: Any, db: Any, stream: str) -> None:
    """Nothing moved, nothing written: the one write an idle shard may make confirms its lease after a
    heartbeat that landed too late to keep the chain (a new epoch), which a loaded machine can cause."""
    writes: list[str] = []
    epochs: list[int] = []

    def note(params: dict[str, Any], **_: Any) -> None:
        writes.append(params["TableName"])

    db.meta.events.register("provide-client-params.dynamodb.UpdateItem", note)
    db.meta.events.register("provide-client-params.dynamodb.PutItem", note)
    put(kinesis, b"a", b"b")
    # heartbeats every 0.25 s keep the chain for 1.5 s (max age 3 s): a beat must be 1.25 s late to break it
    with make(kinesis, db, attrs.evolve(FAST, client_record_max_age=3.0)) as k:
        first = k.next_record(timeout=10)
        assert first is not None and k.next(timeout=10) == b"b"  # a is processed: one commit; b stays in hand
        assert k._client.runtime is not None
        liveness = k._client.runtime.liveness
        liveness.subscribe(lambda epoch, _: epochs.append(epoch))
        before = liveness.epoch  # the commit of a, written after this, confirms the lease in this epoch
        wait_until(lambda: stored_checkpoint(db).sequence_number == first.sequence_number, 10, "a committed")  # type: ignore[union-attr]
        commits, heartbeats = writes.count("app_checkpoints"), writes.count("app_clients")
        wait_until(lambda: writes.count("app_clients") >= heartbeats + 10, 10, "ten more heartbeats")
        confirmations = len({*epochs, liveness.epoch} - {before})  # new epochs since: each may confirm the lease
        assert commits <= writes.count("app_checkpoints") <= commits + confirmations  # nothing moved: nothing else
        assert [s.captured for s in k.status().shards] == [True]


class EventLog(StatReceiver):
    """Shard gains and losses (and the flush at stop), in order, in a list the test adds its deliveries to."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def shard_gained(self, shard_id: str) -> None:
        self.events.append("gained")

    def shard_lost(self, shard_id: str) -> None:
        self.events.append("lost")

    def flush(self) -> None:
        self.events.append("flush")


def test_a_lease_whose_heartbeat_was_late_hands_nothing_on_until_confirmed(kinesis: Any, db: Any, stream: str) -> None:
    """A client whose heartbeat stalled (a pause, DynamoDB out of reach) delivers nothing more of
    a shard another client took meanwhile: it confirms the lease before handing records on."""
    log = EventLog()
    stalled = stall_the_heartbeat(db)
    put(kinesis, b"a")
    with make(kinesis, db, attrs.evolve(FAST, stats=log, client_id="me")) as k:
        assert k.next(timeout=10) == b"a"
        stalled.set()
        take_over_once_dead(db)  # another client took the shard; it never heartbeats: it is taken back later
        put(kinesis, b"b")
        with pytest.raises(NoRecordWithin):  # the heartbeat is late: nothing is handed on
            k.next(timeout=0.3)
        stalled.clear()  # the next heartbeat lands late: the confirmation finds the thief
        while (data := k.next(timeout=10)) != b"b":
            assert data == b"a"  # the record in hand was never committed: delivered again after a recapture
        log.events.append("delivered b")
    assert log.events[:4] == ["gained", "lost", "gained", "delivered b"], log.events


def test_records_already_queued_wait_for_a_late_heartbeat_and_go_with_the_lease_when_it_is_lost(
    kinesis: Any, db: Any, stream: str
) -> None:
    """Records taken from Kinesis before the heartbeat went late (a pause) are not handed on until
    the lease is confirmed; when the confirmation finds another owner they are dropped, not delivered."""
    log = EventLog()
    stalled = stall_the_heartbeat(db)
    put(kinesis, b"a", b"b", b"c")
    config = attrs.evolve(FAST, stats=log, client_id="me", manual_checkpointing=True)
    with make(kinesis, db, config) as k:
        first, checkpoint = k.next_record_with_checkpointer(timeout=10)  # b and c wait in the delivery
        assert first is not None and checkpoint is not None and first.data == b"a"
        checkpoint()
        wait_until(lambda: stored_checkpoint(db).sequence_number == first.sequence_number, 10, "a committed")
        stalled.set()
        take_over_once_dead(db)
        with pytest.raises(NoRecordWithin):  # the heartbeat is late: b is not handed on
            k.next_record_with_checkpointer(timeout=0.3)
        stalled.clear()  # the confirmation finds the thief: b and c are dropped, then taken back
        again, checkpoint = k.next_record_with_checkpointer(timeout=10)
        assert again is not None and again.data == b"b"
        log.events.append("delivered b")
    assert log.events[:4] == ["gained", "lost", "gained", "delivered b"], log.events


def test_a_commit_that_fails_past_its_deadline_is_counted_once_as_abandoned_and_tried_again(
    kinesis: Any, db: Any, stream: str
) -> None:
    stats = CountingStats()
    injected: list[float] = []

    def slow_failure(params: dict[str, Any], **_: Any) -> None:
        if is_clock_commit(params) and len(injected) < 2:
            injected.append(time.monotonic())
            time.sleep(FAST.commit_frequency * 1.5)  # past the round's deadline: no retry within the call
            raise injected_500()

    db.meta.events.register("provide-client-params.dynamodb.UpdateItem", slow_failure)
    put(kinesis, b"a", b"b")
    with make(kinesis, db, attrs.evolve(FAST, stats=stats)) as k:
        assert k.next(timeout=10) == b"a"
        second = k.next_record(timeout=10)  # a is processed now: its commit is due
        assert second is not None and second.data == b"b"
        wait_until(lambda: len(injected) == 2, 10, "two failed commits")
        wait_until(lambda: stored_checkpoint(db).sequence_number is not None, 10, "a commit after them")  # type: ignore[union-attr]
    # each fault counted once: its call's time was up (the next commit is a new call)
    assert stats.abandoned.count(("UpdateItem", "InternalServerError")) == len(injected) == 2
    assert not stats.retried[("UpdateItem", "InternalServerError")]
    stored = stored_checkpoint(db)  # later writes got through: the clean stop stored the record in hand
    assert stored is not None and stored.sequence_number == second.sequence_number


def test_record_payloads_are_never_logged(kinesis: Any, db: Any, stream: str, caplog: pytest.LogCaptureFixture) -> None:
    secret = b"payload-5f3c9e-must-not-be-logged"
    caplog.set_level(logging.DEBUG, logger="kinsumer")
    put(kinesis, secret)
    with make(kinesis, db) as k:
        assert k.next(timeout=10) == secret
    assert caplog.records, "kinsumer logged nothing at all"
    assert not [r for r in caplog.records if secret.decode() in r.getMessage()]


def test_a_failing_stat_receiver_never_stops_consumption(
    kinesis: Any, db: Any, stream: str, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken(CountingStats):
        def record_delivered(self, shard_id: str, latency_seconds: float) -> None:
            raise ZeroDivisionError("a bug in the user's metrics")

        def records_fetched(self, shard_id: str, count: int, millis_behind_latest: int | None) -> None:
            raise RuntimeError("another one, on the reader's thread")

    stats = Broken()
    put(kinesis, b"1", b"2", b"3")
    with caplog.at_level(logging.ERROR, logger="kinsumer"), make(kinesis, db, attrs.evolve(FAST, stats=stats)) as k:
        assert [k.next(timeout=10) for _ in range(3)] == [b"1", b"2", b"3"]
    failures = [r for r in caplog.records if "StatReceiver" in r.getMessage()]
    assert sorted(r.getMessage().split(".")[1].split(" ")[0] for r in failures) == [
        "record_delivered",
        "records_fetched",
    ]
    assert stats.calls["shard_gained"] == 1 and stats.calls["shard_lost"] == 1  # the others still arrive


def test_leaving_a_with_block_by_an_exception_does_not_wait_for_the_record_in_hand(
    kinesis: Any, db: Any, stream: str
) -> None:
    """The record the handler failed on is not processed: no handoff waits for it, the next run gets it."""
    put(kinesis, b"a", b"b", b"c")
    stats = CountingStats()
    config = attrs.evolve(FAST, handoff_timeout=120, stats=stats)  # a wait for the record would outlast the join
    make(kinesis, db, config).create_required_tables()
    failures: list[BaseException] = []

    def consume() -> None:
        try:
            with make(kinesis, db, config, tables=False) as k:
                for record in k:
                    if record.data == b"b":
                        raise KeyboardInterrupt  # Ctrl-C while processing b
        except KeyboardInterrupt as exc:
            failures.append(exc)

    thread = threading.Thread(target=consume)
    thread.start()
    thread.join(10)  # far less than handoff_timeout: it leaves at once (0.2-0.8 s measured)
    assert not thread.is_alive() and len(failures) == 1
    assert [(shard, clean) for shard, _, clean in stats.handoffs] == [(SHARD, True)]
    stored = stored_checkpoint(db)
    assert stored is not None and stored.sequence_number is not None  # a is processed, b is not
    with make(kinesis, db, tables=False) as again:
        assert again.next(timeout=10) == b"b"


def test_a_client_of_another_stream_refuses_to_join_the_application_naming_both_streams(kinesis: Any, db: Any) -> None:
    """Two streams have the same shard IDs: under one application they would share checkpoint rows."""
    from kinsumer import ConfigError

    kinesis.create_stream(StreamName="a", ShardCount=2)
    kinesis.create_stream(StreamName="b", ShardCount=2)
    first = make(kinesis, db, stream="a")
    first.run()
    second = make(kinesis, db, stream="b", tables=False)
    with pytest.raises(ConfigError, match=r"application 'app' consumes, 'a' .*app_metadata.*got 'b'"):
        second.run()
    assert [item["ID"]["S"] for item in db.scan(TableName="app_clients")["Items"]] == [first.client_id]
    again = make(kinesis, db, stream="a", tables=False)  # the same stream: fine
    again.run()
    again.stop()
    first.stop()
