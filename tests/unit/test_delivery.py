import datetime as dt
import threading

from kinsumer.delivery import Checkpoint, ShardProgress
from kinsumer.record import Record
from kinsumer.record_queue import CLOSED, RecordQueue

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def record(seq: int, shard: str = "s") -> Record:
    return Record(b"x", "k", str(seq), shard, NOW, NOW)


def test_deliveries_after_revoke_are_refused_but_acks_still_count() -> None:
    progress = ShardProgress("s", None)
    token = progress.deliver("1")
    assert token is not None
    progress.revoke()
    assert progress.deliver("2") is None
    progress.ack(token)
    assert progress.checkpoint == "1"


def test_acks_after_release_are_no_ops() -> None:
    progress = ShardProgress("s", "5")
    a = progress.deliver("6")
    assert a is not None
    assert progress.release() == "5"
    Checkpoint("s", "6", progress, a)()
    assert progress.checkpoint == "5"


def test_all_processed_needs_every_pushed_record_delivered_and_acked() -> None:
    progress = ShardProgress("s", None)
    progress.pushed(2)
    a = progress.deliver("1")
    assert not progress.all_processed()
    b = progress.deliver("2")
    assert a is not None and b is not None
    progress.ack(b)
    assert not progress.all_processed()
    progress.ack(a)
    assert progress.all_processed()


def test_wait_wakes_on_the_last_ack() -> None:
    progress = ShardProgress("s", None)
    token = progress.deliver("1")
    assert token is not None
    acker = threading.Timer(0.05, progress.ack, args=(token,))
    acker.start()
    assert progress.wait(progress.all_acknowledged, timeout=10)
    acker.join()


def test_queue_is_bounded_and_fifo() -> None:
    q = RecordQueue(3)
    progress = ShardProgress("s", None)
    items = [(record(i), progress) for i in range(5)]
    assert q.put_many(items, 0, timeout=0) == 3
    assert q.put_many(items, 3, timeout=0) == 0
    got = q.get(0)
    assert got is not CLOSED and got is not None and got[0].sequence_number == "0"
    assert q.put_many(items, 3, timeout=0) == 1
    assert [q.get(0)[0].sequence_number for _ in range(3)] == ["1", "2", "3"]  # type: ignore[index]
    assert q.get(0.01) is None


def test_purge_drops_only_one_capture_and_frees_room() -> None:
    q = RecordQueue(4)
    old, other = ShardProgress("a", None), ShardProgress("b", None)
    q.put_many([(record(1, "a"), old), (record(1, "b"), other), (record(2, "a"), old)], 0, timeout=0)
    assert q.purge(old) == 2
    assert len(q) == 1
    got = q.get(0)
    assert got is not None and got is not CLOSED and got[1] is other


def test_close_wakes_a_blocked_reader_and_writer() -> None:
    q = RecordQueue(1)
    progress = ShardProgress("s", None)
    q.put_many([(record(1), progress)], 0, timeout=0)
    results: list[object] = []
    writer = threading.Thread(target=lambda: results.append(q.put_many([(record(2), progress)], 0, timeout=30)))
    writer.start()
    q.close()
    writer.join(10)
    assert results == [0]
    assert q.get(None) is CLOSED
