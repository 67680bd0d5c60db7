"""The cut of a bounded read (Trigger.AvailableNow, a batch read): records that arrived before a time. Pure."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from ..reading.reader import ApiRecord

__all__ = ["arrival_ms", "before_cut"]


def arrival_ms(record: Mapping[str, Any]) -> int:
    """A record's ApproximateArrivalTimestamp in epoch milliseconds."""
    arrival = record["ApproximateArrivalTimestamp"]
    seconds = arrival.timestamp() if isinstance(arrival, dt.datetime) else float(arrival)
    return int(seconds * 1000)


def before_cut(records: Sequence[ApiRecord], until: int | None) -> tuple[Sequence[ApiRecord], bool]:
    """The records that arrived before ``until`` (epoch ms; None: all), and whether the cut is among them.

    Kinesis stamps arrival times in shard order, so the first record at or after the cut ends the read.
    """
    if until is not None:
        for i, record in enumerate(records):
            if arrival_ms(record) >= until:
                return records[:i], True
    return records, False
