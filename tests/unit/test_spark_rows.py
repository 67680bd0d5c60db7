"""The Arrow rows an executor makes of a page of records, and the AvailableNow cut on them."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

pytest.importorskip("pyarrow")

from kinsumer.spark.cut import arrival_micros, arrival_ms
from kinsumer.spark.rows import page_rows

T0 = dt.datetime(2026, 11, 25, 10, 0, 22, 964_000, tzinfo=dt.UTC)
T0_MS = 1_795_600_822_964


def record(i: int, arrival: Any, **extra: Any) -> dict[str, Any]:
    return {
        "Data": b"d%d" % i,
        "PartitionKey": f"k{i}",
        "SequenceNumber": f"{1000 + i}",
        "ApproximateArrivalTimestamp": arrival,
        **extra,
    }


def test_a_page_becomes_one_batch_of_the_source_schema() -> None:
    later = T0 + dt.timedelta(milliseconds=5)
    page = [record(0, T0), record(1, T0), record(2, later)]
    batch, cut = page_rows(page, "s", "shardId-000000000001")
    assert not cut
    assert batch.to_pylist() == [
        {
            "data": r["Data"],
            "partition_key": r["PartitionKey"],
            "sequence_number": r["SequenceNumber"],
            "shard_id": "shardId-000000000001",
            "approximate_arrival_timestamp": r["ApproximateArrivalTimestamp"],
            "stream": "s",
            "sub_sequence_number": None,
            "explicit_hash_key": None,
        }
        for r in page
    ]
    assert str(batch.schema.field("approximate_arrival_timestamp").type) == "timestamp[us, tz=UTC]"


def test_user_records_of_an_aggregate_keep_their_sub_sequence_numbers_and_hash_keys() -> None:
    page = [
        record(0, T0, SubSequenceNumber=0, ExplicitHashKey=None),
        record(1, T0, SubSequenceNumber=1, ExplicitHashKey="123"),
        record(2, T0),
    ]
    batch, _ = page_rows(page, "s", "shard")
    assert batch.column("sub_sequence_number").to_pylist() == [0, 1, None]
    assert batch.column("explicit_hash_key").to_pylist() == [None, "123", None]


def test_the_cut_ends_a_page_at_the_first_record_that_arrived_at_or_after_it() -> None:
    page = [record(i, T0 + dt.timedelta(milliseconds=i)) for i in range(5)]
    batch, cut = page_rows(page, "s", "shard", until=T0_MS + 3)
    assert cut and batch.column("data").to_pylist() == [b"d0", b"d1", b"d2"]
    batch, cut = page_rows(page, "s", "shard", until=T0_MS + 5)  # all before it
    assert not cut and batch.num_rows == 5
    batch, cut = page_rows(page, "s", "shard", until=T0_MS)  # the first is at it
    assert cut and batch.num_rows == 0
    batch, cut = page_rows([], "s", "shard", until=T0_MS)
    assert not cut and batch.num_rows == 0


def test_arrival_times_are_exact_microseconds_whatever_their_type() -> None:
    local = T0.astimezone(dt.timezone(dt.timedelta(hours=-5)))  # botocore's own parse gives local time
    assert arrival_micros(T0) == arrival_micros(local) == T0_MS * 1000
    assert arrival_micros(T0.replace(tzinfo=None)) == T0_MS * 1000  # naive: UTC, as Arrow takes it
    assert arrival_micros(T0_MS / 1000) == T0_MS * 1000  # seconds, as the API's JSON has them
    assert arrival_ms({"ApproximateArrivalTimestamp": T0 + dt.timedelta(microseconds=999)}) == T0_MS
