"""The roster: the membership as the leader publishes it, so that the others need not scan. No I/O.

To compute its assignment, each client needs every live client's ID, process (``Instance``),
cache version, streams and whether it is leaving. A scan of the clients table gives that at a
cost that grows with the rows (a read unit per 4 KB): with every client scanning every round,
the table's reads grow with the square of the clients. So the leader, which scans anyway,
publishes what changes rarely, the :class:`Roster` (an item of the metadata table, read again
only when it changes), and puts what must be fresh in its own heartbeat row, the
:class:`Headline`: the roster's digest, when the scan it comes from was made, and when the
first client that missed its heartbeat will count as dead. Every other client reads that one
row each round, and scans as before whenever it cannot trust it (:func:`headline_to_trust`):
the leader's row is silent or leaving, the headline is missing or old, or a client has gone
silent (each client then finds the dead one itself, at the moment it expires, as before); or
when the roster does not list this client's process (:meth:`Roster.lists`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

import attrs

from .clients_table import ClientRow, Headline
from .membership import Membership

__all__ = ["HEADLINE_MAX_AGE", "Roster", "headline_to_trust", "silent_until"]

#: How old (in rounds, ``shard_check_frequency``) the scan a headline comes from may be: the leader
#: scans every round, and its heartbeat, written every round on a thread of its own, carries the last.
HEADLINE_MAX_AGE = 2.5
_SILENT = 1.5  # rounds without a heartbeat after which a client counts as silent (one heartbeat late)


@attrs.frozen
class Roster:
    """The live clients (sorted by ID; their heartbeat times left out) and the last heartbeat of each
    client that is not live (its row not yet reaped)."""

    live: tuple[ClientRow, ...]
    gone: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, rows: Iterable[ClientRow], membership: Membership) -> Roster:
        rows = sorted(rows, key=lambda r: r.id)
        live = tuple(
            _member(r.id, r.instance, r.cache_version, r.leaving, r.streams) for r in rows if r.id in membership.live
        )
        return cls(live, tuple((r.id, r.last_update) for r in rows if r.id not in membership.live))

    def encode(self) -> str:
        live = [[r.id, r.instance, r.cache_version, int(r.leaving), list(r.streams)] for r in self.live]
        return json.dumps({"live": live, "gone": [list(g) for g in self.gone]}, separators=(",", ":"))

    @classmethod
    def decode(cls, body: str) -> Roster:
        found = json.loads(body)
        live = tuple(_member(str(c), str(i), int(v), bool(lv), tuple(map(str, s))) for c, i, v, lv, s in found["live"])
        return cls(live, tuple((str(cid), int(last)) for cid, last in found["gone"]))

    def digest(self) -> str:
        return hashlib.sha256(self.encode().encode()).hexdigest()[:20]

    def leader(self) -> str | None:
        """The first live client that is not leaving: the one that leads, and publishes."""
        return next((r.id for r in self.live if not r.leaving), None)

    def lists(self, client_id: str, instance: str) -> bool:
        """Whether this process of ``client_id`` is live in the roster."""
        return any(r.id == client_id and r.instance == instance for r in self.live)

    def membership(self, max_age: float) -> Membership:
        """The membership the roster describes (the heartbeat times of live clients are not in it)."""
        live = frozenset(r.id for r in self.live)
        return Membership(live, dict(self.gone), int(max_age * 1000), {r.id: r.instance for r in self.live})


def _member(client_id: str, instance: str, cache_version: int, leaving: bool, streams: tuple[str, ...]) -> ClientRow:
    return ClientRow(client_id, "", 0, cache_version=cache_version, leaving=leaving, instance=instance, streams=streams)


def silent_until(rows: Iterable[ClientRow], me: str, now_ms: int, period: float, max_age: float) -> int:
    """Epoch ms at which the first client of ``rows`` (but ``me``) that missed a heartbeat counts as
    dead; 0 if none missed one."""
    missed = _SILENT * period * 1000
    expiries = [r.last_update + int(max_age * 1000) for r in rows if r.id != me and now_ms - r.last_update > missed]
    return min(expiries, default=0)


def headline_to_trust(leader: ClientRow | None, now_ms: int, period: float) -> Headline | None:
    """The leader's headline if a client may take the roster from it instead of scanning, else None.

    ``leader`` is the row of the client the last round found leading, ``period`` the round
    (``shard_check_frequency``). The times are the leader's clock, compared with this one's, as
    every liveness decision of the clients table is.
    """
    if leader is None or leader.leaving or leader.headline is None:
        return None
    headline = leader.headline
    if now_ms - leader.last_update > _SILENT * period * 1000:  # the leader missed a heartbeat
        return None
    if now_ms - headline.made_at > HEADLINE_MAX_AGE * period * 1000 or headline.silent_until:
        return None
    return headline
