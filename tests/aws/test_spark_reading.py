"""The Spark source's executor-side reading and its options, without Spark (moto in-process)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyspark")

from demo.aggregation import aggregated_entries
from kinsumer import ReplayError
from kinsumer.aws.tables import create_table
from kinsumer.spark.batch_ends import BatchEnds
from kinsumer.spark.offsets import SHARD_END, TRIM_HORIZON, ShardEnd, Stop, after
from kinsumer.spark.shard_range import ShardRange, read_shard_range

SHARD = "shardId-000000000000"


@pytest.fixture
def ends(db: Any) -> BatchEnds:
    create_table(db, "app_metadata", "Key")
    return BatchEnds(db, "app_metadata", "run1")


def put(kinesis: Any, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        kinesis.put_record(StreamName="s", Data=str(i).encode(), PartitionKey="k")


def part(batch: int, start: str = TRIM_HORIZON, limit: int = 10, until: int | None = None) -> ShardRange:
    return ShardRange("s", SHARD, batch, start, limit, time_budget=5.0, until=until)


def test_a_live_read_records_its_end_and_a_replay_reads_the_same_records(kinesis: Any, ends: BatchEnds) -> None:
    kinesis.create_stream(StreamName="s", ShardCount=1)
    put(kinesis, 15)
    ends.plan(0)
    first = read_shard_range(kinesis, ends, part(0))
    assert [r["Data"] for r in first] == [str(i).encode() for i in range(10)]
    assert ends.ends(0) == {SHARD: ShardEnd(after(first[-1]["SequenceNumber"]), Stop.MORE)}
    put(kinesis, 5, start=15)  # more data now: a live re-read would differ
    ends.plan(0)  # planning the batch again (a replay) keeps what was recorded
    again = read_shard_range(kinesis, ends, part(0, limit=100))
    assert [r["SequenceNumber"] for r in again] == [r["SequenceNumber"] for r in first]
    with pytest.raises(ReplayError, match=r"batch 1 .* was never planned"):
        read_shard_range(kinesis, ends, part(1, start=after(first[-1]["SequenceNumber"]), limit=100))


def test_the_tip_of_the_stream_ends_a_live_read_and_an_empty_read_records_its_start(
    kinesis: Any, ends: BatchEnds
) -> None:
    kinesis.create_stream(StreamName="s", ShardCount=1)
    put(kinesis, 3)
    ends.plan(0)
    assert len(read_shard_range(kinesis, ends, part(0, limit=100))) == 3
    start = ends.ends(0)[SHARD]
    assert start.stop is Stop.TIP
    ends.plan(1)
    assert read_shard_range(kinesis, ends, part(1, start=start.position)) == []
    assert ends.ends(1) == {SHARD: start}


def test_the_first_recorded_end_wins(ends: BatchEnds) -> None:
    ends.plan(4)
    assert ends.record(4, SHARD, ShardEnd(after("10"), Stop.TIP), 3)
    assert not ends.record(4, SHARD, ShardEnd(after("99")), 50)
    assert ends.ends(4) == {SHARD: ShardEnd(after("10"), Stop.TIP)}
    assert ends.counts(4) == {SHARD: 3}
    assert ends.record(4, "other", ShardEnd(SHARD_END), 0)
    ends.forget(4)
    assert ends.ends(4) == {}


def test_a_batch_that_ends_inside_an_aggregate_replays_it_and_the_next_batch_goes_on_from_there(
    kinesis: Any, ends: BatchEnds
) -> None:
    kinesis.create_stream(StreamName="s", ShardCount=1)
    (entry,) = aggregated_entries([(f"user-{i}", b"a%d" % i, None) for i in range(5)], per_record=5)
    aggregate_seq = kinesis.put_record(StreamName="s", **entry)["SequenceNumber"]
    put(kinesis, 1, start=99)
    ends.plan(0)
    first = read_shard_range(kinesis, ends, part(0, limit=3))  # maxRecordsPerShard counts user records
    assert [(r["Data"], r["SubSequenceNumber"]) for r in first] == [(b"a0", 0), (b"a1", 1), (b"a2", 2)]
    assert ends.ends(0) == {SHARD: ShardEnd(after(aggregate_seq, 2), Stop.MORE)}
    again = read_shard_range(kinesis, ends, part(0, limit=3))  # a replay: the same user records
    assert again == first
    ends.plan(1)
    second = read_shard_range(kinesis, ends, part(1, start=after(aggregate_seq, 2), limit=10))
    assert [r["Data"] for r in second] == [b"a3", b"a4", b"99"]
    assert [r.get("SubSequenceNumber") for r in second] == [3, 4, None]


def test_an_end_recorded_before_deaggregation_replays_the_whole_aggregate(kinesis: Any, ends: BatchEnds) -> None:
    kinesis.create_stream(StreamName="s", ShardCount=1)
    (entry,) = aggregated_entries([("k", b"a%d" % i, None) for i in range(4)], per_record=4)
    aggregate_seq = kinesis.put_record(StreamName="s", **entry)["SequenceNumber"]
    put(kinesis, 1, start=7)
    ends.plan(0)
    assert ends.record(0, SHARD, ShardEnd(after(aggregate_seq)), 1)  # as the source recorded it before
    assert [r["Data"] for r in read_shard_range(kinesis, ends, part(0))] == [b"a0", b"a1", b"a2", b"a3"]
