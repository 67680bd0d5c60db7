"""The other clients, as of this client's last scan of the clients table, and when a shard
may be taken from its owner. Pure, no I/O.

A shard is taken from a live owner only when the owner releases it. From an owner that
is not live it may be taken, unless the owner wrote the shard's row after the heartbeat this
client last saw (it came back after a pause, heartbeated and confirmed its lease: it will
show as live at the next scan). An owner's writes to the row happen while its heartbeat
vouches for it (half the max age after the heartbeat); both times are the owner's clock.
An owner without a client row left (its clean stop deletes the row before its last
releases land) or was reaped: its rows are taken once they are ``max_age`` old. A live owner
whose process is not the one that captured the row (it died and was started again under its
fixed ``client_id``) never releases it: its rows are taken at once, as a dead owner's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from .clients_table import ClientRow

__all__ = ["Membership"]


@attrs.frozen
class Membership:
    """Who is live, and each client's last heartbeat (epoch ms), as of one scan."""

    live: frozenset[str]
    heartbeats: Mapping[str, int]
    max_age_ms: int
    instances: Mapping[str, str] = attrs.field(factory=dict)  # each client's process, as its row says

    @classmethod
    def from_rows(cls, rows: Iterable[ClientRow], now_ms: int, max_age: float) -> Membership:
        max_age_ms = int(max_age * 1000)
        rows = list(rows)
        live = frozenset(r.id for r in rows if r.live_at(now_ms, max_age))
        return cls(live, {r.id: r.last_update for r in rows}, max_age_ms, {r.id: r.instance for r in rows})

    def may_take(self, owner: str, row_last_update: int, now_ms: int, row_instance: str | None = None) -> bool:
        """Whether a shard row that ``owner`` holds, last written at ``row_last_update`` (by its process
        ``row_instance``, if the row says), may be taken."""
        if owner in self.live:
            current = self.instances.get(owner)
            return bool(row_instance and current and row_instance != current)  # captured by a process now gone
        if row_last_update <= now_ms - 2 * self.max_age_ms:  # long untouched, whatever else
            return True
        heartbeat = self.heartbeats.get(owner)
        if heartbeat is None:  # it left (its releases may still come) or was reaped
            return row_last_update <= now_ms - self.max_age_ms
        return row_last_update <= heartbeat + self.max_age_ms * 3 // 4  # not written since it came back
