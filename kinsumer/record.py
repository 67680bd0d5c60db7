"""A record as kinsumer hands it over."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping

import attrs

__all__ = ["Record", "records_from_api"]


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
    #: The name of the stream the record was read from.
    stream: str = ""

    @classmethod
    def from_api(cls, record: dict[str, object], shard_id: str, retrieved_at: dt.datetime, stream: str = "") -> Record:
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
            stream,
        )


_new = object.__new__
(_set_data, _set_key, _set_seq, _set_shard, _set_arrival, _set_retrieved, _set_sub, _set_hash, _set_stream) = (
    getattr(Record, field.name).__set__ for field in attrs.fields(Record)
)  # the slots' setters, in field order


def records_from_api(
    raws: Iterable[Mapping[str, object]], shard_id: str, retrieved_at: dt.datetime, stream: str = ""
) -> list[Record]:
    """:meth:`Record.from_api` for a page of records: the same objects, made at about half the cost.

    A reader makes one Record per record it reads; attrs' frozen ``__init__`` sets each field
    through ``object.__setattr__``. Record has no validators, converters or post-init, so
    setting its slots directly makes exactly what ``__init__`` would.
    """
    out: list[Record] = []
    append = out.append
    for raw in raws:
        record = _new(Record)
        _set_data(record, raw["Data"])
        _set_key(record, raw["PartitionKey"])
        _set_seq(record, raw["SequenceNumber"])
        _set_shard(record, shard_id)
        _set_arrival(record, raw["ApproximateArrivalTimestamp"])
        _set_retrieved(record, retrieved_at)
        _set_sub(record, raw.get("SubSequenceNumber"))
        _set_hash(record, raw.get("ExplicitHashKey"))
        _set_stream(record, stream)
        append(record)
    return out
