"""Which shards a client owns. Pure, no I/O.

Two assignments, chosen with ``Config(assignment=...)``:

- ``"modulo"`` (the default, the Go library's): every client computes it alone from the
  sorted live clients and shards: the shards at positions ``i % client_count == my_index``.
  A join or a leave can move almost every shard.
- ``"balanced"``: the leader computes it from the live clients, the shards *and the current
  assignment*, and publishes it with the shard cache; every client reads it there. Each
  shard stays with its owner while that owner is live and within its quota (``shards //
  clients``, one more for ``shards % clients`` of them), so a leave moves only the leaver's
  shards and a join only what the newcomer needs, and the split stays balanced (max - min <= 1).
  A stateless assignment cannot bound movement (see SPEC §4): this one needs the current owners.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..errors import KinsumerError

__all__ = ["assigned_shards", "balanced_assignment", "client_index"]

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


def balanced_assignment(
    shard_ids: Sequence[str], client_ids: Sequence[str], current: Mapping[str, str]
) -> dict[str, str]:
    """Shard -> client: ``current`` kept wherever balance allows, the rest spread to balance it.

    ``current`` maps shards to their owners as last published (owners that left, and shards
    no longer in ``shard_ids``, are ignored). The result depends only on the arguments.
    """
    clients = sorted(set(client_ids))
    shards = sorted(set(shard_ids))
    if not clients:
        return {}
    kept: dict[str, list[str]] = {c: [] for c in clients}
    for shard in shards:
        owner = current.get(shard)
        if owner in kept:
            kept[owner].append(shard)
    base, extra = divmod(len(shards), len(clients))
    # the clients that keep the most get the quotas of one more: fewer shards move
    by_kept = sorted(clients, key=lambda c: (-len(kept[c]), c))
    quota = {c: base + (1 if i < extra else 0) for i, c in enumerate(by_kept)}
    result = {shard: client for client in clients for shard in kept[client][: quota[client]]}
    free = iter([s for s in shards if s not in result])
    for client in clients:
        for _ in range(quota[client] - min(len(kept[client]), quota[client])):
            result[next(free)] = client
    return dict(sorted(result.items()))
