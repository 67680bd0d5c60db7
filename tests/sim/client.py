"""One simulated client: kinsumer's own Runtime and Coordinator, built as ``Kinsumer.run()`` builds them, driven
by the cluster's event loop (:mod:`.cluster`) instead of their threads.

What is kinsumer's own: ``run()``'s first calls (the tables' readiness, the stream's identity, the home stream),
the :class:`~kinsumer.coordination.runtime.Runtime`, the :class:`~kinsumer.coordination.coordinator.Coordinator`
with its :class:`~kinsumer.coordination.heartbeat.Heartbeat` and :class:`~kinsumer.coordination.leader.Leader`,
started with ``start(threads=False)``; the loops' wake-ups are their own ``step()``. What is not: the shard
pool. :class:`RecordingPool` records what each round assigns (``assign(wanted, parents)``) and starts no shard
worker: no lease is captured, no checkpoint committed, nothing read (the next step of issue 40).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kinsumer.aws.kinesis import ensure_stream_active
from kinsumer.aws.tables import Tables, ensure_tables_ready
from kinsumer.config import Config
from kinsumer.coordination.coordinator import Coordinator
from kinsumer.coordination.home_stream import establish_home_stream
from kinsumer.coordination.runtime import Runtime
from kinsumer.coordination.shard_worker import ShardWorker
from kinsumer.coordination.streams import StreamScope
from kinsumer.delivery.delivery import Delivery
from kinsumer.errors import KinsumerError
from kinsumer.stats import GuardedStats

__all__ = ["RecordingPool", "SimClient"]

#: Told (client ID, shards wanted before, after) when a client's wanted shards change.
OnChange = Callable[[str, frozenset[str], frozenset[str]], None]


class RecordingPool:
    """The coordinator's pool, minus the shard workers: the shards the last round wanted."""

    def __init__(self, client_id: str, on_change: OnChange) -> None:
        self._client_id = client_id
        self._on_change = on_change
        self.wanted: frozenset[str] = frozenset()
        self.assigns = 0  # rounds that assigned
        self.stopping = False

    def workers(self) -> list[ShardWorker]:
        return []

    def assign(self, wanted: list[str], parents: Mapping[str, tuple[str, ...]]) -> None:
        if self.stopping:
            return
        self.assigns += 1
        new = frozenset(wanted)
        if new != self.wanted:
            old, self.wanted = self.wanted, new
            self._on_change(self._client_id, old, new)

    def request_stop(self) -> None:
        """A clean stop: every shard handed off at once (no worker to wait for)."""
        self.stopping = True
        self.drop()

    def drop(self) -> None:
        """The client wants nothing any more (it stops, or crashed)."""
        if self.wanted:
            old, self.wanted = self.wanted, frozenset()
            self._on_change(self._client_id, old, self.wanted)

    def wait(self, deadline: float) -> bool:
        return True

    def join(self, deadline: float) -> list[str]:
        return []


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
    ) -> None:
        self.id = client_id
        self.errors: list[KinsumerError] = []
        tables = Tables.for_application(application)
        ensure_tables_ready(dynamodb, tables)  # run()'s first calls, in its order
        identity = ensure_stream_active(kinesis, stream)
        home = establish_home_stream(dynamodb, tables, stream)
        stats = GuardedStats(config.stats)
        self.runtime = Runtime(
            kinesis=kinesis, dynamodb=dynamodb, streams=(StreamScope(stream, identity, home == stream),),
            tables=tables, config=config, client_id=client_id, client_name=f"sim-{client_id}",
            delivery=Delivery(config.buffer_size, stats, config.max_buffered_bytes), stats=stats,
            on_fatal=self._on_fatal,
        )  # fmt: skip
        self.pool = RecordingPool(client_id, on_change)
        self.coordinator = Coordinator(self.runtime, pool=self.pool)
        self.runtime.request_refresh = self.coordinator.request_refresh
        self.coordinator.start(setup_deadline, threads=False)
        #: When the coordinator's next round is due, and when its loop and its heartbeat wake up next
        #: (monotonic; None: not scheduled). Kept by the cluster, as the two loops keep them.
        self.next_tick = 0.0
        self.round_at: float | None = None
        self.beat_at: float | None = None
        self.rounds = 1  # the first, in start()

    def _on_fatal(self, error: KinsumerError) -> None:  # as Kinsumer's: stop
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
