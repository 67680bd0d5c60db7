import datetime as dt
import threading
import time

import pytest

from kinsumer import KinsumerError, NoRecordWithin, StatReceiver
from kinsumer.delivery.budget import ByteBudget
from kinsumer.delivery.delivery import _MANUAL, Delivery, HandoffResult
from kinsumer.delivery.progress import Checkpoint, ShardProgress
from kinsumer.delivery.record_queue import CLOSED, RecordQueue
from kinsumer.record import Record
from kinsumer.stats import GuardedStats
from kinsumer.waiting import Deadline
from tests.helpers import hand_off

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def record(seq: int, shard: str = "s") -> Record:
    return Record(b"x", "k", str(seq), shard, NOW, NOW)


def deliver(progress: ShardProgress, seq: int) -> int | None:
    """Register one record as delivered and hand it over, as manual mode does; its token."""
    run = progress.start_run([record(seq, progress.shard_id)])
    if run is None:
        return None
    run.handed = 1
    return run.base


def test_deliveries_after_revoke_are_refused_but_acks_still_count() -> None:
    progress = ShardProgress("s", None)
    token = deliver(progress, 1)
    assert token is not None
    progress.revoke()
    assert deliver(progress, 2) is None
    progress.ack(token)
    assert progress.checkpoint == ("1", None)


def test_acks_after_release_are_no_ops() -> None:
    progress = ShardProgress("s", ("5", None))
    a = deliver(progress, 6)
    assert a is not None
    assert progress.release() == ("5", None)
    Checkpoint("s", "6", None, progress, a)()
    assert progress.checkpoint == ("5", None)


def test_all_processed_needs_every_pushed_record_delivered_and_acked() -> None:
    progress = ShardProgress("s", None)
    progress.pushed(2)
    a = deliver(progress, 1)
    assert not progress.all_processed()
    b = deliver(progress, 2)
    assert a is not None and b is not None
    progress.ack(b)
    assert not progress.all_processed()
    progress.ack(a)
    assert progress.all_processed()


def test_wait_wakes_on_the_last_ack() -> None:
    progress = ShardProgress("s", None)
    token = deliver(progress, 1)
    assert token is not None
    acker = threading.Timer(0.05, progress.ack, args=(token,))
    acker.start()
    assert progress.wait(progress.all_acknowledged, timeout=10)
    acker.join()


def sequence_numbers(item: object) -> list[str]:
    assert isinstance(item, tuple), item
    return [r.sequence_number for r in item[0]]


def test_queue_is_bounded_and_fifo() -> None:
    q = RecordQueue(3, chunk=1)
    progress = ShardProgress("s", None)
    records = [record(i) for i in range(5)]
    assert q.offer(progress, records, 0) == 3
    assert q.offer(progress, records, 3) == 0
    assert sequence_numbers(q.get(0)) == ["0"]
    assert q.offer(progress, records, 3) == 1
    assert [sequence_numbers(q.get(0)) for _ in range(3)] == [["1"], ["2"], ["3"]]
    assert q.get(0.01) is None


def test_queue_holds_chunks_and_counts_records() -> None:
    q = RecordQueue(7, chunk=3)
    progress = ShardProgress("s", None)
    assert q.offer(progress, [record(i) for i in range(10)], 0) == 7  # as many as there is room for
    assert len(q) == 7
    assert [sequence_numbers(q.get(0)) for _ in range(3)] == [["0", "1", "2"], ["3", "4", "5"], ["6"]]
    assert len(q) == 0


def test_purge_drops_only_one_capture_and_frees_room() -> None:
    q = RecordQueue(4, chunk=2)
    old, other = ShardProgress("a", None), ShardProgress("b", None)
    q.offer(old, [record(1, "a"), record(2, "a")], 0)
    q.offer(other, [record(1, "b")], 0)
    assert q.purge(old) == 2
    assert len(q) == 1
    got = q.get(0)
    assert got is not None and got is not CLOSED and got[1] is other


