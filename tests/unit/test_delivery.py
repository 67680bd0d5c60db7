import datetime as dt
import threading
import time

import pytest

from kinsumer import KinsumerError, NoRecordWithin, StatReceiver
from kinsumer.delivery.delivery import Delivery, HandoffResult
from kinsumer.delivery.progress import Checkpoint, ShardProgress
from kinsumer.delivery.record_queue import CLOSED, RecordQueue
from kinsumer.record import Record
from kinsumer.stats import GuardedStats

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _no_wait() -> bool:  # put_many's should_stop: add what fits, never wait for room
    return True


def _wait_for_room() -> bool:  # put_many's should_stop: wait for room as long as it takes
    return False


def record(seq: int, shard: str = "s") -> Record:
    return Record(b"x", "k", str(seq), shard, NOW, NOW)


def test_deliveries_after_revoke_are_refused_but_acks_still_count() -> None:
    progress = ShardProgress("s", None)
    token = progress.deliver(("1", None))
    assert token is not None
    progress.revoke()
    assert progress.deliver(("2", None)) is None
    progress.ack(token)
    assert progress.checkpoint == ("1", None)


def test_acks_after_release_are_no_ops() -> None:
    progress = ShardProgress("s", ("5", None))
    a = progress.deliver(("6", None))
    assert a is not None
    assert progress.release() == ("5", None)
    Checkpoint("s", "6", None, progress, a)()
    assert progress.checkpoint == ("5", None)


def test_all_processed_needs_every_pushed_record_delivered_and_acked() -> None:
    progress = ShardProgress("s", None)
    progress.pushed(2)
    a = progress.deliver(("1", None))
    assert not progress.all_processed()
    b = progress.deliver(("2", None))
    assert a is not None and b is not None
    progress.ack(b)
    assert not progress.all_processed()
    progress.ack(a)
    assert progress.all_processed()


def test_wait_wakes_on_the_last_ack() -> None:
    progress = ShardProgress("s", None)
    token = progress.deliver(("1", None))
    assert token is not None
    acker = threading.Timer(0.05, progress.ack, args=(token,))
    acker.start()
    assert progress.wait(progress.all_acknowledged, timeout=10)
    acker.join()


def test_queue_is_bounded_and_fifo() -> None:
    q = RecordQueue(3)
    progress = ShardProgress("s", None)
    items = [(record(i), progress) for i in range(5)]
    assert q.put_many(items, 0, _no_wait) == 3
    assert q.put_many(items, 3, _no_wait) == 0
    got = q.get(0)
    assert got is not CLOSED and got is not None and got[0].sequence_number == "0"
    assert q.put_many(items, 3, _no_wait) == 1
    assert [q.get(0)[0].sequence_number for _ in range(3)] == ["1", "2", "3"]  # type: ignore[index]
    assert q.get(0.01) is None


def test_purge_drops_only_one_capture_and_frees_room() -> None:
    q = RecordQueue(4)
    old, other = ShardProgress("a", None), ShardProgress("b", None)
    q.put_many([(record(1, "a"), old), (record(1, "b"), other), (record(2, "a"), old)], 0, _no_wait)
    assert q.purge(old) == 2
    assert len(q) == 1
    got = q.get(0)
    assert got is not None and got is not CLOSED and got[1] is other


def test_close_wakes_a_blocked_reader_and_writer() -> None:
    q = RecordQueue(1)
    progress = ShardProgress("s", None)
    q.put_many([(record(1), progress)], 0, _no_wait)
    results: list[object] = []
    writer = threading.Thread(target=lambda: results.append(q.put_many([(record(2), progress)], 0, _wait_for_room)))
    writer.start()
    q.close()
    writer.join(10)
    assert results == [0]
    assert q.get(None) is CLOSED


def test_get_many_takes_a_batch_in_order() -> None:
    q = RecordQueue(10)
    progress = ShardProgress("s", None)
    q.put_many([(record(i), progress) for i in range(5)], 0, _no_wait)
    first = q.get_many(3, 0)
    assert isinstance(first, list) and [r.sequence_number for r, _ in first] == ["0", "1", "2"]
    rest = q.get_many(10, 0)
    assert isinstance(rest, list) and [r.sequence_number for r, _ in rest] == ["3", "4"]
    assert q.get_many(10, 0.01) is None


def test_taking_records_wakes_a_writer_waiting_for_room() -> None:
    q = RecordQueue(2)
    progress = ShardProgress("s", None)
    q.put_many([(record(1), progress), (record(2), progress)], 0, _no_wait)
    added: list[int] = []
    writer = threading.Thread(target=lambda: added.append(q.put_many([(record(3), progress)], 0, _wait_for_room)))
    writer.start()
    deadline = time.monotonic() + 10
    while q._putters == 0 and time.monotonic() < deadline:  # the writer is waiting for room
        time.sleep(0.01)
    assert q.get_many(1, 0) is not None
    writer.join(10)  # it was woken: it has no timeout of its own
    assert not writer.is_alive() and added == [1]


def test_wait_sees_an_ack_that_lands_while_its_predicate_runs() -> None:
    progress = ShardProgress("s", None)
    token = progress.deliver(("1", None))
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
    q = RecordQueue(4)
    old, new = ShardProgress("a", None), ShardProgress("b", None)
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.append(q.get_many(10, 60)))
    reader.start()
    deadline = time.monotonic() + 10
    while q._getters == 0 and time.monotonic() < deadline:  # the reader is waiting for records
        time.sleep(0.01)
    q.purge(old)
    q.put_many([(record(1, "b"), new)], 0, _no_wait)
    reader.join(10)  # far less than its 60 s timeout
    assert not reader.is_alive()
    assert isinstance(got[0], list) and [r.sequence_number for r, _ in got[0]] == ["1"]


