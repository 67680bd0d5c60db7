"""Records made a page at a time are exactly the records Record.from_api makes. Pure."""

from __future__ import annotations

import datetime as dt

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinsumer.record import Record, records_from_api

api_records = st.lists(
    st.fixed_dictionaries(
        {
            "Data": st.binary(max_size=20),
            "PartitionKey": st.text(min_size=1, max_size=8),
            "SequenceNumber": st.integers(min_value=0, max_value=10**56).map(str),
            "ApproximateArrivalTimestamp": st.datetimes(timezones=st.just(dt.UTC)),
        },
        optional={"SubSequenceNumber": st.integers(min_value=0, max_value=999), "ExplicitHashKey": st.just("12")},
    ),
    max_size=20,
)


@given(api_records)
def test_a_page_of_records_equals_records_made_one_by_one(raws: list[dict[str, object]]) -> None:
    when = dt.datetime(2026, 11, 23, tzinfo=dt.UTC)
    made = records_from_api(raws, "shardId-000000000001", when, "clicks")
    expected = [Record.from_api(raw, "shardId-000000000001", when, "clicks") for raw in raws]
    assert all(r.stream == "clicks" for r in made)
    assert made == expected
    assert [hash(r) for r in made] == [hash(r) for r in expected]
    assert [attrs.asdict(r) for r in made] == [attrs.asdict(r) for r in expected]


def test_records_made_a_page_at_a_time_stay_frozen() -> None:
    when = dt.datetime(2026, 11, 23, tzinfo=dt.UTC)
    raw = {"Data": b"x", "PartitionKey": "k", "SequenceNumber": "1", "ApproximateArrivalTimestamp": when}
    (record,) = records_from_api([raw], "shardId-000000000001", when)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        record.data = b"y"  # type: ignore[misc]
