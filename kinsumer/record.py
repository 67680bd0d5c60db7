"""A record as kinsumer hands it over."""

from __future__ import annotations

import datetime as dt

import attrs

__all__ = ["Record"]


@attrs.frozen
class Record:
    """One record, with where and when it was read.

    A record written by the Kinesis Producer Library is one *user record* of an aggregate: it
    shares its Kinesis record's ``sequence_number`` and has its index in the aggregate as
    ``sub_sequence_number`` (None for a record that was not aggregated).
    """

    #: The payload.
    data: bytes
    partition_key: str
    sequence_number: str
    shard_id: str
    #: When Kinesis accepted the record (server clock).
    approximate_arrival_timestamp: dt.datetime
    #: When this client fetched it (local clock, UTC).
    retrieved_at: dt.datetime
    #: The user record's index in its KPL aggregate; None for a record that was not aggregated.
    sub_sequence_number: int | None = None
    #: The explicit hash key the producer gave the user record, if the aggregate carries one.
    explicit_hash_key: str | None = None

    @classmethod
    def from_api(cls, record: dict[str, object], shard_id: str, retrieved_at: dt.datetime) -> Record:
        """Build from one element of GetRecords' ``Records`` (or a user record of an aggregate)."""
        return cls(
            record["Data"],  # type: ignore[arg-type]
            record["PartitionKey"],  # type: ignore[arg-type]
            record["SequenceNumber"],  # type: ignore[arg-type]
            shard_id,
            record["ApproximateArrivalTimestamp"],  # type: ignore[arg-type]
            retrieved_at,
            record.get("SubSequenceNumber"),  # type: ignore[arg-type]
            record.get("ExplicitHashKey"),  # type: ignore[arg-type]
        )
