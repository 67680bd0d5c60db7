"""The rows the source yields: the schema, and records as Arrow batches.

An executor turns each page of records into an Arrow batch as soon as it has it (in the
shard's reading thread, while the other shards wait for Kinesis), so that little is left to
do once a read ends. Arrival times become integer microseconds, computed once per run of
records that share their arrival time (the GetRecords parser hands such a run one datetime),
and the AvailableNow cut is found on that column.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..reading.reader import ApiRecord
from .cut import arrival_micros

__all__ = ["SCHEMA", "page_rows"]

SCHEMA = (
    "data binary, partition_key string, sequence_number string, shard_id string, "
    "approximate_arrival_timestamp timestamp, stream string, sub_sequence_number long, explicit_hash_key string"
)
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_ARROW_SCHEMA = pa.schema(  # SCHEMA, as the Arrow batches the readers yield
    [
        ("data", pa.binary()),
        ("partition_key", pa.string()),
        ("sequence_number", pa.string()),
        ("shard_id", pa.string()),
        ("approximate_arrival_timestamp", _TIMESTAMP),
        ("stream", pa.string()),
        ("sub_sequence_number", pa.int64()),
        ("explicit_hash_key", pa.string()),
    ]
)


def page_rows(records: Sequence[ApiRecord], stream: str, shard: str, until: int | None = None) -> tuple[Any, bool]:
    """Records of one shard as one Arrow batch, up to the first that arrived at or after ``until``.

    ``until``: the cut, epoch ms (None: no cut). Also whether the cut is among the records: Kinesis
    stamps arrival times in shard order, so that record ends the read.
    """
    count = len(records)
    stamps = []
    last: object = None
    micros = 0
    for record in records:  # a run of records that arrived together shares one datetime: one conversion
        arrival = record["ApproximateArrivalTimestamp"]
        if arrival is not last:
            last, micros = arrival, arrival_micros(arrival)
        stamps.append(micros)
    arrivals = pa.array(stamps, _TIMESTAMP)
    cut = False
    if until is not None and count:
        first = pc.index(pc.greater_equal(pa.array(stamps, pa.int64()), until * 1000), True).as_py()
        if first >= 0:
            records, count, cut = records[:first], first, True
            arrivals = arrivals.slice(0, first)
    subs = [r.get("SubSequenceNumber") for r in records]
    if subs.count(None) == count:  # no user record of a KPL aggregate (those alone carry explicit hash keys)
        sub_numbers, hash_keys = pa.nulls(count, pa.int64()), pa.nulls(count, pa.string())
    else:
        sub_numbers = pa.array(subs, pa.int64())
        hash_keys = pa.array([r.get("ExplicitHashKey") for r in records], pa.string())
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([r["Data"] for r in records], pa.binary()),
            pa.array([r["PartitionKey"] for r in records], pa.string()),
            pa.array([r["SequenceNumber"] for r in records], pa.string()),
            pa.repeat(pa.scalar(shard, pa.string()), count),
            arrivals,
            pa.repeat(pa.scalar(stream, pa.string()), count),
            sub_numbers,
            hash_keys,
        ],
        schema=_ARROW_SCHEMA,
    )
    return batch, cut
