"""Membership, leadership and shard assignment of one client.

Every ``shard_check_frequency`` the coordinator reads the live clients and the shard cache
and owns the shards the assignment gives it: those at positions ``i % client_count ==
my_index`` ("modulo"), or those the leader published with the shard cache ("balanced": the
leader computes it from the live clients and the assignment as published before). Only shards
whose owner changed are stopped and started. It owns the :class:`ShardPool` and the client's
:class:`~.heartbeat.Heartbeat`, which runs on a thread of its own so that no slow round delays it.

The first live client also does the leader's duties (:class:`~.leader.Leader`): the lease, the
shard cache's refresh, the balanced assignment, the roster. The others read the roster instead of
scanning while they can trust it (:mod:`.roster`), so the table's reads grow with the clients, not
with their square. Whoever scans finds a client that missed a heartbeat, and
rounds again when it will count as dead: that takes up to a round off the fail-over after a crash.

Time is read through :mod:`kinsumer.clock`, and the loops of the rounds and of the heartbeat are each one
call a wake-up (:meth:`Coordinator.step`, :meth:`Heartbeat.step`), so that a simulator (``tests/sim``) can
run the same rounds on virtual time without threads: ``start(threads=False)``, with a pool of its own.

A round that finds a live client of the Go library (twitchscience/kinsumer) in the clients table reads
nothing beside it (:mod:`.go_clients`): the first round raises :class:`~kinsumer.errors.GoClientsLive`
(``Config(beside_go="refuse")``), a later one hands every shard over and takes none while it is live.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from .. import clock
from ..aws.retry import Stopped
from ..aws.tables import now_ms as tables_now_ms
from ..errors import GoClientsLive
from ..reading.reader import ReaderFactory
from ..waiting import join_thread
from . import clients_table, metadata_table
from .assignment import assigned_shards, client_index
from .clients_table import ClientRow
from .go_clients import GoClients
from .heartbeat import Heartbeat
from .identity import claim_row, release_row
from .leader import Leader, due_by_round
from .membership import Membership
from .metadata_table import ShardCache
from .roster import Roster, headline_to_trust, silent_until
from .runtime import Runtime
from .shard_cache import FinishedShards, refresh_shard_cache
from .shard_pool import ShardPool
from .shard_worker import ShardWorker
from .streams import StreamScope, agreed_streams, combined_keys, listed_streams

__all__ = ["Coordinator"]

log = logging.getLogger("kinsumer.coordinator")
T = TypeVar("T")

_FINAL_CALL_DEADLINE = 3.0  # seconds spent retrying deregistration at stop
_SAY_AGAIN = 60.0  # seconds between two warnings that the client reads nothing beside a live Go client
#: Followers read the leader's roster instead of scanning (the bench turns it off to compare).
READ_ROSTER = True


class Coordinator:
    """Runs the membership loop on its own thread, and the shard pool it assigns shards to."""

    def __init__(
        self, runtime: Runtime, readers: Mapping[str, ReaderFactory] | None = None, *, pool: ShardPool | None = None
    ) -> None:
        """``pool``: what the rounds assign shards to; None (production): a :class:`ShardPool` over ``readers``.
        The simulator (``tests/sim``) gives one on its own loop, with no thread of its own (``threads=False``)."""
        self._rt = runtime
        self._cfg = runtime.config
        self._pool = pool if pool is not None else ShardPool(runtime, readers)
        self._driven = False  # the rounds and the heartbeat run on (start() returned): a beat asked for is a wake
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._refresh = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kinsumer-coordinator", daemon=True)
        self._home = next(scope for scope in runtime.streams if scope.home)
        self._leader = Leader(runtime, self._home.cache_key)
        self._beats = Heartbeat(runtime, lambda: self._cache_version, self._leader.headline)
        self._caches: dict[str, ShardCache] = {}  # the shard cache of each stream read, by name
        self._finished: dict[str, FinishedShards] = {}  # the shards of each stream seen finished, by name
        self._cache_version = 0  # the sum of their versions: what the heartbeat announces
        self._not_agreed: tuple[str, ...] = ()  # streams this client lists that some live client does not
        self._claimed = False  # the first heartbeat claimed our row in the clients table
        self._next_cache_read = 0.0  # the cache is read when a client has a newer one, or at least this often
        self._recheck_at = math.inf  # an extra round when a silent client turns stale
        self._leader_seen: str | None = None  # the first live client at the last round: the leader
        self._roster: tuple[str, Roster] | None = None  # the last roster read, and its digest
        self.client_index = 0
        self.client_count = 1
        #: The consumable shards of the streams read, as of the last round.
        self.shard_count = 0
        #: Monotonic time since which this client has owned no shard while there are at least as many shards as
        #: live clients (so the assignment gives each one some); None while it owns one, or need not.
        self.idle_since: float | None = None
        #: This client has owned a shard since it started.
        self.owned_once = False
        #: Until when (monotonic) a client that leaves waits for its shards' handoffs (:meth:`begin_leaving`).
        self.handoff_deadline = math.inf
        #: The live clients of the Go library, as of the last round, as an operator reads them (while there
        #: is one, this client reads nothing: :mod:`.go_clients`).
        self.beside_go: tuple[str, ...] = ()
        self._said_beside_go = -math.inf  # monotonic: when the warning was last logged

    # ----------------------------------------------------------------- control

    def start(self, deadline: float | None = None, *, threads: bool = True) -> None:
        """First round on the caller's thread (so setup errors raise from run()), then the heartbeat and the loop.

        ``deadline`` (monotonic): until when the first round retries transient faults, as run()'s other first
        calls do (a round's own deadline, one heartbeat period, may be gone before a fault comes on a busy
        machine); None: a round's. ``threads=False`` (the simulator): no thread is started; the caller runs
        what their loops run, :meth:`step` and the heartbeat's :meth:`~.heartbeat.Heartbeat.step`, on its own
        clock, and :meth:`leave` once :meth:`step` ends."""
        self.tick(deadline)
        self._driven = True
        if threads:
            self._beats.start()
            self._thread.start()

    def request_refresh(self) -> None:
        """Recompute the shard cache from Kinesis at once (a shard finished)."""
        self._refresh.set()
        self._wake.set()

    def request_stop(self) -> None:
        """Begin a clean stop: leave the membership and hand every shard off."""
        self._stopping.set()
        self._rt.leaving.set()
        self._wake.set()
        self._pool.request_stop()

    def join(self, timeout: float) -> bool:
        """Wait for the loop and every shard worker to end; False if some did not in time."""
        deadline = time.monotonic() + timeout
        if self._thread.ident is not None:
            join_thread(self._thread, deadline - time.monotonic())
        else:  # run() failed before the loop started (or no thread ran it): leave from here
            self.leave()
        alive = self._pool.join(deadline)
        if self._thread.is_alive() or alive:
            log.warning("stop timed out; still running: %s", alive or "the coordinator")
            return False
        return True

    @property
    def is_leader(self) -> bool:
        """This client holds the leader lease."""
        return self._leader.leading

    def workers(self) -> list[ShardWorker]:
        """The workers of the shards this client is assigned, by shard ID."""
        return self._pool.workers()

    # ----------------------------------------------------------------- the loop

    @property
    def heartbeat(self) -> Heartbeat:
        """This client's heartbeat (its thread started by :meth:`start`)."""
        return self._beats

    def _loop(self) -> None:
        next_tick: float | None = clock.monotonic() + self._cfg.shard_check_frequency
        while next_tick is not None:
            self._wake.wait(max(0.0, self.wakes_at(next_tick) - clock.monotonic()))
            self._wake.clear()
            next_tick = self.step(next_tick)
        self.leave()

    def wakes_at(self, next_tick: float) -> float:
        """When the loop, its next round due at ``next_tick`` (monotonic), wakes up (unless asked sooner):
        then, or when a silent client turns stale."""
        return min(next_tick, self._recheck_at)

    def step(self, next_tick: float) -> float | None:
        """What the loop does when it wakes up: a round, if one is due (or a refresh was asked for); the next
        round's time, or None once the loop ends (a stop, or a failure reported to the runtime)."""
        if self._stopping.is_set():
            return None
        due = self.wakes_at(next_tick)
        if clock.monotonic() < due and not self._refresh.is_set():
            return next_tick
        try:
            self.tick()
        except Stopped:
            return None
        except Exception as exc:  # noqa: BLE001
            if not self._rt.retry_later(exc, "the membership round"):
                self._rt.fail(exc, "the coordinator")
                return None
        return max(next_tick + self._cfg.shard_check_frequency, clock.monotonic())

    def _call(self, fn: Callable[[], T], operation: str, deadline: float) -> T:
        return self._rt.call(fn, operation, deadline=deadline, should_stop=self._stopping.is_set)

    def tick(self, deadline: float | None = None) -> None:
        """One round: heartbeat, membership, leadership, shard cache, assignment; its transient faults retried
        until ``deadline`` (monotonic; None: one heartbeat period from now)."""
        rt, cfg = self._rt, self._cfg
        if deadline is None:
            deadline = clock.monotonic() + cfg.shard_check_frequency
        call = functools.partial(self._call, deadline=deadline)

        if not self._claimed:
            self._claim(call)
        heartbeat_version = self._beats.announced
        rows, membership, scanned_at = self._members(call)
        go = GoClients.among(rows, scanned_at, cfg.go_client_max_age)
        rows = [row for row in rows if not row.go]
        if go:
            self._step_aside(go, call)
            return
        if self.beside_go:
            log.warning("no client of the Go library is live on the application any more: client %s reads again",
                        rt.client_id)  # fmt: skip
            self.beside_go = ()
        rt.membership = membership
        clients = [row for row in rows if row.id in membership.live and not row.leaving]
        silent = scanned_at and silent_until(clients, rt.client_id, scanned_at, cfg.shard_check_frequency, rt.max_age)
        self._recheck_at = clock.monotonic() + (silent - tables_now_ms()) / 1000 + 0.05 if silent else math.inf
        index, count = client_index([c.id for c in clients], rt.client_id)
        leader = self._leader
        leader.lead(index == 0, call)
        agreed = self._agreed(clients)
        now = clock.monotonic()
        newest = max((c.cache_version for c in clients), default=0)
        read_all = newest > self._cache_version or due_by_round(now, self._next_cache_read, cfg.shard_check_frequency)
        if read_all:
            self._next_cache_read = now + cfg.leader_action_frequency
        leader_due = leader.refresh_due()
        refresh = self._refresh.is_set() or leader_due
        self._refresh.clear()
        caches = {scope.name: self._shard_cache(scope, call, read=read_all, refresh=refresh) for scope in agreed}
        if leader_due:
            leader.refreshed(call)
        if (index, count) != (self.client_index, self.client_count):
            log.info("client %s is %d of %d live clients", rt.client_id, index, count)
        self.client_index, self.client_count = index, count
        keys = combined_keys((scope, caches[scope.name].shard_ids) for scope in agreed)
        parents = {scope.key(s): p for scope in agreed for s, p in caches[scope.name].parents.items()}
        if self._cfg.assignment == "balanced":
            home = caches[self._home.name]
            if leader.leading:
                caches[self._home.name] = home = leader.publish_assignment(home, keys, [c.id for c in clients], call)
            shards = set(keys)
            wanted = sorted(s for s, owner in home.assignment.items() if owner == rt.client_id and s in shards)
        else:
            wanted = assigned_shards(keys, index, count)
        self._caches = caches
        version = sum(cache.version for cache in caches.values())
        self._cache_version = version
        if version > max(heartbeat_version, newest):  # we wrote a new cache (or assignment): say so now
            if self._driven:
                self._beats.beat_now()
            else:  # the first round: before the heartbeat's thread runs
                self._beats.beat(deadline)
        self._leader_seen = clients[0].id if clients else None
        if leader.leading and scanned_at:
            news = leader.publish_roster(rows, membership, scanned_at, silent, self._cache_version, call)
            if news and self._driven:
                self._beats.beat_now()
        if not self._stopping.is_set():
            self._pool.assign(wanted, parents)
        self._note_owning(len(keys), count)

    def _step_aside(self, go: GoClients, call: Callable[..., Any]) -> None:
        """A round beside live Go clients: refuse at the first round (``beside_go="refuse"``), else hand every shard
        over, lead nothing and take nothing (:mod:`.go_clients`); a warning when it begins and every minute."""
        rt, cfg = self._rt, self._cfg
        described = go.described()
        if not self._driven and cfg.beside_go == "refuse":
            raise GoClientsLive(rt.tables.clients.removesuffix("_clients"), described, cfg.go_client_max_age)
        now = clock.monotonic()
        if not self.beside_go or now - self._said_beside_go >= _SAY_AGAIN:
            log.warning(
                "the Go library's client %s is live on the application: client %s hands its shards over and reads "
                "nothing until no Go client is live (a killed Go client counts as gone go_client_max_age=%g s after "
                "its last heartbeat)", ", ".join(described), rt.client_id, cfg.go_client_max_age,
            )  # fmt: skip
            self._said_beside_go = now
        self.beside_go = described
        self._leader.lead(False, call)
        if not self._stopping.is_set():
            self._pool.assign([], {})
        self.idle_since = None  # it owns none on purpose: health() says why

    def _note_owning(self, shards: int, clients: int) -> None:
        """Whether this client owns a shard while it should (for ``Kinsumer.health()``)."""
        self.shard_count = shards
        if any(worker.captured for worker in self._pool.workers()):
            self.owned_once, self.idle_since = True, None
        elif shards >= clients > 0:
            self.idle_since = self.idle_since if self.idle_since is not None else clock.monotonic()
        else:
            self.idle_since = None

    def _members(self, call: Callable[..., Any]) -> tuple[list[ClientRow], Membership, int]:
        """The clients' rows and the membership: from the leader's roster where it can be trusted (the
        rows then without heartbeat times), else from a scan; and the scan's time (epoch ms; 0: none)."""
        rt = self._rt
        roster = self._trusted_roster(call) if READ_ROSTER and not self.is_leader and not self.beside_go else None
        if roster is not None:
            return list(roster.live), roster.membership(rt.max_age), 0
        rows = call(lambda: clients_table.all_clients(rt.dynamodb, rt.tables.clients), "Scan")
        scanned_at = tables_now_ms()
        ours = [row for row in rows if not row.go]  # the Go library's clients are not members (see .go_clients)
        return rows, Membership.from_rows(ours, scanned_at, rt.max_age), scanned_at

    def _trusted_roster(self, call: Callable[..., Any]) -> Roster | None:
        """The roster of the client the last round found leading, if its row can be trusted and the roster
        lists this client's process under that leader (:mod:`.roster`); else None (then scan)."""
        rt = self._rt
        db, tables = rt.dynamodb, rt.tables
        leader_id = self._leader_seen
        if leader_id in (None, rt.client_id):
            return None
        # eventually consistent (half the cost): a row read before the leader's last write looks less
        # fresh, and at worst tells of a silent client a round late
        leader = call(lambda: clients_table.read_client(db, tables.clients, leader_id, consistent=False), "GetItem")
        headline = headline_to_trust(leader, tables_now_ms(), self._cfg.shard_check_frequency)
        if headline is None:
            return None
        if self._roster is None or self._roster[0] != headline.digest:
            self._roster = call(lambda: metadata_table.read_roster(db, tables.metadata), "GetItem")
        if self._roster is None or self._roster[0] != headline.digest:
            return None
        roster = self._roster[1]
        return roster if roster.lists(rt.client_id, rt.instance) and roster.leader() == leader_id else None

    def _shard_cache(self, scope: StreamScope, call: Callable[..., Any], *, read: bool, refresh: bool) -> ShardCache:
        """``scope``'s shard cache: as last read, read again (``read``, or never read), or listed from
        Kinesis and stored (``refresh``, or none yet, or one of another incarnation of the stream)."""
        rt = self._rt
        db, tables = rt.dynamodb, rt.tables
        cache = self._caches.get(scope.name)
        if cache is None or read:
            cache = call(functools.partial(metadata_table.read_shard_cache, db, tables.metadata, scope.cache_key),
                         "GetItem")  # fmt: skip
        if cache is None or not cache.shard_ids or cache.stream != scope.identity or refresh:
            seen, reap = cache, self.is_leader  # a cache of another incarnation (or version) is written again
            known = self._finished.setdefault(scope.name, FinishedShards())
            refresh_cache = functools.partial(
                refresh_shard_cache, rt.kinesis, db, scope, tables, seen, reap_trimmed=reap, known=known
            )
            cache = call(refresh_cache, "RefreshShardCache")
        return cache

    def _claim(self, call: Callable[..., Any]) -> None:
        """The first heartbeat: claim our row (see :mod:`.identity`); the liveness learns it landed."""
        rt = self._rt
        db, table = rt.dynamodb, rt.tables.clients
        started = rt.liveness.now()
        name, reading, streams = rt.client_name, rt.config.reading, rt.stream_names
        call(lambda: claim_row(db, table, rt.client_id, name, rt.instance, rt.max_age, reading, streams), "PutItem")
        self._claimed = True
        rt.liveness.heartbeat_done(started)

    def _agreed(self, clients: list[ClientRow]) -> list[StreamScope]:
        """The streams this client lists that every live client lists (a row without a list: the home
        stream only), in this client's order; says so when some are not read yet, or again."""
        rt = self._rt
        home = self._home.name
        listed = [listed_streams(c.streams, home) for c in clients if c.id != rt.client_id]
        agreed = agreed_streams(rt.stream_names, listed)
        waiting = tuple(name for name in rt.stream_names if name not in agreed)
        if waiting != self._not_agreed:
            if waiting:
                lacking = sorted(c.id for c in clients if not set(waiting) <= set(listed_streams(c.streams, home)))
                log.warning(
                    "not reading %s yet: live clients %s do not list it (a stream is read once every client lists "
                    "it: restart them with the longer list)", ", ".join(waiting), ", ".join(lacking),
                )  # fmt: skip
            else:
                log.info("every live client lists %s", ", ".join(rt.stream_names))
            self._not_agreed = waiting
        return [scope for scope in rt.streams if scope.name in agreed]

    def leave(self) -> None:
        """Stop path on the loop thread, once :meth:`step` ended: hand every shard off, then leave the membership.

        While the workers hand off, the heartbeat goes on marked ``Leaving``: the others
        assign this client nothing, yet do not take its shards before they are released.
        """
        self.begin_leaving()
        self._pool.wait(self.handoff_deadline)
        self.end_leaving()

    def begin_leaving(self) -> None:
        """:meth:`leave`'s first half: every shard asked to hand off, the lead resigned, the heartbeat marked
        ``Leaving``. Then the workers hand off (until :attr:`handoff_deadline`), then :meth:`end_leaving`."""
        self._pool.request_stop()
        self._leader.resign(clock.monotonic() + _FINAL_CALL_DEADLINE)
        self._beats.leaving = True
        self._beats.beat_now()
        self.handoff_deadline = clock.monotonic() + self._cfg.handoff_timeout + _FINAL_CALL_DEADLINE

    def end_leaving(self) -> None:
        """:meth:`leave`'s second half, once the workers handed off (or their time is up): the heartbeat
        stopped, the row deleted."""
        rt = self._rt
        self._beats.stop(_FINAL_CALL_DEADLINE)  # before the row goes: a late heartbeat must not bring it back
        deadline = clock.monotonic() + _FINAL_CALL_DEADLINE
        try:
            rt.call(
                lambda: clients_table.deregister(rt.dynamodb, rt.tables.clients, rt.client_id, rt.instance),
                "DeleteItem",
                deadline=deadline,
            )
        except Exception as exc:  # noqa: BLE001 - our row expires by itself
            log.warning("could not deregister client %s: %s", rt.client_id, exc)
        if self._claimed:
            release_row(rt.tables.clients, rt.client_id)
