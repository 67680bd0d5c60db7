"""``process()`` across captures of one shard (issue 35), driven by hand through the real pieces.

A shard given away and taken back is a new capture: a new :class:`~kinsumer.delivery.progress.ShardProgress`
with a new crash-loop guard, made by the shard's worker (``ShardWorker._open``), whose reservations
are written by the :class:`~kinsumer.coordination.committer.Committer` through the shard's lease.
Here a :class:`Rig` makes the captures and hand-offs itself (the worker's own code, on a real
:class:`~kinsumer.reading.shard_loop.ShardLoop`), without a reader or a coordinator, on moto's
in-process DynamoDB, so the sequence is exactly the one written and nothing depends on timing.

Found in a soak: ``process()`` kept the ids of the guards it had begun, so a new capture's guard that
came to life at a freed guard's address was never begun, and its first record spun for ever in
``ShardGuard.hand`` waiting for a reservation no commit would write, unstoppable.
"""

from __future__ import annotations

import datetime as dt
import functools
import gc
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kinsumer import Config, StatReceiver
from kinsumer.aws.retry import retry_call
from kinsumer.aws.tables import Tables
from kinsumer.coordination import checkpoints_table
from kinsumer.coordination.committer import Committer
from kinsumer.coordination.lease import LeaseState
from kinsumer.coordination.liveness import Liveness
from kinsumer.coordination.row_reads import RowReads
from kinsumer.coordination.runtime import Runtime
from kinsumer.coordination.shard_worker import ShardWorker
from kinsumer.coordination.streams import StreamScope
from kinsumer.delivery.delivery import Delivery
from kinsumer.delivery.progress import ShardProgress
from kinsumer.errors import NoRecordWithin
from kinsumer.handling import shard_jobs
from kinsumer.handling.capture import guard_of
from kinsumer.handling.careful import Reservation
from kinsumer.handling.guard import ShardGuard
from kinsumer.handling.processor import Options, Origin, Processor
from kinsumer.reading.position import Position
from kinsumer.reading.shard_loop import ShardLoop
from kinsumer.record import Record
from kinsumer.stats import GuardedStats
from tests.faults import FaultPlan
from tests.helpers import wait_until

SHARD = "shardId-000000000000"
#: A lease that stays fresh for the whole test (no heartbeats here); no wait for acknowledgements on a handoff.
CONFIG = Config(shard_check_frequency=1.0, client_record_max_age=600.0, commit_frequency=0.5, handoff_timeout=0)
#: How long one guard call may take at most here (one DynamoDB write on moto in-process, or a stop).
BOUND = 10.0
FIRST = 1000  # the sequence number of the shard's first record


def call(fn: Callable[[], Any], operation: str) -> Any:
    return retry_call(fn, operation=operation, stats=StatReceiver())


def record(index: int) -> Record:
    now = dt.datetime.now(dt.UTC)
    return Record(b"%d" % index, "k", str(FIRST + index), SHARD, now, now)


def index_of(position: Position | None) -> int:
    """A record's index in the shard (-1: before the first)."""
    return -1 if position is None else int(position[0]) - FIRST


@attrs.define
class Capture:
    worker: ShardWorker
    progress: ShardProgress

    @property
    def guard(self) -> ShardGuard:
        guard = guard_of(self.progress)
        assert guard is not None
        return guard


