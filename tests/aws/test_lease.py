"""ShardLease: the fenced writes of one shard's checkpoint row, and its named states."""

from __future__ import annotations

from typing import Any

import pytest

from kinsumer import Config, StatReceiver
from kinsumer.aws.retry import retry_call
from kinsumer.aws.tables import Tables, now_ms
from kinsumer.coordination import checkpoints_table
from kinsumer.coordination.lease import Commit, LeaseState, ShardLease
from kinsumer.coordination.liveness import Liveness
from kinsumer.coordination.runtime import Runtime
from kinsumer.coordination.streams import StreamScope
from kinsumer.delivery.delivery import Delivery
from kinsumer.reading.position import Position
from kinsumer.stats import GuardedStats

SHARD = "shardId-000000000000"


def call(fn: Any, operation: str) -> Any:
    return retry_call(fn, operation=operation, stats=StatReceiver())


def commit(lease: ShardLease, checkpoint: Position | None, lag: int | None, *, held: bool = False) -> bool:
    """A commit of ``checkpoint`` (and the lag), as the committer makes one; ``held``: the shard holds records
    not processed yet (the oldest arrived a second ago)."""
    arrival = now_ms() - 1000 if held else None
    return lease.commit(lambda: Commit(checkpoint, lag, oldest_arrival=arrival), call)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def runtime(kinesis: Any, db: Any, tables: Tables, client_id: str, clock: Clock | None = None) -> Runtime:
    """A runtime whose client has just heartbeated (its liveness on ``clock``)."""
    stats = GuardedStats(StatReceiver())
    rt = Runtime(
        kinesis=kinesis, dynamodb=db, streams=(StreamScope("s"),), tables=tables, config=Config(), client_id=client_id,
        client_name=client_id, delivery=Delivery(10, stats), stats=stats, on_fatal=lambda error: None,
    )  # fmt: skip
    rt.liveness = Liveness(rt.max_age, clock or Clock())
    rt.liveness.heartbeat_done(rt.liveness.now())
    return rt


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def lease(kinesis: Any, db: Any, tables: Tables, clock: Clock) -> ShardLease:
    return ShardLease(runtime(kinesis, db, tables, "me", clock), SHARD, parents=("shardId-parent",))


def row(db: Any, tables: Tables) -> checkpoints_table.CheckpointRow:
    stored = checkpoints_table.read_row(db, tables.checkpoints, SHARD)
    assert stored is not None
    return stored


def count_updates(db: Any) -> list[int]:
    calls: list[int] = []
    db.meta.events.register("before-call.dynamodb.UpdateItem", lambda **_: calls.append(1))
    return calls


def test_capture_commit_release(lease: ShardLease, db: Any, tables: Tables) -> None:
    assert lease.state is LeaseState.UNCLAIMED
    captured = lease.try_capture(call)
    assert captured is not None and lease.state is LeaseState.OWNED and lease.committed is None
    assert row(db, tables).parent_shard_ids == ("shardId-parent",)
    assert commit(lease, ("100", None), 7)
    assert (row(db, tables).sequence_number, row(db, tables).millis_behind_latest) == ("100", 7)
    assert commit(lease, ("90", None), None)  # backwards: refused, the lease stays alive
    assert row(db, tables).sequence_number == "100" and lease.committed == ("100", None)
    assert commit(lease, ("120", 3), None)  # inside an aggregate: user record 3 of record 120
    assert row(db, tables).checkpoint == ("120", 3)
    assert commit(lease, ("120", 1), None)  # back inside the same aggregate: refused too
    assert row(db, tables).checkpoint == ("120", 3)
    assert lease.release(("120", None), finished=False, call=call)  # the whole record: the sub-sequence goes
    assert lease.state is LeaseState.RELEASED
    released = row(db, tables)
    assert (released.checkpoint, released.owner_id, released.finished) == (("120", None), None, False)