def test_close_wakes_a_blocked_reader_and_the_writers_waiting_for_room() -> None:
    q = RecordQueue(1, chunk=1)
    progress = ShardProgress("s", None)
    q.offer(progress, [record(1)], 0)
    woken: list[str] = []
    assert q.offer(progress, [record(2)], 0, lambda: woken.append("writer")) == 0
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.append(q.get(60)))
    reader.start()  # takes record 1 at once, then nothing is left
    reader.join(10)
    assert woken == ["writer"]  # the queue emptied: the writer may try again
    woken.clear()
    assert q.offer(progress, [record(2), record(3)], 0, lambda: woken.append("again")) == 1
    q.close()
    assert woken == ["again"]
    assert q.get(None) is CLOSED
    assert q.offer(progress, [record(4)], 0, lambda: woken.append("late")) == 0 and woken == ["again"]


def test_a_writer_waiting_for_room_is_woken_once_the_queue_is_half_empty_not_for_every_chunk() -> None:
    q = RecordQueue(8, chunk=1)
    progress = ShardProgress("s", None)
    woken: list[int] = []
    assert q.offer(progress, [record(i) for i in range(10)], 0, lambda: woken.append(len(q))) == 8
    for taken in range(1, 5):
        assert q.get(0) is not None
        assert woken == ([] if taken < 4 else [4])  # at 4 of 8: half empty
    for _ in range(4):
        assert q.get(0) is not None
    assert woken == [4]  # once: it registers again if it still has records that do not fit


def test_the_bytes_of_records_that_leave_the_queue_go_back_to_the_budget() -> None:
    budget = ByteBudget(100)
    q = RecordQueue(10, chunk=2, budget=budget)
    a, b = ShardProgress("a", None), ShardProgress("b", None)
    ticket = budget.request(30)
    budget.settle(ticket, 30)  # three records of 10 bytes read
    sized = [Record(b"x" * 10, "k", str(i), "a", NOW, NOW) for i in range(3)]
    q.offer(a, sized[:2], 0)
    q.offer(b, [Record(b"y" * 10, "k", "9", "b", NOW, NOW)], 0)
    assert budget.used == 30
    assert q.get(0) is not None  # a's chunk of two
    assert budget.used == 10
    assert q.purge(b) == 1
    assert budget.used == 0


def test_wait_sees_an_ack_that_lands_while_its_predicate_runs() -> None:
    progress = ShardProgress("s", None)
    token = deliver(progress, 1)
    assert token is not None
    calls = []

    def predicate() -> bool:
        result = progress.all_acknowledged()
        if not calls:
            progress.ack(token)  # after the predicate saw False, before wait() sleeps
        calls.append(result)
        return result

    waiter = threading.Thread(target=lambda: calls.append(progress.wait(predicate, timeout=60)))
    waiter.start()
    waiter.join(10)  # far less than 60 s: the change was not missed
    assert not waiter.is_alive() and calls[-1] is True


def test_a_reader_waiting_through_a_purge_gets_what_is_put_after_it() -> None:
    q = RecordQueue(4, chunk=4)
    old, new = ShardProgress("a", None), ShardProgress("b", None)
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.append(q.get(60)))
    reader.start()
    deadline = time.monotonic() + 10
    while q._getters == 0 and time.monotonic() < deadline:  # the reader is waiting for records
        time.sleep(0.01)
    q.purge(old)
    q.offer(new, [record(1, "b")], 0)
    reader.join(10)  # far less than its 60 s timeout
    assert not reader.is_alive()
    assert sequence_numbers(got[0]) == ["1"]


# ---------------------------------------------------------------- Delivery


def delivery(buffer_size: int = 100) -> Delivery:
    return Delivery(buffer_size, GuardedStats(StatReceiver()))


def push(d: Delivery, progress: ShardProgress, records: list[Record]) -> int:
    """Queue ``records`` in order, waiting for room as a shard worker does; how many went in."""
    start = 0
    while start < len(records) and not d.closed:
        room = threading.Event()
        start += d.offer(progress, records, start, room.set)
        if start < len(records):
            assert room.wait(60), "no room came"
    return start


def test_auto_mode_counts_a_holders_record_when_that_holder_asks_again() -> None:
    d = delivery(buffer_size=16)  # chunks of one record: each holder takes one at a time
    progress = d.open_shard("s", None)
    assert push(d, progress, [record(1), record(2), record(3)])
    assert d.next_auto("holder-a", 1) == record(1)
    assert d.next_auto("holder-b", 1) == record(2)
    assert progress.checkpoint is None  # both records are still in hand
    assert d.next_auto("holder-b", 1) == record(3)
    assert progress.checkpoint is None  # b's record 2 is done, a's record 1 is not: no prefix yet
    d.acknowledge_held()  # a clean stop: what each holder has in hand counts
    assert progress.checkpoint == ("3", None)


