"""What the simulated clients want and what they hold, shard by shard: the assignment's view (:class:`Tracking`)
and the leases' (:class:`Ownership`), kept as the cluster's events change them (:mod:`.cluster`)."""

from __future__ import annotations

from collections.abc import Callable

import attrs

__all__ = ["Ownership", "Tracking"]


@attrs.define
class Tracking:
    """What the live clients want, shard by shard, and the worst of it since :meth:`reset`."""

    shards: frozenset[str]
    wanting: dict[str, int] = attrs.Factory(dict)  # live clients that want each shard
    doubled: set[str] = attrs.Factory(set)  # wanted by two live clients or more, now
    covered: int = 0  # shards wanted by at least one
    most_doubled: int = 0  # since the reset: the most shards wanted twice at one instant
    ever_doubled: set[str] = attrs.Factory(set)  # since the reset: every shard wanted twice at some instant
    most_uncovered: int = 0

    def change(self, old: frozenset[str], new: frozenset[str]) -> None:
        for shard in new - old:
            count = self.wanting.get(shard, 0) + 1
            self.wanting[shard] = count
            self.covered += count == 1 and shard in self.shards
            if count == 2:
                self.doubled.add(shard)
                self.ever_doubled.add(shard)
        for shard in old - new:
            count = self.wanting[shard] - 1
            self.wanting[shard] = count
            self.covered -= count == 0 and shard in self.shards
            if count == 1:
                self.doubled.discard(shard)
        self.most_doubled = max(self.most_doubled, len(self.doubled))
        self.most_uncovered = max(self.most_uncovered, len(self.shards) - self.covered)

    def reshard(self, shards: frozenset[str]) -> None:
        """The consumable shards are now ``shards`` (a split or a merge)."""
        self.shards = shards
        self.covered = sum(1 for shard in shards if self.wanting.get(shard, 0) > 0)

    def reset(self) -> None:
        self.most_doubled, self.ever_doubled = len(self.doubled), set(self.doubled)
        self.most_uncovered = len(self.shards) - self.covered


@attrs.define
class Ownership:
    """Which clients hold each shard's lease (captured, neither released nor lost), as their events leave it:
    a client's leases change only while its own events run. A crashed client holds nothing (its process
    is gone; its rows wait to age). A paused client still holds its leases, stale ones once its heartbeat
    no longer vouches for them (it delivers nothing of them until a write confirms them, and that write fails
    once another client took the row). What the leases must never allow: a client takes a shard whose lease
    another client holds and may still deliver from (``fresh``: the other's lease is fresh at that moment)."""

    fresh: Callable[[str, str], bool] = lambda client_id, shard: True  # (client, shard): its lease is fresh now

    held: dict[str, frozenset[str]] = attrs.Factory(dict)  # client -> the shards it holds
    holders: dict[str, set[str]] = attrs.Factory(dict)  # shard -> the clients that hold it
    doubled: set[str] = attrs.Factory(set)  # every shard ever held by two clients at once
    captures: int = 0  # leases taken, in all
    changes: int = 0

    def change(self, client_id: str, owned: frozenset[str]) -> None:
        old = self.held.get(client_id, frozenset())
        if owned == old:
            return
        self.held[client_id] = owned
        self.changes += 1
        for shard in owned - old:
            holders = self.holders.setdefault(shard, set())
            holders.add(client_id)
            self.captures += 1
            if any(other != client_id and self.fresh(other, shard) for other in holders):
                self.doubled.add(shard)
        for shard in old - owned:
            self.holders[shard].discard(client_id)

    def holder(self, shard: str) -> str | None:
        """The one client that holds ``shard`` (None if none, or more than one, does)."""
        holders = self.holders.get(shard, ())
        return next(iter(holders)) if len(holders) == 1 else None
