"""When each owned shard commits next. Pure, no I/O, not thread-safe.

Every shard commits ``period`` seconds after it was captured and then every ``period``
seconds, counted from the start of its previous commit, whatever the other shards do.
"""

from __future__ import annotations

__all__ = ["CommitSchedule"]


class CommitSchedule:
    """Due times of the shards' commits (monotonic seconds)."""

    __slots__ = ("_due", "period")

    def __init__(self, period: float) -> None:
        self.period = period
        self._due: dict[str, float] = {}

    def __contains__(self, shard_id: object) -> bool:
        return shard_id in self._due

    def __len__(self) -> int:
        return len(self._due)

    def add(self, shard_id: str, now: float) -> None:
        """A shard was captured at ``now``: its first commit is one period later."""
        self._due[shard_id] = now + self.period

    def remove(self, shard_id: str) -> None:
        self._due.pop(shard_id, None)

    def due(self, now: float) -> list[str]:
        """The shards whose commit is due at ``now``, most overdue first."""
        return sorted((s for s, t in self._due.items() if t <= now), key=lambda s: (self._due[s], s))

    def started(self, shard_id: str, now: float) -> None:
        """A commit of ``shard_id`` started at ``now``: the next one is a period later."""
        if shard_id in self._due:
            self._due[shard_id] = now + self.period

    def next_due(self) -> float | None:
        """When the next commit is due; None with no shard."""
        return min(self._due.values(), default=None)
