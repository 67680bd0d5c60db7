"""failOnDataLoss on the driver: which positions lost records, and what the check does then (moto in-process).

No server trims by retention: a position after a sequence number older than a shard's first record
is what a trimmed one looks like (the record it follows is gone, the oldest record left comes after it).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from hypothesis import given
from hypothesis import strategies as st
from moto import mock_aws

pytest.importorskip("pyspark")  # the package kinsumer.spark imports it

from kinsumer import DataLossError
from kinsumer.aws.kinesis import ShardInfo, list_shards
from kinsumer.spark.data_loss import DataLossCheck, at_risk, expired, follows, trimmed
from kinsumer.spark.offsets import SHARD_END, TRIM_HORIZON, ShardEnd, Stop, passed_end

STREAM = "clicks"
DAY_MS = 24 * 3_600_000

sequence_numbers = st.integers(min_value=0, max_value=2**185)


@given(sequence_numbers, st.one_of(st.none(), st.integers(min_value=0, max_value=3)), sequence_numbers)
def test_a_position_lost_records_exactly_when_the_oldest_record_left_comes_after_the_one_it_follows(
    after: int, sub: int | None, oldest: int
) -> None:
    position = f"AFTER:{after}" if sub is None else f"AFTER:{after}:{sub}"
    assert follows(position) == after
    assert trimmed(position, str(oldest)) is (oldest > after)
    assert not trimmed(position, None)  # an empty shard: nothing to lose


@pytest.mark.parametrize("position", [TRIM_HORIZON, "AT_TIMESTAMP:1700000000000"])
def test_a_start_that_never_read_anything_loses_nothing_however_old(position: str) -> None:
    assert follows(position) is None
    assert not trimmed(position, "12345")


def test_expired_shards_are_those_the_listing_no_longer_has() -> None:
    listing = [ShardInfo("shardId-000000000002"), ShardInfo("shardId-000000000003")]
    assert expired(["shardId-000000000001", "shardId-000000000002"], listing) == ["shardId-000000000001"]


def test_a_shard_is_at_risk_when_its_last_read_ended_most_of_the_retention_behind() -> None:
    prior = {
        "a": ShardEnd("AFTER:1", Stop.MORE, behind=int(0.95 * DAY_MS)),
        "b": ShardEnd("AFTER:1", Stop.MORE, behind=int(0.5 * DAY_MS)),
        "c": ShardEnd("AFTER:1", Stop.TIP, behind=0),
        "d": ShardEnd("AFTER:1", Stop.MORE),
    }
    assert at_risk(prior, DAY_MS) == ["a"]


class Calls:
    """A Kinesis client factory that counts the calls made through it."""

    def __init__(self, kinesis: Any) -> None:
        self.kinesis = kinesis
        self.names: list[str] = []
        kinesis.meta.events.register("before-call.kinesis.*", self._count)

    def _count(self, model: Any, **_: Any) -> None:
        self.names.append(model.name)

    def __call__(self) -> Any:
        return self.kinesis


@pytest.fixture
def kinesis() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("kinesis", region_name="us-east-1")
        client.create_stream(StreamName=STREAM, ShardCount=2)
        yield client


def _shards(kinesis: Any) -> tuple[list[ShardInfo], str, str]:
    listing = list_shards(kinesis, STREAM)
    return listing, listing[0].shard_id, listing[1].shard_id


def _put(kinesis: Any, shard: str, n: int) -> list[str]:
    key = {"shardId-000000000000": "0", "shardId-000000000001": str(2**127)}[shard]
    return [
        kinesis.put_record(StreamName=STREAM, Data=b"x", PartitionKey="k", ExplicitHashKey=key)["SequenceNumber"]
        for _ in range(n)
    ]


def test_failing_names_the_stream_the_shard_and_the_position_of_trimmed_records(kinesis: Any) -> None:
    listing, one, two = _shards(kinesis)
    first = _put(kinesis, one, 3)[0]
    _put(kinesis, two, 2)
    gone = f"AFTER:{int(first) - 1}"  # a record before the oldest one left
    check = DataLossCheck(Calls(kinesis), STREAM, fail=True)
    with pytest.raises(DataLossError) as raised:
        check.starts({one: gone, two: TRIM_HORIZON}, listing, {})
    error = raised.value
    assert (error.stream, error.shard, error.position, error.reason, error.earliest) == (
        STREAM, one, gone, "trimmed", first,
    )  # fmt: skip
    assert STREAM in str(error) and one in str(error) and gone in str(error) and "failOnDataLoss" in str(error)


def test_a_position_whose_record_is_still_there_or_an_empty_shard_lose_nothing(kinesis: Any) -> None:
    listing, one, two = _shards(kinesis)
    first = _put(kinesis, one, 3)[0]
    positions = {one: f"AFTER:{first}", two: "AFTER:12345"}  # two is empty: nothing was trimmed that is not read
    check = DataLossCheck(Calls(kinesis), STREAM, fail=True)
    assert check.starts(positions, listing, {}) == positions
    assert check.progress() is None


def test_going_on_reads_from_the_oldest_record_warns_and_counts_once(
    kinesis: Any, caplog: pytest.LogCaptureFixture
) -> None:
    listing, one, two = _shards(kinesis)
    first = _put(kinesis, one, 3)[0]
    gone = f"AFTER:{int(first) - 1}"
    calls = Calls(kinesis)
    check = DataLossCheck(calls, STREAM, fail=False)
    with caplog.at_level(logging.WARNING, logger="kinsumer.spark"):
        assert check.starts({one: gone, two: TRIM_HORIZON}, listing, {}) == {one: TRIM_HORIZON, two: TRIM_HORIZON}
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert one in caplog.text and STREAM in caplog.text and gone in caplog.text
    progress = check.progress()
    assert progress == {
        "expired": 0, "last": {"shard": one, "position": gone, "reason": "trimmed", "oldest": first},
        "shards": 1, "trimmed": 1,
    }  # fmt: skip

    before = len(calls.names)
    assert check.starts({one: gone}, listing, {}) == {one: TRIM_HORIZON}  # the batch again: the same start
    assert len(calls.names) == before and check.progress() == progress  # not looked up, not counted twice


def test_a_shard_seen_in_this_run_is_checked_again_only_when_its_last_read_ended_near_the_retention(
    kinesis: Any,
) -> None:
    listing, one, _ = _shards(kinesis)
    sequence_numbers = _put(kinesis, one, 3)
    calls = Calls(kinesis)
    check = DataLossCheck(calls, STREAM, fail=True)
    check.starts({one: f"AFTER:{sequence_numbers[0]}"}, listing, {})  # the first time: checked
    looked = calls.names.count("GetShardIterator")
    assert looked == 1
    at_tip = {one: ShardEnd(f"AFTER:{sequence_numbers[1]}", Stop.TIP, behind=0)}
    check.starts({one: f"AFTER:{int(sequence_numbers[0]) - 1}"}, listing, at_tip)
    assert calls.names.count("GetShardIterator") == looked  # probed while the query ran: not looked up
    behind = {one: ShardEnd(f"AFTER:{sequence_numbers[1]}", Stop.MORE, behind=int(0.95 * DAY_MS))}
    with pytest.raises(DataLossError):
        check.starts({one: f"AFTER:{int(sequence_numbers[0]) - 1}"}, listing, behind)


@pytest.mark.parametrize("fail", [True, False])
def test_a_shard_that_expired_before_the_query_read_it_to_its_end(
    kinesis: Any, fail: bool, caplog: pytest.LogCaptureFixture
) -> None:
    listing, one, _ = _shards(kinesis)
    gone_shard, position = "shardId-000000000007", "AFTER:4711"
    check = DataLossCheck(Calls(kinesis), STREAM, fail=fail)
    positions = {one: TRIM_HORIZON, gone_shard: position}
    if fail:
        with pytest.raises(DataLossError, match=f"{gone_shard} was to be read from {position}.*expired") as raised:
            check.starts(positions, listing, {})
        assert raised.value.reason == "expired"
        return
    with caplog.at_level(logging.WARNING, logger="kinsumer.spark"):
        assert check.starts(positions, listing, {}) == positions  # the executor finds it gone and ends it
    assert gone_shard in caplog.text and "expired" in caplog.text
    assert check.progress() == {
        "expired": 1, "last": {"shard": gone_shard, "position": position, "reason": "expired"},
        "shards": 1, "trimmed": 0,
    }  # fmt: skip


def test_the_progress_sums_the_losses_of_every_stream_and_names_the_stream_of_each() -> None:
    from kinsumer.spark.stream_reader import _data_loss_figures  # the reader's progress, without a Spark run

    one = {"expired": 1, "shards": 1, "trimmed": 0, "last": {"shard": "s-0", "position": "AFTER:1"}}
    two = {"expired": 0, "shards": 2, "trimmed": 3, "last": {"shard": "s-1", "position": "AFTER:9"}}
    assert _data_loss_figures({"a": one}) == {**one, "last": {**one["last"], "stream": "a"}}
    both = _data_loss_figures({"a": one, "b": two})
    assert (both["expired"], both["shards"], both["trimmed"]) == (1, 3, 3)
    assert both["streams"] == {"a": one, "b": two} and "last" not in both


@given(sequence_numbers, sequence_numbers, st.integers(min_value=1, max_value=5))
def test_a_replay_has_passed_its_end_exactly_when_a_record_of_the_page_comes_after_the_one_it_names(
    end: int, first: int, n: int
) -> None:
    page = [{"SequenceNumber": str(first + i)} for i in range(n)]
    assert passed_end(page, f"AFTER:{end}") is (first + n - 1 > end)
    assert passed_end(page, f"AFTER:{end}:3") is (first + n - 1 > end)
    assert not passed_end([], f"AFTER:{end}") and not passed_end(page, SHARD_END)


def test_a_replayed_batch_whose_records_were_all_trimmed_fails_naming_its_range(kinesis: Any) -> None:
    listing, one, two = _shards(kinesis)
    first = _put(kinesis, one, 3)[0]
    end = f"AFTER:{int(first) - 1}"  # the batch's last record is gone, and every one before it
    check = DataLossCheck(Calls(kinesis), STREAM, fail=True)
    with pytest.raises(DataLossError) as raised:
        check.starts({one: TRIM_HORIZON, two: TRIM_HORIZON}, listing, {}, replays={one: end, two: TRIM_HORIZON})
    error = raised.value
    assert (error.shard, error.position, error.replay_to, error.earliest) == (one, TRIM_HORIZON, end, first)
    assert f"from {TRIM_HORIZON} to {end}" in str(error) and "failOnDataLoss" in str(error)


def test_going_on_a_replayed_batch_whose_records_were_all_trimmed_reads_nothing_and_counts_the_gap_once(
    kinesis: Any, caplog: pytest.LogCaptureFixture
) -> None:
    listing, one, two = _shards(kinesis)
    sequence_numbers = _put(kinesis, one, 3)
    start, end = f"AFTER:{int(sequence_numbers[0]) - 2}", f"AFTER:{int(sequence_numbers[0]) - 1}"
    kept = f"AFTER:{sequence_numbers[1]}"  # two's end is still there: the replay reads up to it
    _put(kinesis, two, 1)
    check = DataLossCheck(Calls(kinesis), STREAM, fail=False)
    with caplog.at_level(logging.WARNING, logger="kinsumer.spark"):
        starts = check.starts({one: start, two: TRIM_HORIZON}, listing, {}, replays={one: end, two: kept})
    assert starts == {one: end, two: TRIM_HORIZON}  # one: from its end to its end, nothing
    assert [r.levelno for r in caplog.records] == [logging.WARNING] and end in caplog.text
    progress = check.progress()
    assert progress == {
        "expired": 0, "shards": 1, "trimmed": 1,
        "last": {"shard": one, "position": start, "reason": "trimmed", "oldest": sequence_numbers[0],
                 "replay_to": end},
    }  # fmt: skip
    behind = {one: ShardEnd(end, Stop.MORE, behind=int(0.95 * DAY_MS))}  # checked again, from the replay's end
    assert check.starts({one: end}, listing, behind) == {one: TRIM_HORIZON}
    assert check.progress() == progress  # the same gap: not counted twice


def test_a_replay_whose_end_is_still_there_reads_from_the_oldest_record_when_its_start_was_trimmed(
    kinesis: Any,
) -> None:
    listing, one, _ = _shards(kinesis)
    sequence_numbers = _put(kinesis, one, 3)
    start, end = f"AFTER:{int(sequence_numbers[0]) - 1}", f"AFTER:{sequence_numbers[1]}"
    check = DataLossCheck(Calls(kinesis), STREAM, fail=False)
    assert check.starts({one: start}, listing, {}, replays={one: end}) == {one: TRIM_HORIZON}
    assert check.progress() is not None and "replay_to" not in check.progress()["last"]
    fresh = DataLossCheck(Calls(kinesis), STREAM, fail=True)
    assert fresh.starts({one: TRIM_HORIZON}, listing, {}, replays={one: end}) == {one: TRIM_HORIZON}
