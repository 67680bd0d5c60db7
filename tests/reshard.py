"""Splitting and merging shards on kinesalite, for the resharding tests."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from tests.conftest import unique
from tests.helpers import Audit, wait_until


def shards(kinesis: Any, stream: str) -> dict[str, dict[str, Any]]:
    return {s["ShardId"]: s for s in kinesis.list_shards(StreamName=stream)["Shards"]}


def open_in_hash_order(kinesis: Any, stream: str) -> list[dict[str, Any]]:
    open_ = [s for s in shards(kinesis, stream).values() if "EndingSequenceNumber" not in s["SequenceNumberRange"]]
    return sorted(open_, key=lambda s: int(s["HashKeyRange"]["StartingHashKey"]))


def wait_active(kinesis: Any, stream: str) -> None:
    def active() -> bool:
        summary = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]
        return bool(summary["StreamStatus"] == "ACTIVE")

    wait_until(active, 30, "the stream to be ACTIVE")


def new_stream(kinesis: Any, shard_count: int) -> str:
    stream = unique("stream")
    kinesis.create_stream(StreamName=stream, ShardCount=shard_count)
    wait_active(kinesis, stream)
    return stream


def create_again(kinesis: Any, stream: str, shard_count: int) -> None:
    """Delete ``stream`` and create it again under its name, as a new incarnation.

    kinesalite reports creation times in whole seconds (and two seconds in the past), and a
    stream's identity is its ARN and creation time: a stream created again within the same second
    is created again until its creation time differs, as it always does on AWS (a deletion takes
    seconds there), so the two identities differ.
    """
    summary = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]
    old_second = int(summary["StreamCreationTimestamp"].timestamp())
    for _ in range(10):
        kinesis.delete_stream(StreamName=stream)
        kinesis.get_waiter("stream_not_exists").wait(StreamName=stream, WaiterConfig={"Delay": 0.2, "MaxAttempts": 150})
        kinesis.create_stream(StreamName=stream, ShardCount=shard_count)
        wait_active(kinesis, stream)
        created = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]
        if int(created["StreamCreationTimestamp"].timestamp()) > old_second:
            return
        time.sleep(0.5)  # pace the next try: the server's clock must pass the old creation second
    raise AssertionError(f"{stream} was created again ten times within the second of its first creation")


def split_first(kinesis: Any, stream: str) -> str:
    """Split the open shard with the lowest hash keys in two; returns the parent's ID."""
    shard = open_in_hash_order(kinesis, stream)[0]
    low, high = int(shard["HashKeyRange"]["StartingHashKey"]), int(shard["HashKeyRange"]["EndingHashKey"])
    kinesis.split_shard(StreamName=stream, ShardToSplit=shard["ShardId"], NewStartingHashKey=str((low + high) // 2))
    wait_active(kinesis, stream)
    return str(shard["ShardId"])


def wait_arrived(kinesis: Any, stream: str, timeout: float = 10.0) -> None:
    """Wait until the clock has passed the arrival time of every record of ``stream``.

    Trigger.AvailableNow reads the records that arrived before the query started. kinesalite gives a child shard a
    creation time a second after its split, and stamps the records put to it before then with that time: a query
    started within that second leaves them, rightly, to its next run (a full run on 4 workers saw one miss 147 of 700).
    """
    latest = max((r["ApproximateArrivalTimestamp"].timestamp() for _, r in every_record(kinesis, stream)), default=0.0)
    wait_until(lambda: time.time() > latest, timeout, "the clock to pass the last record's arrival time")


def every_record(kinesis: Any, stream: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each record of the stream, with its shard's ID, read from each shard's trim horizon."""
    for shard in kinesis.list_shards(StreamName=stream)["Shards"]:
        iterator = kinesis.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            page = kinesis.get_records(ShardIterator=iterator, Limit=10_000)
            for record in page["Records"]:
                yield shard["ShardId"], record
            if not page["Records"]:
                break
            iterator = page.get("NextShardIterator")


def merge_adjacent(kinesis: Any, stream: str, at: int) -> tuple[str, str]:
    """Merge the open shards at positions ``at`` and ``at + 1`` (hash order); returns the parents."""
    left, right = open_in_hash_order(kinesis, stream)[at : at + 2]
    kinesis.merge_shards(StreamName=stream, ShardToMerge=left["ShardId"], AdjacentShardToMerge=right["ShardId"])
    wait_active(kinesis, stream)
    return str(left["ShardId"]), str(right["ShardId"])


def assert_reshard_delivery(audit: Audit, listing: list[dict[str, Any]], key_of: Callable[[int], str]) -> int:
    """Per partition key, first deliveries in the order written; each child first read after its parents.

    ``key_of``: a record id's partition key (records of one key are written in id order).
    Returns how many (parent, child) pairs were checked.
    """
    deliveries = sorted(audit.deliveries, key=lambda d: d.order)
    seen: set[int] = set()
    by_key: dict[str, list[int]] = defaultdict(list)
    for d in deliveries:
        if d.record_id not in seen:
            seen.add(d.record_id)
            by_key[key_of(d.record_id)].append(d.record_id)
    for key, ids in by_key.items():
        assert ids == sorted(ids), key
    first_at: dict[str, int] = {}
    last_at: dict[str, int] = {}
    for d in deliveries:
        first_at.setdefault(d.shard_id, d.order)
        last_at[d.shard_id] = d.order
    checked = 0
    for shard in listing:
        child = shard["ShardId"]
        for parent in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId")):
            if parent and child in first_at and parent in last_at:
                assert first_at[child] > last_at[parent], (parent, child)
                checked += 1
    return checked
