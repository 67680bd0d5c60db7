"""One simulated client: kinsumer's own Runtime and Coordinator, built as ``Kinsumer.run()`` builds them, driven
by the cluster's event loop (:mod:`.cluster`) instead of their threads.

What is kinsumer's own: ``run()``'s first calls (the tables' readiness, the stream's identity, the home stream),
the :class:`~kinsumer.coordination.runtime.Runtime`, the :class:`~kinsumer.coordination.coordinator.Coordinator`
with its :class:`~kinsumer.coordination.heartbeat.Heartbeat` and :class:`~kinsumer.coordination.leader.Leader`,
started with ``start(threads=False)``; the loops' wake-ups are their own ``step()``; the
:class:`~kinsumer.coordination.shard_pool.ShardPool` (:class:`SimPool`: it also tells the cluster what each
round wants) with its shard workers on a :class:`~.shard_loop.SimShardLoop` and its commit clock run by the
cluster (``threads=False``). What is not: the readers (:mod:`.reader`: an idle stream).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kinsumer import clock
from kinsumer.aws.kinesis import ensure_stream_active
from kinsumer.aws.tables import Tables, ensure_tables_ready
from kinsumer.config import Config
from kinsumer.coordination.coordinator import Coordinator
from kinsumer.coordination.home_stream import establish_home_stream
from kinsumer.coordination.lease import LeaseState
from kinsumer.coordination.runtime import Runtime
from kinsumer.coordination.shard_pool import ShardPool
from kinsumer.coordination.streams import StreamScope
from kinsumer.delivery.delivery import Delivery
from kinsumer.errors import KinsumerError
from kinsumer.reading.reader import ReaderFactory
from kinsumer.stats import GuardedStats, StatReceiver
from tests.sim.consumer import SimConsumer
from tests.sim.reader import sim_readers
from tests.sim.shard_loop import SimShardLoop

__all__ = ["SimClient", "SimPool"]

#: Told (client ID, shards wanted before, after) when a client's wanted shards change.
OnChange = Callable[[str, frozenset[str], frozenset[str]], None]


class SimPool(ShardPool):
    """kinsumer's :class:`~kinsumer.coordination.shard_pool.ShardPool` on a :class:`~.shard_loop.SimShardLoop`,
    its commit clock driven by the cluster; it tells the cluster what each round wants (``assign``)."""

    def __init__(self, runtime: Runtime, readers: ReaderFactory, loop: SimShardLoop, on_change: OnChange) -> None:
        super().__init__(runtime, {scope.name: readers for scope in runtime.streams}, loop=loop, threads=False)
        self.sim_loop = loop
        self._client_id = runtime.client_id
        self._on_change = on_change
        self.wanted: frozenset[str] = frozenset()
        self.assigns = 0  # rounds that assigned
        self.stopping = False

    def assign(self, wanted: list[str], parents: Mapping[str, tuple[str, ...]]) -> None:
        if not self.stopping:
            self.assigns += 1
            self._want(frozenset(wanted))
        super().assign(wanted, parents)

    def request_stop(self) -> None:
        """A clean stop: the client wants nothing more; its workers hand off."""
        self.stopping = True
        self._want(frozenset())
        super().request_stop()

    def drop(self) -> None:
        """The client crashed: it wants nothing more, and its coroutines never run again."""
        self.stopping = True
        self._want(frozenset())

    def _want(self, new: frozenset[str]) -> None:
        if new != self.wanted:
            old, self.wanted = self.wanted, new
            self._on_change(self._client_id, old, new)

    def owned(self) -> frozenset[str]:
        """The shards whose lease this client holds now (captured, neither released nor lost)."""
        return frozenset(w.shard_id for w in self.every_worker() if w.lease.state is LeaseState.OWNED)

    def next_at(self) -> float | None:
        """When this client's shard loop or commit clock has something due next (monotonic; None: nothing)."""
        times = [t for t in (self.sim_loop.next_at(), self.committer.next_due()) if t is not None]
        return min(times, default=None)

    def run_due(self, now: float) -> None:
        """Run what is due at ``now``: the commit clock's round, the workers' coroutines."""
        self.sim_loop.run_due()
        due = self.committer.next_due()
        if due is not None and due <= now:
            self.committer.step()
            self.sim_loop.run_due()


class SimClient:
    """A client's runtime, coordinator and pool, and when its loops wake up next (monotonic, virtual)."""

    def __init__(
        self,
        client_id: str,
        config: Config,
        stream: str,
        application: str,
        kinesis: Any,
        dynamodb: Any,
        on_change: OnChange,
        setup_deadline: float,
        latency: float = 0.0,
        *,
        readers: Callable[[Runtime], ReaderFactory] | None = None,
        stats: StatReceiver | None = None,
    ) -> None:
        """``readers``: the client's shard readers, made of its runtime (None: an idle stream's,
        :mod:`.reader`); ``stats``: its receiver (None: ``config.stats``)."""
        self.id = client_id
        self.errors: list[KinsumerError] = []
        tables = Tables.for_application(application)
        ensure_tables_ready(dynamodb, tables)  # run()'s first calls, in its order
        identity = ensure_stream_active(kinesis, stream)
        home = establish_home_stream(dynamodb, tables, stream)
        stats = GuardedStats(config.stats if stats is None else stats)
        self.runtime = Runtime(
            kinesis=kinesis, dynamodb=dynamodb, streams=(StreamScope(stream, identity, home == stream),),
            tables=tables, config=config, client_id=client_id, client_name=f"sim-{client_id}",
            delivery=Delivery(config.buffer_size, stats, config.max_buffered_bytes), stats=stats,
            on_fatal=self._on_fatal,
        )  # fmt: skip
        self.loop = SimShardLoop(clock.monotonic, latency)
        factory = sim_readers(kinesis, self.runtime.reader_settings) if readers is None else readers(self.runtime)
        self.pool = SimPool(self.runtime, factory, self.loop, on_change)
        self.coordinator = Coordinator(self.runtime, pool=self.pool)
        self.runtime.request_refresh = self.coordinator.request_refresh
        self.coordinator.start(setup_deadline, threads=False)
        #: When the coordinator's next round is due, and when its loop and its heartbeat wake up next
        #: (monotonic; None: not scheduled). Kept by the cluster, as the two loops keep them.
        self.next_tick = 0.0
        self.round_at: float | None = None
        self.beat_at: float | None = None
        self.offset = 0.0  # how far its wall clock is off (seconds)
        self.paused_until = 0.0  # its process is stopped until then (monotonic)
        self.shards_at: float | None = None  # the shard loop's or the commit clock's next due time
        self.leaving_at: float | None = None  # leaving: the handoffs' deadline
        self.consume_at: float | None = None  # its caller's next step (records flowing: :mod:`.consumer`)
        self.consumer: SimConsumer | None = None  # its caller (records flowing), set by the cluster
        self.rounds = 1  # the first, in start()

    def _on_fatal(self, error: KinsumerError) -> None:  # as RunningClient's: stop
        self.errors.append(error)
        coordinator: Coordinator | None = getattr(self, "coordinator", None)
        if coordinator is not None:
            coordinator.request_stop()

    @property
    def wanted(self) -> frozenset[str]:
        return self.pool.wanted

    @property
    def leading(self) -> bool:
        return self.coordinator.is_leader