class Rig:
    """One client's shard worker pieces, on moto's in-process DynamoDB: captures and hand-offs made by hand."""

    def __init__(self, kinesis: Any, db: Any, tables: Tables, client_id: str = "me") -> None:
        stats = GuardedStats(StatReceiver())
        self.db, self.tables = db, tables
        self.delivery = Delivery(CONFIG.buffer_size, stats)
        self.fatal: list[Exception] = []
        self.rt = Runtime(
            kinesis=kinesis, dynamodb=db, streams=(StreamScope("s"),), tables=tables, config=CONFIG,
            client_id=client_id, client_name=client_id, delivery=self.delivery, stats=stats,
            on_fatal=self.fatal.append,
        )  # fmt: skip
        self.silent_for = 0.0  # how long this client's heartbeat went unseen, all told (see taken_by_another)
        self.rt.liveness = Liveness(self.rt.max_age, lambda: time.monotonic() + self.silent_for)
        self.rt.liveness.heartbeat_done(self.rt.liveness.now())
        self.loop = ShardLoop(threads=2)
        self.loop.start()
        self.committer = Committer(self.rt)  # its clock is not started: commits come when a test says

    def capture(self) -> Capture | None:
        """Capture the shard as its worker does (None if another client holds it)."""
        worker = ShardWorker(
            self.rt, SHARD, (), self.committer, _no_reader, self.loop, self.rt.streams[0], RowReads(self.rt, self.loop)
        )
        row = worker.lease.try_capture(call)
        return None if row is None else Capture(worker, worker._open(row))

    def push(self, capture: Capture, count: int) -> list[int]:
        """Queue the next ``count`` records after the capture's checkpoint; their indexes."""
        start = index_of(capture.progress.checkpoint) + 1
        records = [record(i) for i in range(start, start + count)]
        capture.progress.fetched(records)  # as the worker's _push: held, so a late heartbeat's commit confirms
        assert self.delivery.offer(capture.progress, records, 0, lambda: None) == count
        return list(range(start, start + count))

    def hand_off(self, capture: Capture) -> None:
        """The worker gives the shard up, as after a rebalance: its own hand-off, on its loop."""
        capture.worker.request_stop()
        self.loop.spawn(capture.worker._give_up(capture.progress)).result(BOUND)
        capture.worker._close()

    def taken_by_another(self) -> None:
        """Another client captures the row, as it may once it finds this client silent: this client's
        heartbeat went unseen for ``client_record_max_age`` (a pause), and its next one starts a new
        chain, so its leases must be confirmed by a write before more of their records go out."""
        self.silent_for += CONFIG.client_record_max_age
        self.rt.liveness.heartbeat_done(self.rt.liveness.now())
        seen = checkpoints_table.read_row(self.db, self.tables.checkpoints, SHARD)
        assert seen is not None
        taken = checkpoints_table.capture(
            self.db, self.tables.checkpoints, SHARD, owner_id="other", owner_name="other", taking=seen
        )
        assert taken is not None

    def row(self) -> checkpoints_table.CheckpointRow:
        stored = checkpoints_table.read_row(self.db, self.tables.checkpoints, SHARD)
        assert stored is not None
        return stored

    def close(self) -> None:
        self.delivery.close()
        self.committer.stop(BOUND)
        self.loop.stop(BOUND)


def _no_reader(*args: object) -> Any:
    raise AssertionError("nothing is read in these tests")


@pytest.fixture
def rig(kinesis: Any, db: Any, tables: Tables) -> Iterator[Rig]:
    made = Rig(kinesis, db, tables)
    yield made
    made.close()
    assert made.fatal == []


def bounded(fn: Callable[[], bool], what: str) -> bool:
    """``fn()`` on a thread of its own, which must end within BOUND seconds (a spinning call fails the test)."""
    result: list[bool] = []
    raised: list[BaseException] = []

    def run() -> None:
        try:
            result.append(fn())
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(BOUND)
    assert not thread.is_alive(), f"{what} did not return within {BOUND:g} s"
    if raised:
        raise raised[0]
    return result[0]


class Handled:
    """What the handler saw, by record index."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.indexes: list[int] = []

    def __call__(self, handled: Record) -> None:
        with self.lock:
            self.indexes.append(index_of((handled.sequence_number, None)))

    def all(self, indexes: list[int]) -> bool:
        with self.lock:
            return set(indexes) <= set(self.indexes)


@pytest.mark.parametrize("reused", [False, True], ids=["addresses-as-they-come", "every-address-reused"])
@pytest.mark.parametrize("concurrency", [1, 2])
def test_every_capture_of_a_shard_taken_back_again_and_again_is_handled(
    rig: Rig, concurrency: int, reused: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The soak's sequence: captured, handled, handed off, the old capture collected, captured again.

    In the soak a new capture's guard came to life at the address of a guard ``process()`` had begun
    (CPython reuses freed memory: 45 of 50 guards made one after another here), so ``process()``,
    which knew its guards by ``id()``, never began it, and its first record spun in ``hand()``.
    Whether that happens in a run depends on the allocator; ``every-address-reused`` makes it
    certain, as the allocator's worst case: every object ``process()`` looks at has the same id.
    """
    if reused:
        monkeypatch.setattr(shard_jobs, "id", lambda obj: 1, raising=False)  # where process() begins guards
    handled = Handled()
    options = Options(concurrency=concurrency, max_attempts=3)
    processor = Processor(rig.delivery, handled, options, Origin("s", "app", "me"), GuardedStats(StatReceiver()))
    running = threading.Thread(target=processor.run, name="process", daemon=True)
    running.start()
    for round_ in range(12):
        capture = rig.capture()
        assert capture is not None
        indexes = rig.push(capture, 150)  # more than a first reservation allows: process() writes another
        wait_until(lambda: handled.all(indexes), BOUND, f"capture {round_}'s records handled")  # noqa: B023
        wait_until(capture.progress.all_acknowledged, BOUND, f"capture {round_}'s records acknowledged")
        rig.hand_off(capture)
        assert rig.row().checkpoint == (str(FIRST + indexes[-1]), None)  # released after its last record
        del capture
        gc.collect()  # the old capture goes (its guard is in a cycle with its worker): its memory is reused
    rig.delivery.close()
    running.join(BOUND)
    assert not running.is_alive(), "process() did not end once the delivery closed"
    assert handled.indexes == list(range(12 * 150))  # each once, in order


