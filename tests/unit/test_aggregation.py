"""KPL aggregates written by kinsumer: read back by kinsumer's deaggregation and by awslabs' aws-kinesis-agg."""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from demo.aggregation import deaggregator
from kinsumer.reading.kpl import MAGIC, deaggregate
from kinsumer.writing.aggregation import MAX_RECORD_BYTES, AggregateBuilder, Entry, hash_of

ARRIVAL = dt.datetime(2026, 11, 25, tzinfo=dt.UTC)

user_records = st.lists(
    st.tuples(
        st.text(min_size=1, max_size=30),
        st.binary(max_size=300),
        st.one_of(st.none(), st.integers(0, 2**128 - 1).map(str)),
    ),
    min_size=1,
    max_size=60,
)


def built(
    users: list[tuple[str, bytes, str | None]], max_bytes: int = MAX_RECORD_BYTES, max_records: int | None = None
) -> list[Entry]:
    """The users' aggregates, in order: a new one each time one is full."""
    entries, builder = [], AggregateBuilder(max_bytes, max_records)
    for key, data, hash_key in users:
        if not builder.add(key, data, hash_key):
            entries.append(builder.build())
            builder = AggregateBuilder(max_bytes, max_records)
            assert builder.add(key, data, hash_key)
    entries.append(builder.build())
    return entries


def as_read(entry: Entry, sequence_number: str) -> dict[str, Any]:
    return {"Data": entry.data, "PartitionKey": entry.partition_key, "SequenceNumber": sequence_number,
            "ApproximateArrivalTimestamp": ARRIVAL}  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(user_records, st.sampled_from([200, 2_000, MAX_RECORD_BYTES]))
def test_kinsumer_reads_back_every_user_record_in_order_and_no_aggregate_passes_its_size(
    users: list[tuple[str, bytes, str | None]], max_bytes: int
) -> None:
    entries = built(users, max_bytes)
    read, malformed = deaggregate([as_read(e, str(4900 + i)) for i, e in enumerate(entries)])
    assert malformed == 0
    assert [(r["PartitionKey"], r["Data"]) for r in read] == [(key, data) for key, data, _ in users]
    position = 0
    for i, entry in enumerate(entries):
        chunk = users[position : position + entry.user_records]
        position += entry.user_records
        read_back = [r for r in read if r["SequenceNumber"] == str(4900 + i)]
        if entry.user_records > 1 or chunk[0][1].startswith(MAGIC):  # a lone record like an aggregate goes as one
            assert entry.data.startswith(MAGIC)
            assert entry.size <= max_bytes or entry.user_records == 1  # an aggregate of one may pass max_bytes
            assert [r.get("ExplicitHashKey") for r in read_back] == [hash_key for _, _, hash_key in chunk]
            # routed as its first user record: into that record's shard
            assert entry.explicit_hash_key == str(hash_of(chunk[0][0], chunk[0][2]))
        else:  # a plain record: its explicit hash key routes it (GetRecords does not return it)
            assert entry.explicit_hash_key == chunk[0][2]
            assert read_back[0].get("SubSequenceNumber") is None
    assert position == len(users)


@settings(max_examples=100, deadline=None)
@given(user_records)
def test_aws_kinesis_agg_reads_kinsumers_aggregates(users: list[tuple[str, bytes, str | None]]) -> None:
    (entry,) = built(users) if len(users) > 1 else (None,)  # type: ignore[assignment]
    if entry is None:
        return
    boto3_record = {"Data": entry.data, "PartitionKey": entry.partition_key, "SequenceNumber": "4900",
                    "ApproximateArrivalTimestamp": ARRIVAL}  # fmt: skip
    read = list(deaggregator().iter_deaggregate_records([boto3_record], data_format="Boto3"))
    assert [(r["kinesis"]["partitionKey"], base64.b64decode(r["kinesis"]["data"])) for r in read] == [
        (key, data) for key, data, _ in users
    ]
    assert [r["kinesis"]["subSequenceNumber"] for r in read] == list(range(len(users)))
    # aws-kinesis-agg gives a record without an explicit hash key the table's first one (its bug), so
    # only the records that have one are compared
    for record, (_, _, hash_key) in zip(read, users, strict=True):
        if hash_key is not None:
            assert record["kinesis"]["explicitHashKey"] == hash_key


@settings(max_examples=100, deadline=None)
@given(user_records, st.integers(1, 12))
def test_max_records_caps_each_aggregate_at_that_many_user_records(
    users: list[tuple[str, bytes, str | None]], max_records: int
) -> None:
    entries = built(users, max_records=max_records)
    full, last = divmod(len(users), max_records)  # small records: only the count fills an aggregate
    assert [e.user_records for e in entries] == [max_records] * full + ([last] if last else [])
    read, malformed = deaggregate([as_read(e, str(4900 + i)) for i, e in enumerate(entries)])
    assert malformed == 0
    assert [(r["PartitionKey"], r["Data"]) for r in read] == [(key, data) for key, data, _ in users]
    with pytest.raises(ValueError, match="at least 1 user record"):
        AggregateBuilder(max_records=0)


def test_a_record_too_big_for_an_aggregate_goes_alone_as_the_plain_record_it_is() -> None:
    entries = built([("a", b"x" * 10, None), ("big", b"y" * 5_000, None), ("c", b"z", "7")], max_bytes=1_000)
    assert [(e.partition_key, e.user_records, e.data.startswith(MAGIC)) for e in entries] == [
        ("a", 1, False), ("big", 1, False), ("c", 1, False)
    ]  # fmt: skip
    assert entries[2].explicit_hash_key == "7"


def test_hash_keys_are_the_md5_of_the_partition_key_unless_explicit() -> None:
    assert hash_of("", None) == 0xD41D8CD98F00B204E9800998ECF8427E
    assert hash_of("anything", "12") == 12
    with pytest.raises(ValueError, match="empty"):
        AggregateBuilder().build()


@pytest.mark.parametrize("data", [MAGIC, MAGIC + b"not an aggregate"])
def test_a_lone_user_record_that_starts_like_an_aggregate_goes_as_an_aggregate_of_one(data: bytes) -> None:
    builder = AggregateBuilder()
    assert builder.add("k", data)
    entry = builder.build()
    assert entry.data != data  # sent plain, every reader would try to unpack it and count it malformed
    read, malformed = deaggregate([as_read(entry, "7")])
    assert malformed == 0 and [(r["PartitionKey"], r["Data"]) for r in read] == [("k", data)]
