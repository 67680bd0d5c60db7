"""The age of the oldest record in hand per shard: what a capture's bookkeeping says, how a commit stores
it, and what the logging receiver and ``kinsumer status`` show."""

from __future__ import annotations

import datetime as dt

from kinsumer.cli.status_view import render
from kinsumer.delivery.delivery import Delivery
from kinsumer.delivery.progress import ARRIVAL_SAMPLE, ShardProgress
from kinsumer.metrics import LoggingStatReceiver
from kinsumer.record import Record
from kinsumer.stats import GuardedStats, StatReceiver
from kinsumer.status import ApplicationStatus, ShardInfoRow

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def records(first: int, count: int, shard: str = "s") -> list[Record]:
    """Records ``first``.. of ``shard``, record n arriving n seconds after T0."""
    return [Record(b"x", "k", str(n), shard, T0 + dt.timedelta(seconds=n), T0) for n in range(first, first + count)]


def arrival(n: int) -> dt.datetime:
    return T0 + dt.timedelta(seconds=n)


def sampled(n: int) -> dt.datetime:
    """The arrival reported while record n is the oldest in hand: that of the first of its group."""
    return arrival(n - n % ARRIVAL_SAMPLE)


def test_a_capture_holding_nothing_has_no_oldest_record() -> None:
    progress = ShardProgress("s", None)
    assert progress.oldest_arrival() is None
    progress.fetched([])
    assert progress.oldest_arrival() is None


def test_the_oldest_is_the_first_record_not_acknowledged_in_order_whether_read_queued_or_delivered() -> None:
    delivery = Delivery(10_000, GuardedStats(StatReceiver()))
    progress = delivery.open_shard("s", None)
    page = records(0, 100)
    progress.fetched(page)  # read, not yet queued
    assert progress.oldest_arrival() == arrival(0)
    assert delivery.offer(progress, page, 0, lambda: None) == 100  # queued
    assert progress.oldest_arrival() == arrival(0)
    taken = [delivery.next_manual(0) for _ in range(70)]  # delivered, not acknowledged
    assert progress.oldest_arrival() == arrival(0)
    for _, checkpoint in taken[40:]:  # out of order: the prefix does not move
        assert checkpoint is not None
        checkpoint()
    assert progress.oldest_arrival() == arrival(0)
    for _, checkpoint in taken[:40]:
        assert checkpoint is not None
        checkpoint()
    assert progress.oldest_arrival() == sampled(70)  # the first one not delivered yet (queued)
    rest = [delivery.next_manual(0) for _ in range(30)]
    for _, checkpoint in rest:
        assert checkpoint is not None
        checkpoint()
    assert progress.oldest_arrival() is None  # every record read is finished with
    progress.fetched(records(100, 5))
    assert progress.oldest_arrival() == arrival(100)


def test_auto_mode_counts_a_record_once_its_holder_asks_for_the_next() -> None:
    delivery = Delivery(1000, GuardedStats(StatReceiver()))
    progress = delivery.open_shard("s", None)
    page = records(0, 3)
    progress.fetched(page)
    delivery.offer(progress, page, 0, lambda: None)
    holder = object()
    assert delivery.next_auto(holder, 0) is not None
    assert progress.oldest_arrival() == arrival(0)  # the record in hand
    assert delivery.next_auto(holder, 0) is not None
    assert delivery.next_auto(holder, 0) is not None
    assert progress.oldest_arrival() == arrival(0)  # the group's first: record 2 is in hand (same group)


def test_what_is_kept_is_bounded_by_the_records_in_hand() -> None:
    progress = ShardProgress("s", None)
    for first in range(0, 100_000, 1000):
        progress.fetched(records(first, 1000))
        run = progress.start_run(records(first, 1000))
        assert run is not None
        run.handed = run.processed = 1000
        progress.end_run(run)  # all of them processed (auto mode)
    assert progress.oldest_arrival() is None
    assert len(progress._arrivals) == 0


def test_the_logging_receiver_shows_the_oldest_over_shards_and_forgets_a_lost_shard() -> None:
    stats = LoggingStatReceiver()
    stats.record_age("a", 12.5)
    stats.record_age("b", 3.0)
    stats.record_age("c", None)
    assert stats.totals()["record_age_seconds"] == {"a": 12.5, "b": 3.0}
    assert " max_record_age_s=12.5 " in stats.summary()
    stats.record_age("a", None)  # it holds none now
    stats.shard_lost("b")
    assert stats.totals()["record_age_seconds"] == {}
    assert " max_record_age_s=0.0 " in stats.summary()


def test_kinsumer_status_has_an_oldest_column() -> None:
    row = ShardInfoRow(
        shard_id="shardId-000000000000", consumable=True, closed=False, owner_id="c1", owner_name="w1",
        checkpoint="1", finished=False, millis_behind_latest=250, last_update_age=1.0, oldest_record_age=42.04,
    )  # fmt: skip
    idle = ShardInfoRow(
        shard_id="shardId-000000000001", consumable=True, closed=False, owner_id="c1", owner_name="w1",
        checkpoint="1", finished=False, millis_behind_latest=0, last_update_age=1.0,
    )  # fmt: skip
    text = render(ApplicationStatus("clicks", "app", (), None, None, (), None, (row, idle)))
    lines = text.splitlines()
    header = next(line for line in lines if "SHARD" in line)
    assert "LAG" in header and "OLDEST" in header
    assert any("shardId-000000000000" in line and "250 ms" in line and "42.0 s" in line for line in lines)
    column = header.index("OLDEST")
    assert next(line for line in lines if "shardId-000000000001" in line)[column] == "-"
    assert (
        ApplicationStatus("s", "a", (), None, None, (), None, (row,)).to_json()["shards"][0]["oldest_record_age"]
        == 42.04
    )
