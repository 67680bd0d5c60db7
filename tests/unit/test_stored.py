"""Items as stored, read the same whichever library wrote them: NULL attributes, LastUpdate's unit. Pure."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from kinsumer.aws.stored import NANOSECONDS_FROM, epoch_ms, is_nanoseconds, present

#: Epoch ms from 1970-01-12 (below it a time in ns would read as ms) to the year 9999.
TIMES_MS = st.integers(min_value=NANOSECONDS_FROM // 1_000_000, max_value=253_402_300_799_999)


@given(TIMES_MS, st.integers(min_value=0, max_value=999_999))
def test_a_time_reads_the_same_in_milliseconds_or_nanoseconds(ms: int, sub_ms: int) -> None:
    assert not is_nanoseconds(ms) and epoch_ms(ms) == ms
    ns = ms * 1_000_000 + sub_ms
    assert is_nanoseconds(ns) and epoch_ms(ns) == ms


def test_the_rule_holds_for_the_times_either_library_writes() -> None:
    now = dt.datetime(2026, 11, 28, tzinfo=dt.UTC)
    ms, ns = int(now.timestamp() * 1000), int(now.timestamp() * 1000) * 1_000_000
    assert ms < NANOSECONDS_FROM <= ns
    assert epoch_ms(0) == 0  # a row without LastUpdate reads as written at the epoch


def test_null_attributes_are_absent() -> None:
    go_row = {
        "Shard": {"S": "shardId-000000000000"},
        "SequenceNumber": {"NULL": True},
        "Finished": {"NULL": True},
        "FinishedRFC": {"NULL": True},
        "OwnerID": {"S": "3b2c"},
        "LastUpdate": {"N": "1795900000000000000"},
    }
    assert present(go_row) == {
        "Shard": {"S": "shardId-000000000000"},
        "OwnerID": {"S": "3b2c"},
        "LastUpdate": {"N": "1795900000000000000"},
    }
