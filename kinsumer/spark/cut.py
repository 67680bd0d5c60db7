"""The cut of a bounded read (Trigger.AvailableNow, a batch read): records that arrived before a time. Pure.

Kinesis stamps arrival times in shard order, so the first record at or after the cut ends the
read (:func:`~.rows.page_rows` finds it on a page's arrival column).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

__all__ = ["arrival_micros", "arrival_ms"]

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


def arrival_micros(arrival: Any) -> int:
    """An ``ApproximateArrivalTimestamp`` in epoch microseconds, exactly.

    A datetime (botocore's type; a naive one counts as UTC, as Arrow takes it), or seconds as a
    number, rounded to the microsecond as ``datetime.fromtimestamp`` rounds them.
    """
    if not isinstance(arrival, dt.datetime):
        arrival = dt.datetime.fromtimestamp(float(arrival), dt.UTC)
    elif arrival.tzinfo is None:
        arrival = arrival.replace(tzinfo=dt.UTC)
    return int((arrival - _EPOCH) // _MICROSECOND)


def arrival_ms(record: Mapping[str, Any]) -> int:
    """A record's ApproximateArrivalTimestamp in epoch milliseconds (whole ones: exact, never a float's rounding)."""
    return arrival_micros(record["ApproximateArrivalTimestamp"]) // 1000
