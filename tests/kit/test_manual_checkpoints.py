"""A fleet of manual-checkpoint loops (``call="next_with_checkpointer"``): the handler gets each record and its
checkpoint and decides when to call it. A handoff waits ``handoff_timeout`` for the checkpoints of the records
delivered, then releases the shard at the contiguous prefix checkpointed: what was not checkpointed comes again
where the shard goes ("not checkpointed", allowed); what was, never (a repeat of it is a fault)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import attrs
import pytest

from kinsumer import Checkpoint, Config, Record
from kinsumer.testing import FAST_CONFIG, Fleet, LocalAWS, LocalStream, PerClient, RecordKey, Report
from kinsumer.testing._handlers import Call
from tests.helpers import wait_until


def key_of(record: Record) -> RecordKey:
    return (record.shard_id, record.sequence_number, record.sub_sequence_number or 0)


class EveryN:
    """Checkpoints in batches, as a loop that writes its work out every ``n`` records and then checkpoints them
    (``n`` None: never). Its checkpoints, not yet called, are :attr:`pending`."""

    def __init__(self, n: int | None) -> None:
        self.n = n
        self.pending: list[tuple[RecordKey, Checkpoint]] = []

    def handle(self, record: Record, checkpoint: Checkpoint) -> None:
        self.pending.append((key_of(record), checkpoint))
        if self.n is not None and len(self.pending) >= self.n:
            for _, call in self.pending:
                call()
            self.pending.clear()


class AsyncEveryN(EveryN):
    """:class:`EveryN` for ``call="anext_with_checkpointer"``: an async handler (the checkpoint stays a plain call)."""

    async def handle(self, record: Record, checkpoint: Checkpoint) -> None:  # type: ignore[override]
        await asyncio.sleep(0)
        EveryN.handle(self, record, checkpoint)


def putter(stream: LocalStream) -> Callable[[int], None]:
    def put(count: int) -> None:
        first = len(stream.records())
        stream.put_all((str(n), f"key-{n % 11}") for n in range(first, first + count))

    return put


def fleet_of(
    n: int | None, config: Config = FAST_CONFIG, call: Call = "next_with_checkpointer"
) -> tuple[Fleet, Callable[[int], None], dict[str, EveryN]]:
    aws = LocalAWS()
    stream = aws.stream("clicks", shards=4)
    handlers: dict[str, EveryN] = {}

    def make(client: str) -> EveryN:
        handlers[client] = EveryN(n) if call == "next_with_checkpointer" else AsyncEveryN(n)
        return handlers[client]

    fleet = Fleet(aws, "clicks", "app", PerClient(make), call=call, config=config)
    return fleet, putter(stream), handlers


def join_leave_crash(fleet: Fleet, put: Callable[[int], None], leaving: Callable[[], str]) -> tuple[str, Report]:
    """Two clients start, a third joins, ``leaving()`` leaves cleanly, one crashes with records flowing; 200
    records put before each event and after the crash. The crashed client's name and the report at the end."""
    fleet.start(2)
    put(205)
    fleet.wait_handled()
    fleet.join()
    put(200)
    fleet.wait_handled()
    fleet.leave(leaving())
    crashed = crash_with_records_flowing(fleet, put)
    fleet.close()
    return crashed, fleet.report()


def crash_with_records_flowing(fleet: Fleet, put: Callable[[int], None]) -> str:
    """200 records put, one client crashes once 50 of them are handled, 200 more put; every record handled.
    The crashed client's name."""
    put(200)
    fleet.ledger.wait_for(fleet.ledger.distinct + 50, timeout=30, check=fleet.check)
    crashed = fleet.members[0]
    fleet.crash(crashed)
    put(200)
    fleet.wait_handled()
    return crashed


def test_a_loop_that_checkpoints_every_record_repeats_nothing_through_a_join_and_a_leave_only_at_a_crash() -> None:
    """Each record checkpointed as it is handled: a handoff finds every record delivered checkpointed and
    releases past them (a generous ``handoff_timeout``, so that only a stall of a whole second... five, would
    make one wait out); only the crash repeats records, and at the end every record is committed."""
    fleet, put, _ = fleet_of(1, attrs.evolve(FAST_CONFIG, handoff_timeout=5.0))
    with fleet:
        crashed, report = join_leave_crash(fleet, put, lambda: fleet.members[0])
    assert report.put == 805 and report.ok, report
    assert set(report.duplicates_by_reason) <= {"crash", "taken"}, report  # taken: a client stalled 1 s, if ever
    assert all(d.clients[0] == crashed for d in report.duplicates if d.reason == "crash")
    assert report.not_checkpointed == ()


@pytest.mark.parametrize("call", ["next_with_checkpointer", "anext_with_checkpointer"])
def test_a_loop_that_checkpoints_every_10_records_has_its_repeats_explained_as_not_checkpointed(call: Call) -> None:
    """Checkpoints called 10 at a time: a client that leaves with some not called makes its handoff wait for them
    (1 s), then release the shard before them; they come again where the shard goes, "not checkpointed". What
    the last clients held unchecked when the fleet stopped is reported as not checkpointed: it would come again
    at the next start. The same with asyncio (``anext_record_with_checkpointer()``, an async handler)."""
    fleet, put, handlers = fleet_of(10, call=call)

    def leaving() -> str:  # a client with checkpoints not yet called (205 handled by two: one of them has some)
        return next(name for name in fleet.members if handlers[name].pending)

    with fleet:
        fleet.start(2)
        put(205)
        fleet.wait_handled()
        fleet.leave(leaving())
        wait_until(lambda: "not checkpointed" in fleet.report().duplicates_by_reason, 10, "the unchecked records again")
        fleet.join()
        crash_with_records_flowing(fleet, put)
    report = fleet.report()
    assert report.put == 605 and report.ok, report
    assert "not checkpointed" in report.duplicates_by_reason, report
    assert set(report.duplicates_by_reason) <= {"not checkpointed", "crash", "taken"}, report
    unchecked_at_the_end = {key for handler in handlers.values() for key, _ in handler.pending}
    assert set(report.not_checkpointed) <= unchecked_at_the_end, report


