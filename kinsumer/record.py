"""A record as kinsumer hands it over."""

from __future__ import annotations

import datetime as dt

import attrs

__all__ = ["Record"]


@attrs.frozen
class Record:
    """One Kinesis record, with where and when it was read."""

    #: The payload.
    data: bytes
    partition_key: str
    sequence_number: str
    shard_id: str
    #: When Kinesis accepted the record (server clock).
    approximate_arrival_timestamp: dt.datetime
    #: When this client fetched it (local clock, UTC).
    retrieved_at: dt.datetime

    @classmethod
    def from_api(cls, record: dict[str, object], shard_id: str, retrieved_at: dt.datetime) -> Record:
        """Build from one element of GetRecords' ``Records``."""
        return cls(
            record["Data"],  # type: ignore[arg-type]
            record["PartitionKey"],  # type: ignore[arg-type]
            record["SequenceNumber"],  # type: ignore[arg-type]
            shard_id,
            record["ApproximateArrivalTimestamp"],  # type: ignore[arg-type]
            retrieved_at,
        )