def test_a_writer_waiting_for_room_leaves_when_told_to_stop() -> None:
    q = RecordQueue(1)
    progress = ShardProgress("s", None)
    q.put_many([(record(1), progress)], 0, _no_wait)
    stop = threading.Event()
    added: list[int] = []
    writer = threading.Thread(target=lambda: added.append(q.put_many([(record(2), progress)], 0, stop.is_set)))
    writer.start()
    deadline = time.monotonic() + 10
    while q._putters == 0 and time.monotonic() < deadline:  # the writer is waiting for room
        time.sleep(0.01)
    stop.set()
    q.wake_putters()
    writer.join(10)
    assert not writer.is_alive() and added == [0]
    assert len(q) == 1


# ---------------------------------------------------------------- Delivery


def delivery(buffer_size: int = 100) -> Delivery:
    return Delivery(buffer_size, GuardedStats(StatReceiver()))


def test_auto_mode_counts_a_holders_record_when_that_holder_asks_again() -> None:
    d = delivery()
    progress = d.open_shard("s", None)
    assert d.push(progress, [record(1), record(2), record(3)], _wait_for_room)
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
    d.push(progress, [record(1), record(2)], _wait_for_room)
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


def test_poll_never_waits() -> None:
    d = delivery()
    assert d.poll() is None
    progress = d.open_shard("s", None)
    d.push(progress, [record(1)], _wait_for_room)
    taken = d.poll()
    assert taken is not None and taken[0] == record(1)


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


def test_a_push_gives_up_when_closed_or_told_to_stop() -> None:
    d = delivery(buffer_size=1)
    progress = d.open_shard("s", None)
    asked = iter([False])  # go on the first time it asks, stop from then on
    assert d.push(progress, [record(1), record(2)], lambda: next(asked, True)) == 1  # room for one
    assert d.push(progress, [record(2)], _no_wait) == 0
    d.close()
    assert d.push(progress, [record(2)], _wait_for_room) == 0


def test_a_handoff_drops_queued_records_and_waits_for_delivered_ones() -> None:
    d = delivery(buffer_size=16)  # next*() takes one record from the queue at a time
    progress = d.open_shard("s", ("0", None))
    other = d.open_shard("t", None)
    d.push(progress, [record(1), record(2), record(3)], _wait_for_room)
    d.push(other, [record(1, "t")], _wait_for_room)
    (_, cp1), (_, cp2) = d.next_manual(1), d.next_manual(1)
    assert cp1 is not None and cp2 is not None
    acker = threading.Timer(0.05, lambda: (cp1(), cp2()))
    acker.start()
    result = d.hand_off(progress, timeout=10)
    acker.join()
    assert result == HandoffResult(clean=True, checkpoint=("2", None), dropped=1, outstanding=0)
    assert d.next_manual(1)[0] == record(1, "t")  # record 3 of s went with the handoff


def test_a_handoff_that_times_out_keeps_the_acknowledged_prefix() -> None:
    d = delivery()
    progress = d.open_shard("s", ("0", None))
    d.push(progress, [record(1), record(2)], _wait_for_room)
    (_, cp1), (_, cp2) = d.next_manual(1), d.next_manual(1)
    assert cp1 is not None and cp2 is not None
    cp1()
    result = d.hand_off(progress, timeout=0.05)
    assert result == HandoffResult(clean=False, checkpoint=("1", None), dropped=0, outstanding=1)
    cp2()  # too late: the shard was released
    assert progress.checkpoint == ("1", None)


def test_waiting_for_a_finished_shard_ends_on_a_stop_request() -> None:
    d = delivery()
    progress = d.open_shard("s", None)
    d.push(progress, [record(1)], _wait_for_room)
    stop = threading.Event()
    results: list[bool] = []
    waiter = threading.Thread(target=lambda: results.append(d.wait_processed(progress, stop.is_set)))
    waiter.start()
    stop.set()
    progress.revoke()  # what a stop request does: it wakes the wait
    waiter.join(10)
    assert results == [False]
    d2 = delivery()
    done = d2.open_shard("s", None)
    d2.push(done, [record(1)], _wait_for_room)
    d2.next_auto("h", 1)
    d2.acknowledge_held()
    assert d2.wait_processed(done, lambda: False)


def test_a_record_of_a_lease_not_confirmed_lately_waits_for_the_lease_to_be_confirmed() -> None:
    d = delivery()
    progress = d.open_shard("s", None)
    d.push(progress, [record(1), record(2)], _wait_for_room)
    progress.confirm(time.monotonic() - 1)  # last confirmed long enough ago: maybe not ours any more
    with pytest.raises(NoRecordWithin):
        d.take(0.05)
    assert d.poll() is None
    threading.Timer(0.05, lambda: progress.confirm(time.monotonic() + 60)).start()
    taken = d.take(10)  # handed on once the lease is confirmed, in order
    assert taken is not None and taken[0] == record(1)


def test_a_record_of_a_lease_found_lost_is_dropped_while_waiting() -> None:
    d = delivery()
    stale, other = d.open_shard("s", None), d.open_shard("t", None)
    d.push(stale, [record(1)], _wait_for_room)
    d.push(other, [record(1, "t")], _wait_for_room)
    stale.confirm(time.monotonic() - 1)
    threading.Timer(0.05, stale.revoke).start()  # a commit found another owner
    taken = d.take(10)
    assert taken is not None and taken[0] == record(1, "t")  # the stale shard's record went with it