def test_a_loop_that_never_checkpoints_loses_nothing_and_is_reported_as_having_committed_nothing() -> None:
    """Nothing checkpointed: every handoff waits its whole ``handoff_timeout`` and releases the shard where it
    started, so each new owner reads it from its start again. kinsumer keeps its promise (nothing lost, each
    repeat allowed: ``report.ok``), and the report says what the handler did: every record handled again
    "not checkpointed" when its shard moved, and none committed."""
    fleet, put, _ = fleet_of(None)
    with fleet:
        _, report = join_leave_crash(fleet, put, lambda: fleet.members[0])
    assert report.put == 805 and report.ok, report
    assert report.duplicates_by_reason.get("not checkpointed", 0) > 0, report
    assert set(report.duplicates_by_reason) <= {"not checkpointed", "crash", "taken"}, report
    assert set(report.not_checkpointed) == set(report.partition_keys)  # every record put: nothing committed
    assert report.stranded == ()
    assert report.captures_by_end.get("handoff timed out", 0) > 0  # kinsumer's own verdict on those handoffs


class Fails:
    """A loop whose work fails once on some records; ``checkpoint_first``: the bug, the checkpoint called before
    the work (the failed record is committed though not done), else after it (the record stays unchecked)."""

    def __init__(self, failing: set[str], checkpoint_first: bool) -> None:
        self.failing, self.checkpoint_first = failing, checkpoint_first
        self.lock = threading.Lock()
        self.failed: set[RecordKey] = set()

    def handle(self, record: Record, checkpoint: Checkpoint) -> None:
        if self.checkpoint_first:
            checkpoint()
        with self.lock:
            fails = record.data.decode() in self.failing
            self.failing.discard(record.data.decode())
            if fails:
                self.failed.add(key_of(record))
        if fails:
            raise ConnectionError("the work failed")  # the fleet's loop logs it and goes on, as a KCL loop does
        if not self.checkpoint_first:
            checkpoint()


@pytest.mark.parametrize("checkpoint_first", [True, False], ids=["bug: checkpoint, then work", "fixed"])
def test_a_checkpoint_called_before_work_that_fails_loses_the_record(checkpoint_first: bool) -> None:
    """The planted bug: the checkpoint called before the work, and the work fails. The failed record is committed
    (the shard's checkpoint moves past it) though never done: no handoff brings it back, and the report has it
    lost. Fixed (the checkpoint after the work), the failed record holds the shard's checkpoint before it: once
    its shard moves it comes again and is done, and nothing is lost; but done after the records that followed it,
    and the report says so (its shard out of order: retry the work in place to keep the order)."""
    aws = LocalAWS()
    stream = aws.stream("clicks", shards=4)
    handler = Fails({"7", "50", "131"}, checkpoint_first)
    with Fleet(aws, "clicks", "app", PerClient(lambda client: handler), call="next_with_checkpointer") as fleet:
        first = fleet.start(2)
        putter(stream)(150)
        # all but the three that fail, which come before some of them
        fleet.ledger.wait_for(147, timeout=30, check=fleet.check)
        wait_until(lambda: len(handler.failed) == 3, 10, "the three failures")
        fleet.start(2)
        for name in first:  # every shard moves: a failed record not checkpointed comes again where it goes
            fleet.leave(name)
        if not checkpoint_first:
            fleet.wait_handled()
    report = fleet.report()
    if checkpoint_first:
        assert not report.ok and set(report.lost) == handler.failed, report
    else:  # nothing lost, each repeat allowed; but a loop that goes on past a failed record does it out of order
        assert report.lost == () and report.unexplained_duplicates == () and report.hook_violations == (), report
        assert set(report.duplicates_by_reason) <= {"not checkpointed", "taken"}, report
        assert report.shards_out_of_order, report
        assert set(report.shards_out_of_order) <= {shard for shard, _, _ in handler.failed}, report


def test_a_fleet_of_manual_checkpoints_refuses_what_does_not_apply() -> None:
    aws = LocalAWS()
    aws.stream("clicks")

    def manual(record: Record, checkpoint: Checkpoint) -> None:
        checkpoint()

    with pytest.raises(ValueError, match=r"max_attempts: options of process\(\); a loop over next_with_checkpointer"):
        Fleet(aws, "clicks", "app", manual, call="next_with_checkpointer", max_attempts=2)
    with pytest.raises(ValueError, match="config: manual_checkpointing=True is for call='next_with_checkpointer' or"):
        Fleet(aws, "clicks", "app", print, config=attrs.evolve(FAST_CONFIG, manual_checkpointing=True))

    class WithHooks(EveryN):
        def on_revoked(self, shard_id: str) -> None:
            pass

    fleet = Fleet(aws, "clicks", "app", PerClient(lambda client: WithHooks(1)), call="next_with_checkpointer")
    with fleet, pytest.raises(ValueError, match=r"returned an object with on_revoked\(\), a hook of process\(\)"):
        fleet.join()
