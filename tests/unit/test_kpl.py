"""KPL deaggregation, against records written by awslabs' aws-kinesis-agg."""

from __future__ import annotations

import datetime as dt
import hashlib
import sys
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from demo.aggregation import aggregated_entries
from kinsumer.reading.kpl import MAGIC, deaggregate

ARRIVAL = dt.datetime(2026, 11, 23, tzinfo=dt.UTC)


def kinesis_record(data: bytes, sequence_number: str = "4900", key: str = "k") -> dict[str, Any]:
    """A record as GetRecords returns it."""
    return {
        "Data": data,
        "PartitionKey": key,
        "SequenceNumber": sequence_number,
        "ApproximateArrivalTimestamp": ARRIVAL,
    }


def aggregate(users: list[tuple[str, bytes, str | None]], sequence_number: str = "4900") -> dict[str, Any]:
    (entry,) = aggregated_entries(users, per_record=len(users))
    return kinesis_record(entry["Data"], sequence_number, entry["PartitionKey"])


user_records = st.lists(
    st.tuples(
        st.text(min_size=1, max_size=20),
        st.binary(max_size=200),
        st.one_of(st.none(), st.integers(0, 2**128 - 1).map(str)),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=200)
@given(users=user_records)
def test_an_aggregate_becomes_its_user_records_in_order(users: list[tuple[str, bytes, str | None]]) -> None:
    record = aggregate(users)
    out, malformed = deaggregate([record])
    assert malformed == 0
    assert [(u["PartitionKey"], u["Data"], u["ExplicitHashKey"]) for u in out] == users
    assert [u["SubSequenceNumber"] for u in out] == list(range(len(users)))
    assert {(u["SequenceNumber"], u["ApproximateArrivalTimestamp"]) for u in out} == {("4900", ARRIVAL)}


def test_plain_records_pass_through_and_mix_with_aggregates_in_order() -> None:
    plain = [kinesis_record(b"plain-1", "1"), kinesis_record(b"plain-2", "2")]
    assert deaggregate(plain) == (plain, 0)
    assert deaggregate(plain)[0] is plain  # a page without aggregates is not copied
    mixed = [plain[0], aggregate([("a", b"x", None), ("b", b"y", None)], "5"), plain[1]]
    out, _ = deaggregate(mixed)
    assert [(u["SequenceNumber"], u.get("SubSequenceNumber"), u["Data"]) for u in out] == [
        ("1", None, b"plain-1"),
        ("5", 0, b"x"),
        ("5", 1, b"y"),
        ("2", None, b"plain-2"),
    ]


def corrupted() -> dict[str, bytes]:
    good: bytes = aggregate([("a", b"x" * 50, None), ("b", b"y" * 50, None)])["Data"]
    body = good[len(MAGIC) : -16]
    truncated = body[: len(body) // 2]
    return {
        "wrong MD5": good[:-1] + bytes([good[-1] ^ 1]),
        "truncated protobuf": MAGIC + truncated + hashlib.md5(truncated).digest(),
        "the magic on plain bytes": MAGIC + b"just some bytes that happen to start like an aggregate",
        "only the magic": MAGIC,
        "an empty aggregate": MAGIC + hashlib.md5(b"").digest(),
        "a key index out of the table": MAGIC + (bad := b"\x1a\x05\x08\x03\x1a\x01x") + hashlib.md5(bad).digest(),
    }


def test_anything_that_is_not_a_valid_aggregate_is_delivered_as_it_is_and_counted() -> None:
    for why, data in corrupted().items():
        record = kinesis_record(data)
        out, malformed = deaggregate([record, kinesis_record(b"after", "4901")])
        assert out == [record, kinesis_record(b"after", "4901")], why
        assert malformed == 1, why


def test_aws_kinesis_agg_leaves_sys_path_as_it_was() -> None:
    assert not any(path.endswith("aws_kinesis_agg") for path in sys.path)
