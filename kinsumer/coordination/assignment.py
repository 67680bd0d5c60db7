"""Which shards a client owns: position modulo client count. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import KinsumerError

__all__ = ["assigned_shards", "client_index"]


def client_index(client_ids: Sequence[str], me: str) -> tuple[int, int]:
    """Return ``(my_index, client_count)`` in the sorted live-client list.

    ``me`` counts as live even if the scan missed it (it heartbeats before it reads), so
    a client always has a place.
    """
    ids = sorted(set(client_ids) | {me})
    return ids.index(me), len(ids)


def assigned_shards(shard_ids: Sequence[str], my_index: int, client_count: int) -> list[str]:
    """The shards at positions ``i`` of the sorted shard list with ``i % client_count == my_index``."""
    if client_count < 1 or not 0 <= my_index < client_count:
        raise KinsumerError(f"index {my_index} is not in a list of {client_count} clients")
    return [shard for i, shard in enumerate(sorted(shard_ids)) if i % client_count == my_index]