@pytest.mark.parametrize("used_up", [False, True], ids=["within-the-window", "window-used-up"])
def test_hand_after_the_shard_was_handed_off_or_taken_says_no_at_once(rig: Rig, used_up: bool) -> None:
    """A worker about to hand out a record when its shard's handoff came (a handler slower than the
    handoff's wait): no record may go out after the release. Before the fix, within the window it went
    out; with the window used up, ``hand()`` asked for a commit, which found the lease released and
    wrote nothing, and asked again, for ever."""
    first = rig.capture()
    assert first is not None and first.guard.begin(3)
    handed = 100 if used_up else 1  # the first reservation's window is 100 records
    for i in range(handed):
        assert bounded(functools.partial(first.guard.hand, (str(FIRST + i), None)), "hand()")
    rig.hand_off(first)
    assert not bounded(functools.partial(first.guard.hand, (str(FIRST + handed), None)), "hand() after the handoff")

    second = rig.capture()
    assert second is not None and second.guard.begin(3)
    for i in range(handed):
        assert second.guard.hand((str(FIRST + i), None))
    rig.taken_by_another()  # as if this client had gone silent: its next write finds the row taken
    if used_up:
        assert not bounded(functools.partial(second.guard.hand, (str(FIRST + handed), None)), "hand() once taken")
        assert second.worker.lease.state is LeaseState.LOST
    else:  # nothing tells the worker before its next write: the record goes out, as any before the loss
        assert second.guard.hand((str(FIRST + handed), None))


def test_hand_before_begin_is_a_bug_said_at_once_not_a_spin(rig: Rig) -> None:
    capture = rig.capture()
    assert capture is not None
    with pytest.raises(AssertionError, match="handed out before begin"):  # before the fix: a loop for ever
        bounded(lambda: capture.guard.hand(("1000", None)), "hand() before begin()")


def test_a_stop_ends_a_hand_waiting_for_a_reservation_that_cannot_be_written(rig: Rig, db: Any) -> None:
    capture = rig.capture()
    assert capture is not None and capture.guard.begin(3)
    failing = FaultPlan(db, "UpdateItem", lambda n: "InternalServerError")
    result: list[bool] = []
    hand = threading.Thread(target=lambda: result.append(capture.guard.hand(("1000", None))), daemon=True)
    hand.start()
    wait_until(lambda: failing.calls >= 3, BOUND, "hand() trying to write its reservation")
    assert hand.is_alive()  # it waits: a record is never handed out past what the row reserves
    capture.worker.request_stop()  # the consumer stops (or the shard is given up)
    hand.join(BOUND)
    assert not hand.is_alive() and result == [False]


