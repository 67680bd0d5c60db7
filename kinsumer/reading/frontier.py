"""The consumable frontier of a stream: the shards that may be read now. Pure, no I/O.

A shard is consumable when it is not finished and each of its parents (``ParentShardId``
and ``AdjacentParentShardId``) is finished or no longer listed (trimmed past retention).
Reading children only after their parents keeps per-partition-key order across splits
and merges.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from ..aws.kinesis import ShardInfo

__all__ = ["consumable_frontier"]


def consumable_frontier(shards: Iterable[ShardInfo], finished: Collection[str]) -> list[str]:
    """Sorted IDs of the shards that are not finished and whose parents are all done."""
    shards = list(shards)
    listed = {s.shard_id for s in shards}
    frontier = [
        s.shard_id
        for s in shards
        if s.shard_id not in finished and all(p in finished or p not in listed for p in s.parents)
    ]
    return sorted(frontier)
