"""The consumable frontier of a stream: the shards that may be read now. Pure, no I/O.

A shard is consumable when it is not finished and each of its parents (``ParentShardId``
and ``AdjacentParentShardId``) is finished or no longer listed (trimmed past retention).
Reading children only after their parents keeps per-partition-key order across splits
and merges.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import attrs

__all__ = ["ShardInfo", "consumable_frontier"]


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