def test_commits_racing_never_store_an_older_checkpoint_or_reservation(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """The commit clock and ``process()``'s threads commit the same shard at once, while its records are
    handed out and acknowledged: what each stores is read under the lease's lock, so a commit never
    tries to move the checkpoint back (which the lease refuses, with an error in the log), and the row's
    reservation always covers every record handed out."""
    capture = rig.capture()
    assert capture is not None and capture.guard.begin(3)
    indexes = rig.push(capture, 600)
    done = threading.Event()

    def commits() -> None:
        while not done.is_set():
            rig.committer.commit(capture.worker, time.monotonic() + BOUND)

    racing = [threading.Thread(target=commits, daemon=True) for _ in range(3)]
    for thread in racing:
        thread.start()
    try:
        for i in indexes:
            taken = rig.delivery.take(BOUND)
            assert taken is not None
            got, progress, token = taken
            assert capture.guard.hand((got.sequence_number, None))
            progress.ack(token)
            if i % 50 == 0:
                stored = Reservation.from_text(rig.row().handed or "")
                assert i <= index_of(stored.handed) + stored.window
    finally:
        done.set()
        for thread in racing:
            thread.join(BOUND)
    assert rig.committer.commit(capture.worker, time.monotonic() + BOUND)
    assert rig.row().checkpoint == (str(FIRST + indexes[-1]), None)
    assert "refusing to move the checkpoint" not in caplog.text


# ----------------------------------------------------------------- every interleaving


@attrs.define
class Model:
    """What the property test knows: the live capture, those given up, and the records of the live one."""

    rig: Rig
    live: Capture | None = None
    gone: list[Capture] = attrs.Factory(list)
    taken: list[tuple[int, int]] = attrs.Factory(list)  # (index, token) handed out, not yet acknowledged
    by_other: bool = False  # another client holds the row

    def capture(self) -> None:
        if self.live is not None or self.by_other:
            return
        self.live = self.rig.capture()
        assert self.live is not None
        assert self.live.guard.begin(3)
        self.rig.push(self.live, 400)

    def hand(self) -> None:
        """The next queued record to a handler, as ``process()`` does: taken, then handed out by the guard."""
        live = self.live
        if live is None or live.progress.phase.revoked:
            return
        try:
            taken = self.rig.delivery.take(0.0)
        except NoRecordWithin:
            return
        assert taken is not None
        got, progress, token = taken
        assert progress is live.progress
        position = (got.sequence_number, None)
        if live.worker.lease.needs_confirming():  # as the delivery and the worker do: a write confirms it first
            bounded(lambda: self.rig.committer.commit(live.worker, time.monotonic() + BOUND) is not None, "a commit")
        if not bounded(lambda: live.guard.hand(position), "hand()"):
            assert live.worker.lease.state is not LeaseState.OWNED or live.progress.phase.revoked
            progress.retract(token)
            return
        self.taken.append((index_of(position), token))
        stored = Reservation.from_text(self.rig.row().handed or "")  # the promise a crash now would be judged by
        assert index_of(position) <= index_of(stored.handed) + stored.window

    def ack(self) -> None:
        if self.live is not None and self.taken:
            self.live.progress.ack(self.taken.pop(0)[1])

    def commit(self) -> None:
        """The commit clock's turn for the shard."""
        live = self.live
        if live is not None:
            bounded(lambda: self.rig.committer.commit(live.worker, time.monotonic() + BOUND) is not None, "a commit")

    def hand_off(self) -> None:
        if self.live is not None and self.live.worker.lease.state is LeaseState.OWNED:
            self.rig.hand_off(self.live)
            self._gone()

    def stop(self) -> None:
        """The consumer stops: the worker is asked to stop; its hand-off comes later."""
        if self.live is not None:
            self.live.worker.request_stop()

    def taken_by_other(self) -> None:
        if self.live is not None and not self.by_other:
            self.rig.taken_by_another()
            self.by_other = True

    def give_back(self) -> None:
        """The other client releases the row (its capture ended), or this client's stopped worker hands off."""
        if self.by_other:
            checkpoints_table.release(
                self.rig.db, self.rig.tables.checkpoints, SHARD, owner_id="other", checkpoint=None, finished=False
            )
            self.by_other = False
        if self.live is not None and self.live.worker.phase.stopping.is_set():
            self.rig.hand_off(self.live)  # dropped without a write if the row is not ours any more
            self._gone()

    def _gone(self) -> None:
        assert self.live is not None
        self.gone.append(self.live)
        self.live, self.taken = None, []
        gc.collect()

    def check(self) -> None:
        for old in self.gone[-3:]:  # a guard of a capture given up never hands out a record again
            assert not bounded(functools.partial(old.guard.hand, ("999999", None)), "hand() of a capture given up")


STEPS = st.lists(
    st.sampled_from(["capture", "hand", "hand", "hand", "ack", "commit", "hand_off", "stop", "taken_by_other",
                     "give_back"]),
    min_size=1, max_size=60,
)  # fmt: skip


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
@example(steps=["capture", "hand", "taken_by_other", "give_back", "hand"])  # the row free again: still not ours
@example(steps=["capture", "commit", "taken_by_other", "give_back", "hand"])  # CI, 2026-11-28
def test_any_interleaving_of_capture_hand_commit_handoff_and_stop_keeps_the_guard_s_promise(
    kinesis: Any, db: Any, tables: Tables, steps: list[str]
) -> None:
    """Whatever the order: ``hand()`` returns within a bound, every record handed out lies inside the
    reservation stored at that moment, and a capture given up hands out nothing more."""
    rig = Rig(kinesis, db, tables)
    db.delete_item(TableName=tables.checkpoints, Key={"Shard": {"S": SHARD}})  # each example from a new shard
    model = Model(rig)
    try:
        for step in steps:
            getattr(model, step)()
        model.check()
    finally:
        rig.close()
    assert rig.fatal == []
