"""The Go library's clients of an application, as kinsumer sees them in the clients table. Pure, no I/O.

kinsumer keeps the tables of the Go library (twitchscience/kinsumer), so an application moves between the
two in place, but it never reads beside a live Go client: the two share out shards by different rules
(kinsumer's frontier puts parents before children, its balanced assignment and several streams are
unknown to Go, and Go ignores KPL sub-sequence positions), so each would take shards the other reads.
Instead, while a Go client of the application is live:

- ``run()`` raises :class:`~kinsumer.errors.GoClientsLive` (``Config(beside_go="refuse")``, the default),
  or starts and reads nothing until the Go clients are gone (``beside_go="wait"``: a rolling deploy);
- a running kinsumer client that sees a Go client join hands every shard it owns over (each a clean
  handoff: the final checkpoint, then the release) and takes none, saying so in its log and in
  ``health()``; the Go client takes the released shards after their checkpoints. Once no Go client is
  live, the kinsumer clients take the shards back where the Go clients left them.

Nothing is read by both: a Go client takes a row only when it is free, or when its ``LastUpdate`` (epoch
ns, which kinsumer writes in the checkpoints table) is older than the Go client's own age; kinsumer takes
none while a Go client is live. kinsumer's client rows carry epoch ms, which a Go client reads as stale:
it counts no kinsumer client in its modulo, so the Go clients read every shard between them.

A Go client heartbeats every ``shardCheckFrequency`` (a minute by default) and counts as live for five of
them, so kinsumer judges a Go row by ``Config.go_client_max_age`` (300 s), not by its own
``client_record_max_age``: a Go client killed without a clean ``Stop()`` holds its shards that long.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from .clients_table import ClientRow

__all__ = ["GoClients"]


@attrs.frozen
class GoClients:
    """The live Go clients of one scan of the clients table (sorted by ID), and when it was made."""

    live: tuple[ClientRow, ...] = ()
    scanned_at: int = 0  # epoch ms

    @classmethod
    def among(cls, rows: Iterable[ClientRow], now_ms: int, max_age: float) -> GoClients:
        """The Go rows of ``rows`` whose last heartbeat is less than ``max_age`` seconds old at ``now_ms``."""
        live = sorted((r for r in rows if r.go and r.live_at(now_ms, max_age)), key=lambda r: r.id)
        return cls(tuple(live), now_ms)

    def __bool__(self) -> bool:
        return bool(self.live)

    def described(self) -> tuple[str, ...]:
        """Each live Go client as an operator reads it: its ID, name and last heartbeat."""
        return tuple(
            f"{r.id} (name {r.name!r}, last heartbeat {max(0, self.scanned_at - r.last_update) / 1000:.1f} s ago)"
            for r in self.live
        )
