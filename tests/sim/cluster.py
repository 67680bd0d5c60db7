"""N clients of one application over one stream of S shards, on virtual time, without threads (issue 40).

:class:`Cluster` owns a :class:`VirtualClock`, installed as :mod:`kinsumer.clock`'s while the cluster is open
(``with Cluster(...) as cluster:``), a :class:`~tests.sim.SimDynamoDB` and a :class:`~tests.sim.kinesis.SimKinesis`
on that clock, and the clients (:class:`~tests.sim.client.SimClient`: kinsumer's own coordinator). Its event
queue runs, in virtual-time order, what the clients' threads would: each coordinator's loop wake-up
(``Coordinator.step``, due every ``shard_check_frequency``, or sooner when a silent client turns stale, or at once
after a stop), each heartbeat's (``Heartbeat.step``, every period, or at once when a round asks for a beat).
A call that backs off (throttled) advances the clock by its sleep, as if the calls of other clients waited too:
one event at a time, the sim's one approximation of concurrency. With ``skew``, each client's wall clock
(what its rows' ``LastUpdate`` say, and what it compares others' with) is off by a constant of its own, drawn
in ``[-skew, skew]``; monotonic time is common.

Each client's shard workers are kinsumer's own (:class:`~kinsumer.coordination.shard_pool.ShardPool`,
:class:`~kinsumer.coordination.shard_worker.ShardWorker`, the lease, the commit clock), their coroutines on the
client's :class:`~.shard_loop.SimShardLoop`: a client's "shards" event runs its workers' timers and its commits
when due. The readers (:mod:`.reader`) read an idle stream.

Operations: :meth:`join`, :meth:`leave` (a clean stop: ``request_stop``; the coordinator's loop ends, it
begins leaving, its workers hand off while its heartbeat goes on, then it ends leaving), :meth:`crash` (no
more events of any kind; its rows stay until they age), :meth:`pause`, :meth:`split`. What the clients want
is tracked as the rounds assign it (:meth:`converged`, :class:`~.tracking.Tracking`), and what they hold as
their leases say (:class:`~.tracking.Ownership`: no shard taken from a fresh holder; :meth:`settled`: every
lease with the client that wants it).

With ``latency``, each call of a shard worker (a capture, a row read, a release, a GetRecords) takes that many
virtual seconds on its client's loop, the others' calls going on meanwhile as in the production pool; the
coordinators' and heartbeats' calls take none (:func:`tests.sim.agreement.with_latency` times those).
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from types import TracebackType
from typing import Any, cast

from kinsumer import clock
from kinsumer.aws.kinesis import list_shards
from kinsumer.aws.tables import Tables, create_table
from kinsumer.config import Config
from kinsumer.coordination.assignment import assigned_shards
from kinsumer.handling.options import Origin
from kinsumer.record import Record
from kinsumer.testing import Report
from kinsumer.testing._dynamodb import SimDynamoDB
from kinsumer.testing._watch import watch_takeovers
from tests.sim.client import SimClient
from tests.sim.consumer import Call, SimConsumer
from tests.sim.flow import Flow
from tests.sim.kinesis import SimKinesis
from tests.sim.tracking import Ownership, Tracking

__all__ = ["Cluster", "VirtualClock"]

_SETUP_DEADLINE = 30.0  # as run()'s


class VirtualClock:
    """Virtual seconds since the simulation began; epoch time is that plus ``epoch``."""

    def __init__(self, epoch: float = 1_800_000_000.0) -> None:
        self.now = 0.0
        self.epoch = epoch
        self.slept = 0.0  # seconds the retries' backoffs advanced the clock
        self.offset = 0.0  # how far the wall clock of the client whose event runs is off (seconds)

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.epoch + self.now + self.offset

    def sleep(self, seconds: float) -> None:
        self.slept += seconds
        self.now += seconds


class Cluster:
    """The simulated application: its tables, its stream, its clients and their events."""

    def __init__(
        self,
        shards: int,
        config: Config | None = None,
        *,
        seed: int = 0,
        staleness: float = 0.0,
        validate: bool = True,
        skew: float = 0.0,
        application: str = "sim",
        stream: str = "stream",
        latency: float = 0.0,
        records: Call | None = None,
        handle_time: float = 0.0,
        handler: Callable[[Record], object] = lambda record: None,
    ) -> None:
        """``records``: records flow, taken by each client's ``"next"`` or ``"process"`` caller (:mod:`.consumer`,
        ``handle_time`` virtual seconds a record), each handling told to :attr:`ledger`; None: an idle stream."""
        self.config = config or Config()
        self.latency = latency  # virtual seconds a shard worker's call takes (the coordination's take none)
        self.clock = VirtualClock()
        self.rng = random.Random(seed)
        self.skew = skew
        self.false_silent = 0  # rounds in which a client found another that runs not live (silent), summed
        self.db = SimDynamoDB(self.clock.monotonic, staleness=staleness, seed=seed, validate=validate)
        self.records, self.handle_time, self.handler = records, handle_time, handler
        self.flow: Flow | None = None
        if records is None:
            self.kinesis: Any = SimKinesis(self.clock.monotonic, shards, stream=stream)
        else:  # a Kinesis that keeps records, read by kinsumer's polling readers; the ledger checks the handlings
            self.flow = Flow(self.clock, shards, stream, self.rng, validate=validate)
            self.kinesis = self.flow.kinesis
            watch_takeovers(cast(Any, self.db), self.flow.names, self.flow.ledger)
        self.tables = Tables.for_application(application)
        self.application, self.stream = application, stream
        self.clients: dict[str, SimClient] = {}  # joined, neither crashed nor gone
        self.gone: dict[str, SimClient] = {}  # crashed or left
        self.shards = sorted(s.shard_id for s in list_shards(cast(Any, self.kinesis), stream))
        if self.flow is None:
            self.kinesis.calls.clear()
            self.kinesis.per_second.clear()
        self.tracking = Tracking(frozenset(self.shards))
        self.ownership = Ownership(self._lease_fresh)
        self.calls_by_client: dict[str, int] = {}
        self._current: str | None = None  # the client whose event runs: its calls are counted as its
        self._queue: list[tuple[float, int, str, str]] = []
        self._serial = 0
        self._checked: tuple[tuple[int, int], bool] | None = None  # (the state checked, the result)
        self._settled: tuple[tuple[int, int, int], bool] | None = None
        self._changes = 0
        self._installed: Any = None
        self.db.meta.events.register("after-call.dynamodb", self._count_call)

    # -- the clock, installed while the cluster is open
    def __enter__(self) -> Cluster:
        self._installed = clock.installed(self.clock)
        self._installed.__enter__()
        for name, key in self.tables.with_keys():  # create_required_tables(), one table at a time
            create_table(cast(Any, self.db), name, key)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            for client in [*self.clients.values(), *self.gone.values()]:  # the simulation is over: drop the coroutines
                client.loop.stop(0.0)
        finally:
            self._installed.__exit__(kind, exc, tb)

    def _count_call(self, **kwargs: Any) -> None:
        if self._current is not None:
            self.calls_by_client[self._current] = self.calls_by_client.get(self._current, 0) + 1

    # -- operations
    def new_id(self) -> str:
        """A client ID as a generated one sorts: anywhere among the others."""
        return f"{self.rng.getrandbits(48):012x}"

    def join(self, client_id: str | None = None, offset: float | None = None) -> SimClient:
        """A client starts (``offset``: how far its wall clock is off; None: drawn within the cluster's skew)."""
        client_id = client_id or self.new_id()
        self._current = client_id
        if offset is None:
            offset = self.rng.uniform(-self.skew, self.skew) if self.skew else 0.0
        self.clock.offset = offset
        flow = self.flow
        try:
            client = SimClient(
                client_id, self.config, self.stream, self.application, self.kinesis, self.db, self._wanted_changed,
                self.clock.now + _SETUP_DEADLINE, self.latency,
                readers=None if flow is None else flow.readers,
                stats=None if flow is None else flow.stats(client_id, self.config.stats),
            )  # fmt: skip
        finally:
            self._current = None
            self.clock.offset = 0.0
        client.offset = offset
        self.clients[client_id] = client
        if flow is not None and self.records is not None:
            client.consumer = SimConsumer(
                client.runtime.delivery, flow.ledger.wrap(client_id, self.handler), lambda: self._wake(client),
                call=self.records, handle_time=self.handle_time, stats=client.runtime.stats,
                origin=Origin(self.stream, self.application, client_id),
            )  # fmt: skip
            self._wake(client)
        now, period = self.clock.now, self.config.shard_check_frequency
        client.next_tick = now + period
        self._schedule_round(client)
        self._schedule_beat(client, now if client.coordinator.heartbeat.asked else now + period)
        return client

    def start(self, clients: int, limit: float = 20.0) -> bool:
        """``clients`` clients join at once; run until every lease is with its client (False: not within
        ``limit`` seconds)."""
        for _ in range(clients):
            self.join()
        return self.run(limit, self.settled)

    def leave(self, client_id: str) -> None:
        """A clean stop: the loop wakes up at once, ends, and the coordinator leaves."""
        client = self.clients[client_id]
        client.coordinator.request_stop()
        client.round_at = self.clock.now
        self._push(self.clock.now, "round", client_id)

    def crash(self, client_id: str) -> None:
        """The process dies: no more rounds or heartbeats; its row stays until it ages."""
        client = self.clients.pop(client_id)
        client.pool.drop()
        client.round_at = client.beat_at = client.shards_at = client.consume_at = None
        if self.flow is not None:
            self.flow.ledger.crash(client_id)
        self.ownership.change(client_id, frozenset())
        self.gone[client_id] = client

    def split(self, shard_id: str) -> tuple[str, str]:
        """Split ``shard_id`` in the stream: it closes, and its two children are the ones to read once it is
        finished (read to its end: its owner's next read says so)."""
        children = self.kinesis.split(shard_id) if self.flow is None else self.flow.kinesis.split(self.stream, shard_id)
        self.shards = sorted({*self.shards, *children} - {shard_id})
        self.tracking.reshard(frozenset(self.shards))
        self._checked = None
        return children

    def _lease_fresh(self, client_id: str, shard: str) -> bool:
        client = self.clients.get(client_id)
        offset, self.clock.offset = self.clock.offset, client.offset if client else 0.0
        try:  # its lease, as it would judge it now (its heartbeat chain, on its clock)
            workers = client.pool.every_worker() if client is not None else []
            return any(w.shard_id == shard and w.lease.fresh() for w in workers)
        finally:
            self.clock.offset = offset

    def pause(self, client_id: str, seconds: float) -> None:
        """The process stops for ``seconds`` (a long GC pause, a frozen VM): none of its events runs until then,
        and its clock, when it resumes, has moved on."""
        client = self.clients[client_id]
        client.paused_until = self.clock.now + seconds

    def live(self) -> list[str]:
        """The clients that run and are not stopping, sorted: the leader first."""
        return sorted(cid for cid, c in self.clients.items() if not c.pool.stopping)

    # -- the event loop
    def _push(self, at: float, kind: str, client_id: str) -> None:
        self._serial += 1
        heapq.heappush(self._queue, (at, self._serial, kind, client_id))

    def _schedule_round(self, client: SimClient) -> None:
        client.round_at = client.coordinator.wakes_at(client.next_tick)
        self._push(client.round_at, "round", client.id)

    def _schedule_beat(self, client: SimClient, at: float) -> None:
        client.beat_at = at
        self._push(at, "beat", client.id)

    def run(self, seconds: float, until: Callable[[], bool] | None = None) -> bool:
        """Run the events of the next ``seconds``; with ``until``, stop at the first event after which it holds
        (True), else False once the time is up."""
        end = self.clock.now + seconds
        while self._queue and self._queue[0][0] <= end:
            at, _, kind, client_id = heapq.heappop(self._queue)
            if kind == "put":
                self.clock.now = max(self.clock.now, at)
                self._put(at)
                continue
            client = self.clients.get(client_id)
            if client is None or at != getattr(client, f"{kind}_at"):
                continue  # crashed, gone, or rescheduled since
            if at < client.paused_until:  # paused: it runs when the process resumes
                setattr(client, f"{kind}_at", client.paused_until)
                self._push(client.paused_until, kind, client_id)
                continue
            self.clock.now = max(self.clock.now, at)
            self._current = client_id
            self.clock.offset = client.offset
            calls = self.calls_by_client.get(client_id, 0)
            try:
                if kind == "round":
                    self._round(client)
                elif kind == "beat":
                    self._beat(client)
                elif kind == "leaving":
                    client.leaving_at = None
                elif kind == "consume":
                    self._consume(client)
                self._shards(client)
            finally:
                self._current = None
                self.clock.offset = 0.0
            if self.calls_by_client.get(client_id, 0) != calls:  # a write may have changed what it owns
                self.ownership.change(client_id, client.pool.owned())
            if until is not None and until():
                return True
        self.clock.now = max(self.clock.now, end)
        return until is not None and until()

    def _round(self, client: SimClient) -> None:
        coordinator = client.coordinator
        next_tick = coordinator.step(client.next_tick)
        if next_tick is None:  # the loop ends: the coordinator leaves, on the loop's thread
            coordinator.begin_leaving()  # then waits for the handoffs (_shards), then ends leaving
            client.round_at = None
            client.leaving_at = coordinator.handoff_deadline
            self._push(client.leaving_at, "leaving", client.id)
            if coordinator.heartbeat.asked:
                self._schedule_beat(client, self.clock.now)
            return
        client.rounds += 1
        client.next_tick = next_tick
        membership = client.runtime.membership
        self.false_silent += sum(1 for c in membership.heartbeats if c not in membership.live and c in self.clients)
        self._schedule_round(client)
        if coordinator.heartbeat.asked:
            self._schedule_beat(client, self.clock.now)

    def _shards(self, client: SimClient) -> None:
        """Run the client's shard workers and commits due now; a leaving client ends leaving once they all
        ended (or its handoff deadline came); schedule what is due next."""
        pool = client.pool
        pool.run_due(self.clock.now)
        coordinator = client.coordinator
        leaving = client.round_at is None and client.id in self.clients and pool.stopping
        if leaving and (pool.wait(self.clock.now) or self.clock.now >= coordinator.handoff_deadline):
            coordinator.end_leaving()
            pool.run_due(self.clock.now)
            client.beat_at = client.shards_at = client.leaving_at = None
            self.ownership.change(client.id, pool.owned())
            self.gone[client.id] = self.clients.pop(client.id)
            return
        at = pool.next_at()
        if at is not None and at != client.shards_at:
            client.shards_at = max(at, self.clock.now)
            self._push(client.shards_at, "shards", client.id)

    def _beat(self, client: SimClient) -> None:
        next_beat = client.coordinator.heartbeat.step()
        client.beat_at = None
        if next_beat is not None:
            self._schedule_beat(client, next_beat)

    # -- records
    def produce(self, rate: float, keys: int = 100, interval: float = 0.1) -> None:
        """From now on, put ``rate`` records a second (a PutRecords every ``interval`` seconds) of ``keys``
        partition keys, until :meth:`stop_producing`."""
        assert self.flow is not None, "Cluster(records=...): the stream keeps no records"
        self.flow.rate, self.flow.keys, self.flow.interval = rate, keys, interval
        self._push(self.clock.now, "put", "")

    def stop_producing(self) -> None:
        assert self.flow is not None
        self.flow.rate = 0.0

    def _put(self, at: float) -> None:
        flow = self.flow
        if flow is None or not flow.rate:
            return
        flow.put(self.stream, at)
        self._push(at + flow.interval, "put", "")

    def _wake(self, client: SimClient) -> None:
        """Records were queued for ``client``'s caller, which waits for them: it steps now."""
        if client.consume_at is None and client.id in self.clients:
            client.consume_at = self.clock.now
            self._push(self.clock.now, "consume", client.id)

    def _consume(self, client: SimClient) -> None:
        client.consume_at = None
        if client.consumer is None:
            return
        at = client.consumer.step(self.clock.now)
        if at is not None and client.consume_at is None:
            client.consume_at = at
            self._push(at, "consume", client.id)

    def drained(self) -> bool:
        """Every record put was handled (at least once)."""
        return self.flow is not None and self.flow.ledger.distinct >= self.flow.put_count

    def report(self) -> Report:
        """The ledger's checks of the handlings against the records put."""
        assert self.flow is not None
        return self.flow.ledger.report(self.flow.kinesis.records(self.stream))

    # -- what the clients want
    def _wanted_changed(self, client_id: str, old: frozenset[str], new: frozenset[str]) -> None:
        self.tracking.change(old, new)
        self._changes += 1

    def owners(self) -> dict[str, str]:
        """Shard -> the live client that wants it (one of them, if two do)."""
        return {shard: cid for cid in self.live() for shard in self.clients[cid].wanted}

    def leader_ok(self) -> bool:
        """The first live client leads, and no other live client does."""
        live = self.live()
        return not live or (self.clients[live[0]].leading and not any(self.clients[c].leading for c in live[1:]))

    def converged(self) -> bool:
        """Every shard is wanted by exactly one live client, as the assignment for the live clients gives it
        (modulo: exactly; balanced: max - min <= 1), and the first live client leads."""
        tracking = self.tracking
        if tracking.doubled or tracking.covered != len(self.shards) or not self.leader_ok():
            return False
        key = (self._changes, len(self.live()))
        if self._checked is None or self._checked[0] != key:
            self._checked = (key, self._assignment_holds())
        return self._checked[1]

    def settled(self) -> bool:
        """:meth:`converged`, and each live client holds the lease of exactly the shards it wants (so every
        handoff is done), and no other client holds one."""
        if not self.converged():
            return False
        key = (self._changes, self.ownership.changes, len(self.clients))
        if self._settled is None or self._settled[0] != key:
            live = set(self.live())
            held = self.ownership.held
            holds = all(held.get(c, frozenset()) == (self.clients[c].wanted if c in live else frozenset())
                        for c in self.clients)  # fmt: skip
            self._settled = (key, holds)
        return self._settled[1]

    def _assignment_holds(self) -> bool:
        live = self.live()
        wanted = [self.clients[cid].wanted for cid in live]
        if any(not w <= self.tracking.shards for w in wanted):
            return False
        if self.config.assignment == "modulo":
            return all(w == frozenset(assigned_shards(self.shards, i, len(live))) for i, w in enumerate(wanted))
        sizes = [len(w) for w in wanted]
        return max(sizes) - min(sizes) <= 1
