"""The rows the source yields: the schema, and records as Arrow batches."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from ..reading.reader import ApiRecord

__all__ = ["SCHEMA", "arrow_batch"]

SCHEMA = (
    "data binary, partition_key string, sequence_number string, shard_id string, "
    "approximate_arrival_timestamp timestamp, stream string, sub_sequence_number long, explicit_hash_key string"
)
_ARROW_SCHEMA = pa.schema(  # SCHEMA, as the Arrow batches the readers yield
    [
        ("data", pa.binary()),
        ("partition_key", pa.string()),
        ("sequence_number", pa.string()),
        ("shard_id", pa.string()),
        ("approximate_arrival_timestamp", pa.timestamp("us", tz="UTC")),
        ("stream", pa.string()),
        ("sub_sequence_number", pa.int64()),
        ("explicit_hash_key", pa.string()),
    ]
)


def arrow_batch(records: Sequence[ApiRecord], stream: str, shard: str) -> Any:
    """Records of one shard as one Arrow batch: far cheaper than a Python tuple per row."""
    count = len(records)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r["Data"] for r in records], pa.binary()),
            pa.array([r["PartitionKey"] for r in records], pa.string()),
            pa.array([r["SequenceNumber"] for r in records], pa.string()),
            pa.array([shard] * count, pa.string()),
            pa.array([r["ApproximateArrivalTimestamp"] for r in records], pa.timestamp("us", tz="UTC")),
            pa.array([stream] * count, pa.string()),
            pa.array([r.get("SubSequenceNumber") for r in records], pa.int64()),
            pa.array([r.get("ExplicitHashKey") for r in records], pa.string()),
        ],
        schema=_ARROW_SCHEMA,
    )
