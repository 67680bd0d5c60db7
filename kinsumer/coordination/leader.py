"""The leader's duties: what the first of the live clients does besides what every client does.

- It holds the leader lease in the metadata table (taken, renewed every ``max_age / 2``, released
  when another client comes first or at a stop).
- It lists the shards and stores the shard cache every ``leader_action_frequency``
  (:func:`~.shard_cache.refresh_shard_cache`; once an hour it deletes the rows of shards trimmed
  past retention),
  and every minute or so deletes the rows of clients silent for long (crashed ones).
- With ``assignment="balanced"`` it computes the assignment and publishes it with the shard cache.
- It publishes the roster of the live clients from its scan, and the headline its heartbeat carries,
  so that the others read one row a round instead of scanning (:mod:`.roster`).

The coordinator calls it from its round; ``call`` runs a DynamoDB call with the round's retries.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import attrs

from ..clock import monotonic
from . import clients_table, metadata_table
from .assignment import balanced_assignment
from .clients_table import ClientRow, Headline
from .membership import Membership
from .metadata_table import ShardCache
from .roster import Roster
from .runtime import Runtime

__all__ = ["Leader", "due_by_round"]

log = logging.getLogger("kinsumer.coordinator")

_REAP_AFTER = 600.0  # seconds of silence after which the leader deletes a client row (a crashed client's)
_REAP_EVERY = 60.0  # seconds between two looks for such rows


def due_by_round(now: float, at: float, round_period: float) -> bool:
    """Whether a duty due at ``at`` (monotonic) is done by the round running ``now``: by the round nearest its
    time, so one a little early does it. A duty that is due again a period after it was done (after its own
    calls) then stays every period, rather than slipping a round each time by the time its calls took."""
    return now >= at - round_period / 2


class Leader:
    """One client's leadership: whether it leads, and the duties it does while it does."""

    def __init__(self, runtime: Runtime, home_cache_key: str) -> None:
        self._rt = runtime
        self._home_cache_key = home_cache_key  # the metadata item the balanced assignment is published in
        #: This client holds the leader lease.
        self.leading = False
        self._renew_at = 0.0  # monotonic time to renew the lease
        self._next_action = 0.0  # monotonic time of the next shard cache refresh
        self._next_reap = 0.0  # monotonic time of the next look for long-silent client rows
        self._published: str | None = None  # the digest of the last roster published
        self._headline: Headline | None = None  # what this client's heartbeat says of the roster

    def lead(self, first: bool, call: Callable[..., Any]) -> None:
        """Take or renew the lease if this client is ``first`` of the live clients, else let it go."""
        rt = self._rt
        db, table = rt.dynamodb, rt.tables.metadata
        if first and (not self.leading or monotonic() >= self._renew_at):
            renew_at = monotonic() + rt.max_age / 2
            leader = call(
                lambda: metadata_table.take_leadership(db, table, rt.client_id, rt.client_name, rt.max_age), "PutItem"
            )
            if leader and not self.leading:
                log.info("client %s is the leader", rt.client_id)
                self._next_action = 0.0
                self._published = self._headline = None  # the roster is published again
            self.leading = leader
            self._renew_at = renew_at
        elif not first and self.leading:
            call(lambda: metadata_table.release_leadership(db, table, rt.client_id), "UpdateItem")
            log.info("client %s is no longer the leader", rt.client_id)
            self.leading = False

    def refresh_due(self) -> bool:
        """It leads and the shard cache is due to be listed again (:func:`due_by_round`)."""
        return self.leading and due_by_round(monotonic(), self._next_action, self._rt.config.shard_check_frequency)

    def refreshed(self, call: Callable[..., Any]) -> None:
        """The due refresh was done: the next one in ``leader_action_frequency``; and, if due, the rows of
        clients silent for long are deleted."""
        rt = self._rt
        period = rt.config.leader_action_frequency
        self._next_action = monotonic() + period
        if monotonic() >= self._next_reap:
            self._next_reap = monotonic() + max(_REAP_EVERY, period)
            reap_after = max(_REAP_AFTER, 10 * rt.max_age)
            call(lambda: clients_table.reap_clients(rt.dynamodb, rt.tables.clients, reap_after), "Scan")

    def publish_assignment(
        self, cache: ShardCache, keys: list[str], client_ids: list[str], call: Callable[..., Any]
    ) -> ShardCache:
        """The balanced assignment of ``keys`` (the shards of every stream read, kept in the home stream's
        cache item ``cache``): recomputed, and published if it changed; the cache as it is now."""
        rt = self._rt
        live = sorted(set(client_ids) | {rt.client_id})
        wanted = balanced_assignment(keys, live, cache.assignment)
        if wanted == cache.assignment:
            return cache
        written: ShardCache | None = call(
            lambda: metadata_table.write_shard_cache(
                rt.dynamodb,
                rt.tables.metadata,
                list(cache.shard_ids),
                cache.parents,
                cache.version,
                wanted,
                stream=cache.stream,
                key=self._home_cache_key,
            ),
            "PutItem",
        )
        if written is None:  # the cache changed meanwhile (a shard finished): again next round
            return cache
        moved = sum(1 for shard, owner in wanted.items() if cache.assignment.get(shard) != owner)
        log.info("published the assignment of %d shards to %d clients (%d moved)", len(wanted), len(live), moved)
        return written

    def publish_roster(
        self,
        rows: list[ClientRow],
        membership: Membership,
        made_at: int,
        silent: int,
        cache_version: int,
        call: Callable[..., Any],
    ) -> bool:
        """The roster from the scan at ``made_at`` (epoch ms; this client's row with its ``cache_version`` as of
        now): published if it changed, and the headline set. True if the followers must know at once (a new
        roster, or a client that went silent): the heartbeat should carry it now."""
        rt = self._rt
        own = [attrs.evolve(r, cache_version=cache_version) if r.id == rt.client_id else r for r in rows]
        roster = Roster.of(own, membership)
        digest = roster.digest()
        if digest != self._published:
            call(lambda: metadata_table.write_roster(rt.dynamodb, rt.tables.metadata, roster, digest), "PutItem")
            self._published = digest
        previous, self._headline = self._headline, Headline(digest, made_at, silent)
        return previous is None or (previous.digest, previous.silent_until) != (digest, silent)

    def headline(self) -> Headline | None:
        """What this client's heartbeat says of the roster: nothing unless it leads."""
        return self._headline if self.leading else None

    def resign(self, deadline: float) -> None:
        """A stop: give the lease up at once, so another client leads (and assigns) while this one hands off."""
        if not self.leading:
            return
        rt = self._rt
        try:
            rt.call(
                lambda: metadata_table.release_leadership(rt.dynamodb, rt.tables.metadata, rt.client_id),
                "UpdateItem",
                deadline=deadline,
            )
            self.leading = False
        except Exception as exc:  # noqa: BLE001 - the lease expires by itself
            log.warning("could not give up the leadership: %s", exc)
