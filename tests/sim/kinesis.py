"""SimKinesis: the Kinesis calls of the coordination (DescribeStreamSummary, ListShards) over S shards.

What kinsumer's coordination calls on Kinesis outside the shard readers: ``describe_stream_summary`` (run()'s
:func:`~kinsumer.aws.kinesis.ensure_stream_active`: the stream's identity) and paginated ``list_shards``
(:func:`~kinsumer.coordination.shard_cache.refresh_shard_cache`: the leader's listing, and any client's when
the cache is empty). Kept of Kinesis: pages of at most 1,000 shards, a ``NextToken`` that is sent alone, the
shards' hash key ranges, a split that closes its parent (``EndingSequenceNumber``) and adds two children, and
ListShards' limit per stream (SPEC §14: 100 calls a second; over it, ``LimitExceededException``). Every call
is counted, by operation and by second of the injected clock. Reading is :mod:`.reader`'s (no records).
"""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import botocore.exceptions

__all__ = ["SimKinesis"]

_PAGE = 1000
_HASH_SPACE = 2**128


class SimKinesis:
    """One stream of ``shards`` open shards that split the hash key space evenly."""

    def __init__(
        self, clock: Callable[[], float], shards: int, *, stream: str = "stream", list_limit: float = 100.0
    ) -> None:
        self._clock = clock
        self.stream = stream
        self.list_limit = list_limit
        self.created = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
        width = _HASH_SPACE // shards
        self._shards: dict[str, dict[str, Any]] = {}
        for i in range(shards):
            end = _HASH_SPACE - 1 if i == shards - 1 else (i + 1) * width - 1
            self._add(f"shardId-{i:012d}", i * width, end)
        self.calls: Counter[str] = Counter()
        self.per_second: Counter[int] = Counter()  # ListShards calls in each second
        self.throttled = 0

    def _add(self, shard_id: str, start: int, end: int, parent: str | None = None) -> None:
        shard: dict[str, Any] = {
            "ShardId": shard_id,
            "HashKeyRange": {"StartingHashKey": str(start), "EndingHashKey": str(end)},
            "SequenceNumberRange": {"StartingSequenceNumber": str(len(self._shards) * 10**20)},
        }
        if parent:
            shard["ParentShardId"] = parent
        self._shards[shard_id] = shard

    def split(self, shard_id: str) -> tuple[str, str]:
        """Close ``shard_id`` and add its two children (each half of its hash keys)."""
        parent = self._shards[shard_id]
        parent["SequenceNumberRange"]["EndingSequenceNumber"] = str(len(self._shards) * 10**20)
        start, end = (int(parent["HashKeyRange"][k]) for k in ("StartingHashKey", "EndingHashKey"))
        middle = (start + end) // 2
        children = (f"shardId-{len(self._shards):012d}", f"shardId-{len(self._shards) + 1:012d}")
        self._add(children[0], start, middle, shard_id)
        self._add(children[1], middle + 1, end, shard_id)
        return children

    def shard_ids(self) -> list[str]:
        """Every shard, open or closed, in the order they were made."""
        return list(self._shards)

    def children(self, shard_id: str) -> tuple[str, ...] | None:
        """The shards that continue ``shard_id`` once it is closed (None while it is open)."""
        if "EndingSequenceNumber" not in self._shards[shard_id]["SequenceNumberRange"]:
            return None
        return tuple(s["ShardId"] for s in self._shards.values() if s.get("ParentShardId") == shard_id)

    def describe_stream_summary(self, **params: Any) -> dict[str, Any]:
        self._count("DescribeStreamSummary", params)
        open_shards = sum("EndingSequenceNumber" not in s["SequenceNumberRange"] for s in self._shards.values())
        return {
            "StreamDescriptionSummary": {
                "StreamName": self.stream, "StreamARN": f"arn:aws:kinesis:us-east-1:123456789012:stream/{self.stream}",
                "StreamStatus": "ACTIVE", "RetentionPeriodHours": 24, "StreamCreationTimestamp": self.created,
                "OpenShardCount": open_shards, "ConsumerCount": 0, "EnhancedMonitoring": [{"ShardLevelMetrics": []}],
            }
        }  # fmt: skip

    def list_shards(self, **params: Any) -> dict[str, Any]:
        self._count("ListShards", params)
        second = math.floor(self._clock())
        if self.per_second[second] >= self.list_limit:
            self.throttled += 1
            raise _error("LimitExceededException", "Rate exceeded for stream", "ListShards")
        self.per_second[second] += 1
        if "NextToken" in params:
            if "StreamName" in params:
                raise _error("InvalidArgumentException", "NextToken and StreamName cannot be provided together",
                             "ListShards")  # fmt: skip
            start = int(params["NextToken"])
        else:
            start = 0
        page_size = min(int(params.get("MaxResults", _PAGE)), _PAGE)
        shards = list(self._shards.values())
        page = shards[start : start + page_size]
        response: dict[str, Any] = {"Shards": [dict(s) for s in page]}
        if start + page_size < len(shards):
            response["NextToken"] = str(start + page_size)
        return response

    def _count(self, operation: str, params: dict[str, Any]) -> None:
        if params.get("StreamName", self.stream) != self.stream:
            raise _error("ResourceNotFoundException", f"Stream {params['StreamName']} not found", operation)
        self.calls[operation] += 1

    def peak_list_rate(self) -> int:
        """The most ListShards calls answered in one second."""
        return max(self.per_second.values(), default=0)


def _error(code: str, message: str, operation: str) -> botocore.exceptions.ClientError:
    return botocore.exceptions.ClientError({"Error": {"Code": code, "Message": message}}, operation)