def test_manual_mode_hands_out_checkpoints_that_advance_the_prefix() -> None:
    d = delivery()
    progress = d.open_shard("s", ("0", None))
    push(d, progress, [record(1), record(2)])
    (r1, cp1), (r2, cp2) = d.next_manual(1), d.next_manual(1)
    assert (r1, r2) == (record(1), record(2)) and cp1 is not None and cp2 is not None
    cp2()
    assert progress.checkpoint == ("0", None)
    cp1()
    assert progress.checkpoint == ("2", None)


def test_a_timeout_is_both_a_kinsumer_error_and_a_timeout_error() -> None:
    with pytest.raises(NoRecordWithin) as info:
        delivery().take(0.01)
    assert isinstance(info.value, TimeoutError) and isinstance(info.value, KinsumerError)


def test_close_with_an_error_raises_it_until_a_stop_closes_again() -> None:
    d = delivery()
    failure = KinsumerError("table deleted")
    d.close(failure)
    with pytest.raises(KinsumerError, match="table deleted"):
        d.take(None)
    d.close()  # stop() after a failure: next*() returns None from then on
    assert d.take(None) is None
    d.close(KinsumerError("too late"))  # a failure after a stop changes nothing
    assert d.take(None) is None


def test_an_offer_queues_what_fits_and_nothing_once_closed() -> None:
    d = delivery(buffer_size=1)
    progress = d.open_shard("s", None)
    woken = threading.Event()
    assert d.offer(progress, [record(1), record(2)], 0, woken.set) == 1  # room for one
    assert not d.has_room() and not woken.is_set()
    d.close()
    assert woken.is_set() and d.has_room()  # told: nothing waits for room that will not come
    assert d.offer(progress, [record(2)], 0, woken.set) == 0


def test_a_handoff_drops_queued_records_and_waits_for_delivered_ones() -> None:
    d = delivery(buffer_size=16)  # next*() takes one record from the queue at a time
    progress = d.open_shard("s", ("0", None))
    other = d.open_shard("t", None)
    push(d, progress, [record(1), record(2), record(3)])
    push(d, other, [record(1, "t")])
    (_, cp1), (_, cp2) = d.next_manual(1), d.next_manual(1)
    assert cp1 is not None and cp2 is not None
    acker = threading.Timer(0.05, lambda: (cp1(), cp2()))
    acker.start()
    result = hand_off(d, progress, timeout=10)
    acker.join()
    assert result == HandoffResult(clean=True, checkpoint=("2", None), dropped=1, outstanding=0)
    assert d.next_manual(1)[0] == record(1, "t")  # record 3 of s went with the handoff


def test_a_handoff_that_times_out_keeps_the_acknowledged_prefix() -> None:
    d = delivery()
    progress = d.open_shard("s", ("0", None))
    push(d, progress, [record(1), record(2)])
    (_, cp1), (_, cp2) = d.next_manual(1), d.next_manual(1)
    assert cp1 is not None and cp2 is not None
    cp1()
    result = hand_off(d, progress, timeout=0.05)
    assert result == HandoffResult(clean=False, checkpoint=("1", None), dropped=0, outstanding=1)
    cp2()  # too late: the shard was released
    assert progress.checkpoint == ("1", None)


def test_a_record_of_a_lease_not_confirmed_lately_waits_for_the_lease_to_be_confirmed() -> None:
    d = delivery()
    progress = d.open_shard("s", None)
    push(d, progress, [record(1), record(2)])
    progress.confirm(time.monotonic() - 1)  # last confirmed long enough ago: maybe not ours any more
    with pytest.raises(NoRecordWithin):
        d.take(0.05)
    threading.Timer(0.05, lambda: progress.confirm(time.monotonic() + 60)).start()
    taken = d.take(10)  # handed on once the lease is confirmed, in order
    assert taken is not None and taken[0] == record(1)


def test_a_record_of_a_lease_found_lost_is_dropped_while_waiting() -> None:
    d = delivery()
    stale, other = d.open_shard("s", None), d.open_shard("t", None)
    push(d, stale, [record(1)])
    push(d, other, [record(1, "t")])
    stale.confirm(time.monotonic() - 1)
    threading.Timer(0.05, stale.revoke).start()  # a commit found another owner
    taken = d.take(10)
    assert taken is not None and taken[0] == record(1, "t")  # the stale shard's record went with it


