"""Eventually consistent reads: each item's recent versions, with the time of the clock they were written.

An eventually consistent read at ``now`` returns the *settled* version (the latest written at or before
``now - staleness``; no item if none was) or, by a seeded random choice, one written since: the settled
one with probability ``stale_probability``, else one of the newer versions, each as likely. A strongly
consistent read, and every read when ``staleness`` is 0, returns the latest. A version older than the
settled one can never be read again and is dropped.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Iterable

from .values import Item

__all__ = ["History"]

_LONG_AGO = float("-inf")


class History:
    def __init__(self, staleness: float, stale_probability: float, rng: random.Random) -> None:
        if staleness < 0 or not 0 <= stale_probability <= 1:
            raise ValueError("staleness must be >= 0 and stale_probability within [0, 1]")
        self.staleness = staleness
        self.stale_probability = stale_probability
        self._rng = rng
        self._versions: dict[Hashable, list[tuple[float, Item | None]]] = {}

    def written(self, key: Hashable, now: float, before: Item | None, after: Item | None) -> None:
        """Record a write of ``key`` (``after`` None: a delete); ``before`` is the version it replaced."""
        if self.staleness == 0:
            return
        versions = self._versions.setdefault(key, [(_LONG_AGO, before)])
        versions.append((now, after))
        self._prune(key, now)

    def _prune(self, key: Hashable, now: float) -> list[tuple[float, Item | None]]:
        versions = self._versions.get(key, [])
        cutoff = now - self.staleness
        settled = max((i for i, (at, _) in enumerate(versions) if at <= cutoff), default=0)
        del versions[:settled]
        if len(versions) == 1:  # only the settled version: it is the latest, nothing stale to serve
            del self._versions[key]
        return versions

    def keys(self) -> Iterable[Hashable]:
        """Keys with versions newer than settled (deleted items among them)."""
        return list(self._versions)

    def read(self, key: Hashable, now: float, latest: Item | None) -> Item | None:
        """What an eventually consistent read of ``key`` returns (``latest``: the item as stored now)."""
        if key not in self._versions:
            return latest
        versions = self._prune(key, now)
        if not versions:
            return latest
        cutoff = now - self.staleness
        settled = versions[0][1] if versions[0][0] <= cutoff else None
        newer = [item for at, item in versions if at > cutoff]
        if not newer or self._rng.random() < self.stale_probability:
            return settled
        return self._rng.choice(newer)
