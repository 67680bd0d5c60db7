"""The Kinesis calls of coordination and the command line: listing shards, stream checks.

Plain functions taking a boto3 Kinesis client. Shards are listed with paginated
ListShards, never DescribeStream (whose limit is 10 calls/s per account). Reading a shard
(GetShardIterator, GetRecords) is :mod:`kinsumer.reading`'s.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs
import botocore.exceptions

from ..errors import StreamNotFound
from .error_codes import is_not_found
from .stream_ref import stream_params

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient

__all__ = [
    "DEFAULT_MAX_RECORD_BYTES", "LARGEST_RECORD_BYTES", "ShardInfo", "active_stream_summary", "created_at",
    "described_max_record_bytes", "ensure_stream_active", "list_shards", "max_record_bytes", "stream_exists",
    "stream_identity",
]  # fmt: skip


@attrs.frozen
class ShardInfo:
    """What ListShards says of one shard."""

    shard_id: str
    parent_shard_id: str | None = None
    adjacent_parent_shard_id: str | None = None
    closed: bool = False
    #: The shard's hash key range (``StartingHashKey``, ``EndingHashKey``), when the listing gave it.
    hash_range: tuple[int, int] | None = None

    @property
    def parents(self) -> tuple[str, ...]:
        return tuple(p for p in (self.parent_shard_id, self.adjacent_parent_shard_id) if p)

    @classmethod
    def from_api(cls, shard: dict[str, object]) -> ShardInfo:
        """Build from one element of ListShards' ``Shards``."""
        seq_range = shard.get("SequenceNumberRange")
        closed = isinstance(seq_range, dict) and seq_range.get("EndingSequenceNumber") is not None
        parent = shard.get("ParentShardId")
        adjacent = shard.get("AdjacentParentShardId")
        hash_keys = shard.get("HashKeyRange")
        hash_range = None
        if isinstance(hash_keys, dict) and "StartingHashKey" in hash_keys and "EndingHashKey" in hash_keys:
            hash_range = (int(hash_keys["StartingHashKey"]), int(hash_keys["EndingHashKey"]))
        return cls(
            shard_id=str(shard["ShardId"]),
            parent_shard_id=str(parent) if parent else None,
            adjacent_parent_shard_id=str(adjacent) if adjacent else None,
            closed=closed,
            hash_range=hash_range,
        )


def list_shards(kinesis: KinesisClient, stream_name: str) -> list[ShardInfo]:
    """Every shard of the stream (a name or an ARN) within retention, open or closed."""
    shards: list[ShardInfo] = []
    params: dict[str, Any] = stream_params(stream_name)
    try:
        while True:
            page = kinesis.list_shards(**params)
            shards.extend(ShardInfo.from_api(dict(s)) for s in page.get("Shards", []))
            token = page.get("NextToken")
            if not token:
                return shards
            params = {"NextToken": token}
    except botocore.exceptions.ClientError as exc:
        if is_not_found(exc):
            raise StreamNotFound(stream_name) from exc
        raise


def stream_exists(kinesis: KinesisClient, stream_name: str) -> bool:
    try:
        kinesis.describe_stream_summary(**stream_params(stream_name))
    except botocore.exceptions.ClientError as exc:
        if is_not_found(exc):
            return False
        raise
    return True


def ensure_stream_active(kinesis: KinesisClient, stream_name: str) -> str:
    """Raise :class:`StreamNotFound` unless the stream exists and is readable; else its identity.

    The identity (``ARN@creation time in epoch ms``) tells incarnations of a stream apart: a
    stream deleted and created again under its old name has the same ARN, not the same identity.
    """
    return stream_identity(active_stream_summary(kinesis, stream_name), stream_name)


def active_stream_summary(kinesis: KinesisClient, stream_name: str) -> Mapping[str, Any]:
    """The stream's DescribeStreamSummary; :class:`StreamNotFound` unless it exists and is readable."""
    try:
        summary = kinesis.describe_stream_summary(**stream_params(stream_name))["StreamDescriptionSummary"]
    except botocore.exceptions.ClientError as exc:
        if is_not_found(exc):
            raise StreamNotFound(stream_name) from exc
        raise
    if summary.get("StreamStatus") not in ("ACTIVE", "UPDATING"):
        raise StreamNotFound(stream_name)
    return summary


#: A record at most (data and partition key) on a stream that did not raise its limit: 1 MiB.
DEFAULT_MAX_RECORD_BYTES = 1024 * 1024
#: The highest limit a stream can have (UpdateMaxRecordSize): 10 MiB.
LARGEST_RECORD_BYTES = 10 * 1024 * 1024


def max_record_bytes(summary: Mapping[str, Any]) -> int:
    """The largest record (data and partition key) the stream of ``summary`` (its DescribeStreamSummary) takes:
    its ``MaxRecordSizeInKiB``, else 1 MiB (a stream that never raised it; a server that does not say)."""
    kib = summary.get("MaxRecordSizeInKiB")
    return DEFAULT_MAX_RECORD_BYTES if not kib else min(int(kib) * 1024, LARGEST_RECORD_BYTES)


def described_max_record_bytes(kinesis: KinesisClient, stream: str) -> int:
    """The largest record the stream (a name or an ARN) takes, from one DescribeStreamSummary (see
    :func:`max_record_bytes`). The writers call it once, when the first record over 1 MiB comes."""
    return max_record_bytes(kinesis.describe_stream_summary(**stream_params(stream))["StreamDescriptionSummary"])


def stream_identity(summary: Mapping[str, Any], stream_name: str) -> str:
    """The identity in a stream's summary (see :func:`ensure_stream_active`)."""
    created = summary.get("StreamCreationTimestamp")
    created_ms = int(created.timestamp() * 1000) if created is not None else 0
    return f"{summary.get('StreamARN', stream_name)}@{created_ms}"


def created_at(identity: str | None) -> str:
    """The creation time in a stream identity (``ARN@epoch ms``), readable."""
    try:
        millis = int((identity or "").rsplit("@", 1)[1])
    except (IndexError, ValueError):
        return "at an unknown time"
    return dt.datetime.fromtimestamp(millis / 1000, dt.UTC).isoformat(timespec="seconds")