# ---------------------------------------------------------------- runs: records handed over a chunk at a time


def test_a_holders_run_counts_in_the_checkpoint_as_the_holder_goes() -> None:
    d = delivery(buffer_size=1024)  # chunks of 64: the ten records are one run
    progress = d.open_shard("s", None)
    push(d, progress, [record(i) for i in range(1, 11)])
    assert [d.next_auto("h", 1) for _ in range(3)] == [record(1), record(2), record(3)]
    assert progress.checkpoint == ("2", None)  # read by the committer mid-run: 1 and 2 are processed
    assert progress.outstanding == 1  # 3 is in hand; 4 to 10 were not handed over yet
    assert [d.next_auto("h", 1) for _ in range(7)] == [record(i) for i in range(4, 11)]
    assert progress.checkpoint == ("9", None)
    d.acknowledge_held()
    assert progress.checkpoint == ("10", None)
    assert progress.all_processed()


def test_a_run_s_records_not_handed_over_yet_are_not_processed_so_a_shard_at_its_end_is_not_finished() -> None:
    """Every record handed over is acknowledged, but the run still holds two: the shard is not all processed
    (its end would be stored past records nobody had; found by a fleet: finished at its first record)."""
    progress = ShardProgress("s", None)
    progress.pushed(3)
    run = progress.start_run([record(i) for i in range(1, 4)])
    assert run is not None
    run.handed = run.processed = 1  # as a holder goes: the first handed over and done
    assert progress.checkpoint == ("1", None) and progress.all_acknowledged()  # a handoff need not wait for them
    assert not progress.all_processed()
    run.handed = 3
    assert not progress.all_processed()
    run.processed = 3
    assert progress.all_processed() and not progress.gave_back()
    assert progress.checkpoint == ("3", None)


def test_records_given_back_are_told_so_a_shard_at_its_end_is_read_again_rather_than_finished() -> None:
    progress = ShardProgress("s", None)
    progress.pushed(2)
    first, second = deliver(progress, 1), deliver(progress, 2)
    assert first is not None and second is not None
    progress.retract(first)  # given back: never acknowledged here
    progress.ack(second)
    assert progress.all_processed() and progress.gave_back()
    assert progress.checkpoint is None  # it stops before the record given back


def test_a_handoff_mid_run_waits_only_for_the_record_in_hand() -> None:
    d = delivery(buffer_size=1024)
    progress, other = d.open_shard("s", None), d.open_shard("t", None)
    push(d, progress, [record(i) for i in range(1, 11)])
    assert [d.next_auto("h", 1) for _ in range(3)] == [record(1), record(2), record(3)]
    results: list[HandoffResult] = []
    handoff = threading.Thread(target=lambda: results.append(hand_off(d, progress, timeout=60)))
    handoff.start()
    deadline = time.monotonic() + 10
    while not progress.phase.revoked and time.monotonic() < deadline:  # the handoff has begun
        time.sleep(0.01)
    push(d, other, [record(1, "t")])
    assert d.next_auto("h", 10) == record(1, "t")  # not record 4: its shard is being handed off
    handoff.join(10)  # far less than its 60 s: asking again processed record 3
    assert results == [HandoffResult(clean=True, checkpoint=("3", None), dropped=0, outstanding=0)]


def test_after_a_failure_the_record_in_hand_is_neither_counted_nor_waited_for() -> None:
    d = delivery(buffer_size=1024)
    progress = d.open_shard("s", ("0", None))
    push(d, progress, [record(1), record(2), record(3)])
    assert d.next_auto("h", 1) == record(1)
    assert d.next_auto("h", 1) == record(2)  # the caller fails while processing it
    d.close()
    d.abandon_held()
    result = hand_off(d, progress, timeout=60)  # returns at once: nothing is in anyone's hands
    assert result == HandoffResult(clean=True, checkpoint=("1", None), dropped=0, outstanding=0)


