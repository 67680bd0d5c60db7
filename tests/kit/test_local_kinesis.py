"""kinsumer.testing's LocalKinesis as a Kinesis client: routing, sequence numbers, iterators, resharding, errors."""

from __future__ import annotations

import datetime as dt
import hashlib

import botocore.exceptions
import pytest

from kinsumer.aws.lean_get_records import lean_for
from kinsumer.testing import ITERATOR_LIFETIME, LocalKinesis

TOP = 2**128 - 1


class Clock:
    """Epoch seconds, moved by hand."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def read_all(kinesis: LocalKinesis, shard_id: str, kind: str = "TRIM_HORIZON", **where: object) -> list[dict]:  # type: ignore[type-arg]
    iterator = kinesis.get_shard_iterator(StreamName="s", ShardId=shard_id, ShardIteratorType=kind, **where)
    found: list[dict] = []  # type: ignore[type-arg]
    token = iterator["ShardIterator"]
    while token:
        page = kinesis.get_records(ShardIterator=token, Limit=7)
        found += page["Records"]
        if not page["Records"] and "NextShardIterator" in page:
            break  # the tip of an open shard
        token = page.get("NextShardIterator")
    return found


def test_records_go_to_the_shard_whose_hash_range_holds_the_md5_of_their_key_or_their_explicit_hash_key() -> None:
    kinesis = LocalKinesis()
    kinesis.add_stream("s", shards=4)
    ranges = {s["ShardId"]: (int(s["HashKeyRange"]["StartingHashKey"]), int(s["HashKeyRange"]["EndingHashKey"]))
              for s in kinesis.list_shards(StreamName="s")["Shards"]}  # fmt: skip
    assert min(r[0] for r in ranges.values()) == 0 and max(r[1] for r in ranges.values()) == TOP
    for i in range(40):
        key = f"key-{i}"
        put = kinesis.put("s", f"record {i}", partition_key=key)
        low, high = ranges[put.shard_id]
        assert low <= int.from_bytes(hashlib.md5(key.encode()).digest(), "big") <= high
    explicit = kinesis.put("s", b"x", partition_key="any", explicit_hash_key=str(TOP))
    assert explicit.shard_id == "shardId-000000000003"


def test_sequence_numbers_increase_within_each_shard_and_data_comes_back_as_written() -> None:
    kinesis = LocalKinesis()
    kinesis.add_stream("s", shards=2)
    answer = kinesis.put_records(
        StreamName="s", Records=[{"Data": f"{i}".encode(), "PartitionKey": f"k{i % 5}"} for i in range(50)]
    )
    assert answer["FailedRecordCount"] == 0 and len(answer["Records"]) == 50
    for shard_id in kinesis.open_shards("s"):
        records = read_all(kinesis, shard_id)
        numbers = [int(r["SequenceNumber"]) for r in records]
        assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
        assert [r["SequenceNumber"] for r in records] == [r.sequence_number for r in kinesis.records("s", shard_id)]
        assert all(isinstance(r["Data"], bytes) for r in records)
    every = sorted(int(r.data) for r in kinesis.records("s"))
    assert every == list(range(50))


def test_each_iterator_type_starts_where_kinesis_starts_it() -> None:
    clock = Clock()
    kinesis = LocalKinesis(clock=clock)
    kinesis.add_stream("s")
    shard = "shardId-000000000000"
    first = [kinesis.put("s", f"{i}", "k") for i in range(5)]
    latest = kinesis.get_shard_iterator(StreamName="s", ShardId=shard, ShardIteratorType="LATEST")["ShardIterator"]
    clock.now += 10
    later = [kinesis.put("s", f"{i}", "k") for i in range(5, 8)]

    def data(records: list[dict]) -> list[bytes]:  # type: ignore[type-arg]
        return [r["Data"] for r in records]

    assert data(read_all(kinesis, shard)) == [f"{i}".encode() for i in range(8)]
    assert data(kinesis.get_records(ShardIterator=latest)["Records"]) == [b"5", b"6", b"7"]
    at = {"StartingSequenceNumber": first[2].sequence_number}
    assert data(read_all(kinesis, shard, "AT_SEQUENCE_NUMBER", **at))[0] == b"2"
    assert data(read_all(kinesis, shard, "AFTER_SEQUENCE_NUMBER", **at))[0] == b"3"
    when = dt.datetime.fromtimestamp(clock.now, dt.UTC)
    assert data(read_all(kinesis, shard, "AT_TIMESTAMP", Timestamp=when)) == [b"5", b"6", b"7"]
    assert later[0].sequence_number > first[-1].sequence_number


def test_millis_behind_latest_is_the_age_of_the_pages_last_record_until_the_tip() -> None:
    clock = Clock()
    kinesis = LocalKinesis(clock=clock)
    kinesis.add_stream("s")
    for i in range(3):
        kinesis.put("s", f"{i}", "k")
    clock.now += 2.5
    iterator = kinesis.get_shard_iterator(StreamName="s", ShardId="shardId-000000000000",
                                          ShardIteratorType="TRIM_HORIZON")["ShardIterator"]  # fmt: skip
    page = kinesis.get_records(ShardIterator=iterator, Limit=1)
    assert page["MillisBehindLatest"] == 2500
    assert kinesis.get_records(ShardIterator=page["NextShardIterator"])["MillisBehindLatest"] == 0


def test_a_split_closes_the_parent_routes_new_records_to_its_children_and_the_parent_ends_naming_them() -> None:
    kinesis = LocalKinesis()
    kinesis.add_stream("s")
    parent = "shardId-000000000000"
    before = [kinesis.put("s", f"a{i}", f"k{i}") for i in range(10)]
    low, high = kinesis.split("s", parent)
    after = [kinesis.put("s", f"b{i}", f"k{i}") for i in range(10)]
    shards = {s["ShardId"]: s for s in kinesis.list_shards(StreamName="s")["Shards"]}
    ending = int(shards[parent]["SequenceNumberRange"]["EndingSequenceNumber"])
    assert all(int(p.sequence_number) <= ending for p in before)
    assert shards[low]["ParentShardId"] == parent and shards[high]["ParentShardId"] == parent
    assert int(shards[low]["HashKeyRange"]["EndingHashKey"]) + 1 == int(shards[high]["HashKeyRange"]["StartingHashKey"])
    assert {p.shard_id for p in after} <= {low, high} and all(int(p.sequence_number) > ending for p in after)
    assert kinesis.open_shards("s") == [low, high]
    iterator = kinesis.get_shard_iterator(StreamName="s", ShardId=parent, ShardIteratorType="TRIM_HORIZON")
    last = kinesis.get_records(ShardIterator=iterator["ShardIterator"])
    assert len(last["Records"]) == 10 and "NextShardIterator" not in last
    assert [c["ShardId"] for c in last["ChildShards"]] == [low, high]


def test_a_merge_makes_one_child_of_two_adjacent_shards_and_refuses_shards_that_are_not_adjacent() -> None:
    kinesis = LocalKinesis()
    kinesis.add_stream("s", shards=3)
    with pytest.raises(kinesis.exceptions.InvalidArgumentException, match="not adjacent"):
        kinesis.merge("s", "shardId-000000000000", "shardId-000000000002")
    child = kinesis.merge("s", "shardId-000000000001", "shardId-000000000002")
    described = {s["ShardId"]: s for s in kinesis.list_shards(StreamName="s")["Shards"]}[child]
    assert described["ParentShardId"] == "shardId-000000000001"
    assert described["AdjacentParentShardId"] == "shardId-000000000002"
    assert described["HashKeyRange"]["EndingHashKey"] == str(TOP)
    assert kinesis.open_shards("s") == ["shardId-000000000000", child]
    with pytest.raises(kinesis.exceptions.InvalidArgumentException, match="not open"):
        kinesis.split("s", "shardId-000000000001")


def test_errors_are_botocore_client_errors_with_the_services_codes() -> None:
    clock = Clock()
    kinesis = LocalKinesis(clock=clock)
    with pytest.raises(kinesis.exceptions.ResourceNotFoundException):
        kinesis.describe_stream_summary(StreamName="nope")
    kinesis.add_stream("s")
    with pytest.raises(kinesis.exceptions.ResourceInUseException):
        kinesis.add_stream("s")
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        kinesis.get_shard_iterator(StreamName="s", ShardId="shardId-000000000009", ShardIteratorType="LATEST")
    assert caught.value.response["Error"]["Code"] == "ResourceNotFoundException"
    iterator = kinesis.get_shard_iterator(StreamName="s", ShardId="shardId-000000000000",
                                          ShardIteratorType="LATEST")["ShardIterator"]  # fmt: skip
    clock.now += ITERATOR_LIFETIME + 1
    with pytest.raises(kinesis.exceptions.ExpiredIteratorException):
        kinesis.get_records(ShardIterator=iterator)
    with pytest.raises(botocore.exceptions.ParamValidationError):
        kinesis.put_record(StreamName="s", PartitionKey="k")  # no Data: botocore's own check
    with pytest.raises(kinesis.exceptions.InvalidArgumentException, match="ExplicitHashKey"):
        kinesis.put("s", b"x", "k", explicit_hash_key=str(TOP + 1))


def test_shards_are_listed_in_pages_and_a_stream_is_found_by_its_arn() -> None:
    kinesis = LocalKinesis()
    arn = kinesis.add_stream("s", shards=5)
    first = kinesis.list_shards(StreamARN=arn, MaxResults=2)
    ids = [s["ShardId"] for s in first["Shards"]]
    token = first.get("NextToken")
    while token:
        page = kinesis.list_shards(NextToken=token, MaxResults=2)
        ids += [s["ShardId"] for s in page["Shards"]]
        token = page.get("NextToken")
    assert ids == [f"shardId-{i:012d}" for i in range(5)]
    summary = kinesis.describe_stream_summary(StreamARN=arn)["StreamDescriptionSummary"]
    assert summary["StreamName"] == "s" and summary["OpenShardCount"] == 5


def test_kinsumer_reads_it_through_boto3s_get_records_not_its_own_http_path() -> None:
    assert lean_for(LocalKinesis()) is None
