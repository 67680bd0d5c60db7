"""The shard workers of one client, the loop they run on, and their commit clock.

The coordinator tells the pool which shards this client is assigned; the pool starts a
worker for each new one and asks the workers of shards no longer assigned to hand off.
Workers end by themselves; a shard being handed off is not started again until its old
worker is done. The pool owns the :class:`~kinsumer.reading.shard_loop.ShardLoop` and the committer and
stops them after the last worker.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from .. import clock
from ..reading.polling import polling_readers
from ..reading.reader import OutsideRule, ReaderFactory
from ..reading.shard_loop import ShardLoop
from .committer import Committer
from .row_reads import RowReads
from .runtime import Runtime
from .shard_worker import ShardWorker
from .streams import StreamScope, scope_stats

__all__ = ["ShardPool"]

log = logging.getLogger("kinsumer.coordinator")

_COMMITTER_STOP = 5.0  # seconds to wait for a commit under way at the very end


class ShardPool:
    """Starts, hands off and joins the workers of the shards assigned to this client."""

    def __init__(
        self,
        runtime: Runtime,
        readers: Mapping[str, ReaderFactory] | None = None,
        *,
        loop: ShardLoop | None = None,
        threads: bool = True,
    ) -> None:
        """``loop``: where the workers run (None: a :class:`ShardLoop` of ``reader_threads``, started here).
        ``threads=False`` (the simulator, ``tests/sim``): the given loop is driven by the caller, and so is the
        commit clock (:attr:`committer`'s ``step``)."""
        self._rt = runtime
        readers = readers or {}
        #: Each stream's readers (by stream name): the given ones, else polling.
        self._readers = {
            scope.name: readers.get(scope.name)
            or polling_readers(
                runtime.kinesis, scope.ref, runtime.reader_settings, scope_stats(runtime.stats, scope),
                OutsideRule.listing(runtime.kinesis, scope.ref, runtime.config.kpl_outside_shard),
            )
            for scope in runtime.streams
        }
        self._committer = Committer(runtime, threads=threads)
        self._loop = loop if loop is not None else ShardLoop(runtime.config.reader_threads)
        self._rows = RowReads(runtime, self._loop)
        self._lock = threading.Lock()  # guards the worker maps
        self._workers: dict[str, ShardWorker] = {}
        self._retiring: list[ShardWorker] = []
        self._stopping = False
        self._committer.start()
        self._loop.start()

    @property
    def committer(self) -> Committer:
        """The commit clock of this client's shards."""
        return self._committer

    def workers(self) -> list[ShardWorker]:
        """The workers of the shards this client is assigned, by shard ID."""
        with self._lock:
            return [self._workers[shard] for shard in sorted(self._workers)]

    def every_worker(self) -> list[ShardWorker]:
        """The workers of the shards assigned, and those still handing off."""
        with self._lock:
            return [*self._workers.values(), *self._retiring]

    def assign(self, wanted: list[str], parents: Mapping[str, tuple[str, ...]]) -> None:
        """Hand off the shards no longer wanted, start workers for the new ones."""
        with self._lock:
            if self._stopping:
                return
            for shard_id, worker in list(self._workers.items()):
                if not worker.is_alive():  # finished, fenced off, or failed
                    del self._workers[shard_id]
                elif shard_id not in wanted:
                    worker.request_stop()
                    self._retiring.append(worker)
                    del self._workers[shard_id]
            self._retiring = [w for w in self._retiring if w.is_alive()]
            busy = {w.shard_id for w in self._retiring}
            started = []
            for shard_id in wanted:
                if shard_id not in self._workers and shard_id not in busy:
                    scope = self._scope(shard_id)
                    worker = ShardWorker(
                        self._rt, shard_id, parents.get(shard_id, ()), self._committer, self._readers[scope.name],
                        self._loop, scope, self._rows,
                    )  # fmt: skip
                    self._workers[shard_id] = worker
                    worker.start()
                    started.append(shard_id)
            count = len(self._workers)
        if started:
            log.info("assigned %s; now reading %d shards", started, count)

    def _scope(self, key: str) -> StreamScope:
        """The stream of a shard's key (one this client lists: the assignment has no other)."""
        return next(scope for scope in self._rt.streams if scope.shard_id(key) is not None)

    def request_stop(self) -> None:
        """Hand every shard off; start no more workers."""
        with self._lock:
            self._stopping = True
            workers = list(self._workers.values())
        for worker in workers:
            worker.request_stop()

    def wait(self, deadline: float) -> bool:
        """Wait until every worker ended (True) or ``deadline`` (monotonic) passed (False)."""
        workers = self.every_worker()
        for worker in workers:
            worker.join(max(0.0, deadline - clock.monotonic()))
        return not any(w.is_alive() for w in workers)

    def join(self, deadline: float) -> list[str]:
        """Wait for every worker, then stop the committer; the shards whose worker is still running."""
        workers = self.every_worker()
        for worker in workers:
            worker.join(max(0.0, deadline - clock.monotonic()))
        alive = [w.shard_id for w in workers if w.is_alive()]
        self._committer.stop(0.0 if alive else min(_COMMITTER_STOP, max(0.0, deadline - clock.monotonic())))
        if not alive:
            self._loop.stop(max(0.0, deadline - clock.monotonic()))
        return alive
