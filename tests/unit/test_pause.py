"""Pausing a shard in the delivery (Kinsumer.pause()): the queue holds its chunks, its reader waits, a run in
hand is set aside, and resume() hands out the rest in order; a handoff or a stop ends what was set aside."""

from __future__ import annotations

import datetime as dt
import threading

import pytest

from kinsumer import NoRecordWithin, StatReceiver
from kinsumer.delivery.budget import ByteBudget
from kinsumer.delivery.delivery import Delivery, ExplicitHolder
from kinsumer.delivery.progress import HANDED, ShardProgress
from kinsumer.delivery.record_queue import RecordQueue
from kinsumer.handling.scheduler import Scheduler
from kinsumer.record import Record
from kinsumer.stats import GuardedStats
from tests.helpers import hand_off

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def record(seq: int, shard: str = "s") -> Record:
    return Record(b"x" * 10, "k", str(seq), shard, NOW, NOW)


def records(first: int, count: int, shard: str = "s") -> list[Record]:
    return [record(seq, shard) for seq in range(first, first + count)]


def delivery(buffer_size: int = 32) -> Delivery:  # chunks of 2 records
    return Delivery(buffer_size, GuardedStats(StatReceiver()))


def test_a_held_capture_keeps_its_bytes_offers_nothing_and_goes_back_at_the_end_of_the_queue_in_order() -> None:
    budget = ByteBudget(1000)
    q = RecordQueue(10, chunk=2, budget=budget)
    a, b = ShardProgress("a", None), ShardProgress("b", None)
    budget.settle(budget.request(80), 80)
    q.offer(a, records(1, 4, "a"), 0)
    q.offer(b, records(1, 2, "b"), 0)
    assert q.hold(a) == 4 and len(q) == 2  # set aside: room for others
    woken = threading.Event()
    assert q.offer(a, records(5, 2, "a"), 0, woken.set) == 0  # its reader waits
    assert q.offer(b, records(3, 2, "b"), 0) == 2
    assert budget.used == 80  # held records keep their bytes
    q.release_held(a)
    assert woken.is_set()
    taken = []
    while len(q):
        entry = q.get(0)
        assert isinstance(entry, tuple)
        taken.append((entry[1].shard_id, [r.sequence_number for r in entry[0]]))
    assert taken == [("b", ["1", "2"]), ("b", ["3", "4"]), ("a", ["1", "2"]), ("a", ["3", "4"])]


def test_a_purge_drops_held_chunks_and_frees_their_bytes() -> None:
    budget = ByteBudget(1000)
    q = RecordQueue(10, chunk=2, budget=budget)
    a = ShardProgress("a", None)
    budget.settle(budget.request(40), 40)
    q.offer(a, records(1, 4, "a"), 0)
    q.hold(a)
    assert q.purge(a) == 4 and budget.used == 0 and len(q) == 0


def test_next_sets_a_run_aside_at_a_pause_and_hands_out_the_rest_in_order_after_resume() -> None:
    d = delivery()
    s, t = d.open_shard("s", None), d.open_shard("t", None)
    d.offer(s, records(1, 6), 0, lambda: None)
    d.offer(t, records(1, 2, "t"), 0, lambda: None)
    assert d.next_auto("holder", 1) == record(1)  # a run of s: records 1 and 2
    d.pause("s")
    assert d.next_auto("holder", 1) == record(1, "t")  # record 2 waits: the run is set aside
    assert d.next_auto("holder", 1) == record(2, "t")
    with pytest.raises(NoRecordWithin):
        d.next_auto("holder", 0.05)
    assert s.checkpoint == ("1", None)  # what was handed over before the pause counts once asked again
    d.resume("s")
    got = [d.next_auto("holder", 1) for _ in range(5)]
    assert got == records(2, 5)
    d.acknowledge_held()
    assert s.checkpoint == ("6", None) and t.checkpoint == ("2", None)


def test_a_run_taken_for_itself_stops_at_a_pause_and_goes_on_where_it_stopped() -> None:
    """``process()`` with one worker takes runs and hands them over itself."""
    d = delivery()
    s = d.open_shard("s", None)
    d.offer(s, records(1, 4), 0, lambda: None)
    holder = ExplicitHolder()
    run = d.take_run(holder, 1)
    assert run is not None and run.records == records(1, 2)
    assert run.offer(0, d.monotonic()) is HANDED
    run.processed = 1
    d.pause("s")
    d.end_run(holder)  # at a pause: set aside, not given back
    with pytest.raises(NoRecordWithin):
        d.take_run(holder, 0.05)
    d.resume("s")
    again = d.take_run(holder, 1)
    assert again is run and run.handed == 1  # the same run, from its next record
    assert run.offer(1, d.monotonic()) is HANDED
    run.processed = 2
    d.end_run(holder)
    after = d.take_run(holder, 1)
    assert after is not None and after.records == records(3, 2)


def test_a_shard_paused_before_its_capture_is_held_from_the_start() -> None:
    d = delivery()
    d.pause("s")
    s = d.open_shard("s", None)
    woken = threading.Event()
    assert d.offer(s, records(1, 2), 0, woken.set) == 0 and s.paused
    d.resume("s")
    assert woken.is_set() and d.offer(s, records(1, 2), 0, woken.set) == 2


def test_a_handoff_of_a_paused_shard_gives_back_what_was_set_aside_and_drops_what_was_held() -> None:
    d = delivery()
    s = d.open_shard("s", None)
    d.offer(s, records(1, 6), 0, lambda: None)
    assert d.next_auto("holder", 1) == record(1)
    d.pause("s")
    with pytest.raises(NoRecordWithin):
        d.next_auto("holder", 0.05)  # record 1 counts, record 2 is set aside
    result = hand_off(d, s, 1.0)
    assert result.clean and result.checkpoint == ("1", None) and result.dropped == 4
    assert s.outstanding == 0


def test_process_does_not_claim_the_parked_records_of_a_paused_shard() -> None:
    s, t = ShardProgress("s", None), ShardProgress("t", None)
    scheduler: Scheduler[tuple[Record, ShardProgress, int]] = Scheduler(10, held=lambda item: item[1].paused)
    scheduler.put("s", (record(1), s, 0))
    scheduler.put("t", (record(1, "t"), t, 0))
    s.paused = True
    claimed = scheduler.claim(1)
    assert claimed is not None and claimed[0] == "t"
    scheduler.release("t")
    assert scheduler.claim(1, timeout=0.05) is None
    s.paused = False
    claimed = scheduler.claim(1)
    assert claimed is not None and claimed[0] == "s"
