"""The Kinesis calls kinsumer makes: listing shards, iterators, stream checks.

Plain functions taking a boto3 Kinesis client. Shards are listed with paginated
ListShards, never DescribeStream (whose limit is 10 calls/s per account).
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import attrs
import botocore.exceptions

from .errors import StreamNotFound
from .frontier import ShardInfo
from .retry import error_code

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient

__all__ = ["StartPosition", "ensure_stream_active", "get_shard_iterator", "list_shards", "stream_exists"]


@attrs.frozen
class StartPosition:
    """Where to start reading a shard."""

    kind: str  # AFTER_SEQUENCE_NUMBER, TRIM_HORIZON, LATEST or AT_TIMESTAMP
    sequence_number: str | None = None
    timestamp: dt.datetime | None = None

    @classmethod
    def after(cls, sequence_number: str) -> StartPosition:
        return cls("AFTER_SEQUENCE_NUMBER", sequence_number=sequence_number)

    @classmethod
    def at_timestamp(cls, timestamp: dt.datetime) -> StartPosition:
        return cls("AT_TIMESTAMP", timestamp=timestamp)

    @classmethod
    def trim_horizon(cls) -> StartPosition:
        return cls("TRIM_HORIZON")

    @classmethod
    def latest(cls) -> StartPosition:
        return cls("LATEST")


def _not_found(exc: botocore.exceptions.ClientError) -> bool:
    return error_code(exc) == "ResourceNotFoundException"


def list_shards(kinesis: KinesisClient, stream_name: str) -> list[ShardInfo]:
    """Every shard of the stream within retention, open or closed."""
    shards: list[ShardInfo] = []
    params: dict[str, Any] = {"StreamName": stream_name}
    try:
        while True:
            page = kinesis.list_shards(**params)
            shards.extend(ShardInfo.from_api(dict(s)) for s in page.get("Shards", []))
            token = page.get("NextToken")
            if not token:
                return shards
            params = {"NextToken": token}
    except botocore.exceptions.ClientError as exc:
        if _not_found(exc):
            raise StreamNotFound(stream_name) from exc
        raise


def stream_exists(kinesis: KinesisClient, stream_name: str) -> bool:
    try:
        kinesis.describe_stream_summary(StreamName=stream_name)
    except botocore.exceptions.ClientError as exc:
        if _not_found(exc):
            return False
        raise
    return True


def ensure_stream_active(kinesis: KinesisClient, stream_name: str) -> None:
    """Raise :class:`StreamNotFound` unless the stream exists and is readable."""
    try:
        summary = kinesis.describe_stream_summary(StreamName=stream_name)["StreamDescriptionSummary"]
    except botocore.exceptions.ClientError as exc:
        if _not_found(exc):
            raise StreamNotFound(stream_name) from exc
        raise
    if summary.get("StreamStatus") not in ("ACTIVE", "UPDATING"):
        raise StreamNotFound(stream_name)


def get_shard_iterator(kinesis: KinesisClient, stream_name: str, shard_id: str, position: StartPosition) -> str:
    params: dict[str, Any] = {"StreamName": stream_name, "ShardId": shard_id, "ShardIteratorType": position.kind}
    if position.sequence_number is not None:
        params["StartingSequenceNumber"] = position.sequence_number
    if position.timestamp is not None:
        params["Timestamp"] = position.timestamp
    return kinesis.get_shard_iterator(**params)["ShardIterator"]