def test_manual_mode_hands_a_run_out_across_callers_and_a_handoff_keeps_the_rest() -> None:
    d = delivery(buffer_size=1024)
    progress = d.open_shard("s", ("0", None))
    push(d, progress, [record(i) for i in range(1, 6)])
    (r1, cp1), (r2, cp2) = d.next_manual(1), d.next_manual(1)
    assert (r1, r2) == (record(1), record(2)) and cp1 is not None and cp2 is not None
    acker = threading.Timer(0.05, lambda: (cp2(), cp1()))
    acker.start()
    result = hand_off(d, progress, timeout=60)
    acker.join()
    assert result == HandoffResult(clean=True, checkpoint=("2", None), dropped=0, outstanding=0)
    with pytest.raises(NoRecordWithin):  # records 3 to 5 go to the shard's next owner
        d.next_manual(0.05)


def test_several_threads_in_auto_mode_get_every_record_once_and_the_checkpoints_reach_the_end() -> None:
    d = delivery(buffer_size=64)  # chunks of 4: runs of one shard go to different threads
    shards = {name: d.open_shard(name, None) for name in "abc"}
    per_shard = 200
    got: list[list[Record]] = [[] for _ in range(4)]

    def consume(mine: list[Record]) -> None:
        while (r := d.next_auto(threading.get_ident(), None)) is not None:  # until the close below
            mine.append(r)

    def produce(name: str) -> None:
        for start in range(0, per_shard, 25):
            push(d, shards[name], [record(i, name) for i in range(start, start + 25)])

    threads = [threading.Thread(target=consume, args=(mine,)) for mine in got]
    threads += [threading.Thread(target=produce, args=(name,)) for name in shards]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while sum(map(len, got)) < 3 * per_shard and time.monotonic() < deadline:
        time.sleep(0.01)
    d.close()  # a stop: the waiting threads get None
    for thread in threads:
        thread.join(10)
    assert not any(thread.is_alive() for thread in threads)
    delivered = [(r.shard_id, int(r.sequence_number)) for mine in got for r in mine]
    assert sorted(delivered) == [(name, i) for name in "abc" for i in range(per_shard)]
    for mine in got:  # each thread saw each shard's records in order
        for name in shards:
            seen = [int(r.sequence_number) for r in mine if r.shard_id == name]
            assert seen == sorted(seen)
    d.acknowledge_held()
    assert {name: p.checkpoint for name, p in shards.items()} == {n: (str(per_shard - 1), None) for n in "abc"}


def test_runs_two_threads_take_for_manual_mode_at_once_are_both_handed_over_in_order() -> None:
    """Manual mode's threads share one holder: a run one thread takes from the queue while another
    thread's run of that holder is still being handed over waits its turn (it used to replace it:
    its records counted as delivered, were never handed over, and held the checkpoint back)."""
    d = delivery(buffer_size=16)  # chunks of one record: every record is a run
    progress = d.open_shard("s", ("0", None))
    push(d, progress, [record(1), record(2), record(3)])
    first = d._start_run(Deadline(None), _MANUAL)  # two threads each took a run before either handed a record over
    second = d._start_run(Deadline(None), _MANUAL)
    assert first is not None and second is not None and first is not second
    taken = [d.next_manual(1) for _ in range(3)]
    assert [r.sequence_number for r, _ in taken if r is not None] == ["1", "2", "3"]
    for _, checkpoint in taken:
        assert checkpoint is not None
        checkpoint()
    assert progress.checkpoint == ("3", None)


def test_readers_called_for_room_that_another_took_first_are_called_again_when_they_offer_again() -> None:
    q = RecordQueue(4, chunk=1)
    a, b = ShardProgress("a", None), ShardProgress("b", None)
    calls: list[str] = []
    call_a, call_b = (lambda: calls.append("a")), (lambda: calls.append("b"))  # each reader's one callback
    assert q.offer(a, [record(i, "a") for i in range(10)], 0, call_a) == 4
    assert q.offer(b, [record(i, "b") for i in range(10)], 0, call_b) == 0
    assert q.offer(b, [record(i, "b") for i in range(10)], 0, call_b) == 0  # asked twice: called once
    q.get(0), q.get(0)
    assert calls == ["a", "b"]  # half empty: both called
    assert q.offer(a, [record(i, "a") for i in range(4, 10)], 0, call_a) == 2  # a took the room
    assert q.offer(b, [record(i, "b") for i in range(10)], 0, call_b) == 0  # b offers again
    q.get(0), q.get(0)
    assert calls == ["a", "b", "a", "b"]  # and is called again: no reader is left without a call