def test_finish_marks_the_row(lease: ShardLease, db: Any, tables: Tables) -> None:
    lease.try_capture(call)
    assert lease.release(("5", None), finished=True, call=call)
    assert lease.state is LeaseState.FINISHED and row(db, tables).finished


def test_a_live_owner_keeps_the_shard(lease: ShardLease, kinesis: Any, db: Any, tables: Tables) -> None:
    other = ShardLease(runtime(kinesis, db, tables, "other"), SHARD)
    assert other.try_capture(call) is not None
    assert lease.try_capture(call) is None and lease.state is LeaseState.UNCLAIMED


def test_once_another_client_took_the_row_nothing_more_is_written(lease: ShardLease, db: Any, tables: Tables) -> None:
    lease.try_capture(call)
    assert commit(lease, ("10", None), None)
    # another client captures the row, as it may once our client looks dead
    seen = row(db, tables)
    taken = checkpoints_table.capture(db, tables.checkpoints, SHARD, owner_id="new", owner_name="new", taking=seen)
    assert taken is not None
    checkpoints_table.commit(db, tables.checkpoints, SHARD, owner_id="new", checkpoint=("50", None))
    assert not commit(lease, ("20", None), None)
    assert lease.state is LeaseState.LOST
    updates = count_updates(db)
    assert not commit(lease, ("30", None), None)
    assert not lease.release(("40", None), finished=True, call=call)
    assert updates == []  # fenced: not even tried
    stored = row(db, tables)
    assert (stored.sequence_number, stored.owner_id, stored.finished) == ("50", "new", False)


def test_an_idle_lease_writes_nothing_and_stays_fresh_through_heartbeats(
    lease: ShardLease, db: Any, tables: Tables, clock: Clock
) -> None:
    confirmed: list[float] = []
    lease.on_confirmed = confirmed.append
    lease.try_capture(call)
    assert commit(lease, ("10", None), None)
    updates = count_updates(db)
    for _ in range(5):  # heartbeats on time: the lease stays fresh, and idle commits write nothing
        clock.now += 3.0
        lease._rt.liveness.heartbeat_done(clock.now)
        assert commit(lease, ("10", None), 7) and lease.fresh()
    assert updates == []
    assert len(confirmed) == 2 + 5  # the capture, the first commit, each heartbeat


def test_after_a_late_heartbeat_a_lease_hands_nothing_on_until_a_write_confirms_it(
    lease: ShardLease, db: Any, tables: Tables, clock: Clock
) -> None:
    lease.try_capture(call)
    liveness = lease._rt.liveness
    clock.now += 5.0  # past half the max age (8 s by default) without a heartbeat
    assert not lease.fresh()
    updates = count_updates(db)
    assert commit(lease, None, None) and updates == []  # no write while the heartbeat is late
    liveness.heartbeat_done(clock.now)  # it landed late: a new epoch
    assert not lease.fresh() and lease.needs_confirming()
    assert commit(lease, None, None) and updates == []  # idle: confirmed when records come, not before
    assert not lease.fresh() and lease.needs_confirming()
    assert commit(lease, None, None, held=True) and len(updates) == 1  # records wait: the confirming write
    assert lease.fresh() and not lease.needs_confirming()


def test_a_lease_taken_while_the_heartbeat_was_late_is_lost_at_its_confirmation(
    lease: ShardLease, db: Any, tables: Tables, clock: Clock
) -> None:
    lease.try_capture(call)
    clock.now += 9.0  # paused: the others found this client dead and took the row as it was
    taken = checkpoints_table.capture(
        db, tables.checkpoints, SHARD, owner_id="new", owner_name="new", taking=row(db, tables)
    )
    assert taken is not None
    lease._rt.liveness.heartbeat_done(clock.now)
    assert not lease.fresh()
    assert not commit(lease, None, None, held=True)  # records came: the confirmation finds the row taken
    assert lease.state is LeaseState.LOST and row(db, tables).owner_id == "new"
