"""The commit clock: one thread per client commits its owned shards when due.

Commits store each shard's checkpoint (the contiguous prefix of processed records), at most
every ``commit_frequency`` and only when it moved, or confirm a lease after a late heartbeat. Each
period the age of each shard's oldest record in hand goes to the stats (``StatReceiver.record_age``).
They run here, on their own clock and threads (a thread per :data:`WRITES_PER_LANE` commits due
together, up to :data:`COMMIT_THREADS`, so a round of hundreds of busy shards fits in a period and
one of a few dozen holds few threads), never behind a reader's call or inside a push waiting for
room. What a commit stores is asked of the shard under its lease's lock, so of two commits racing
the later stores the later checkpoint. A commit that finds the shard owned by another client tells
the shard's worker, which drops the shard at once.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import logging
import math
import threading
from typing import Protocol

from .. import clock
from ..aws.retry import Stopped
from ..aws.tables import now_ms
from ..reading.shard_loop import ThreadPool
from ..waiting import join_thread
from .commit_schedule import CommitSchedule
from .lease import Commit, ShardLease
from .runtime import Runtime

__all__ = ["COMMIT_THREADS", "WRITES_PER_LANE", "Commit", "Committable", "Committer"]

log = logging.getLogger("kinsumer.commits")

#: Commits under way at once, at most.
COMMIT_THREADS = 8
#: A round of commits goes on one more thread per this many writes (up to COMMIT_THREADS): a client
#: of a few dozen busy shards commits on a few threads, one of hundreds on all of them.
WRITES_PER_LANE = 8


class Committable(Protocol):
    """What the committer needs of a shard's worker."""

    @property
    def shard_id(self) -> str: ...

    @property
    def lease(self) -> ShardLease: ...

    def to_commit(self) -> Commit:
        """What to store now."""
        ...

    def ownership_lost(self) -> None:
        """A commit found the shard owned by another client."""
        ...


class Committer:
    """Commits every registered shard each ``commit_frequency`` on a thread of its own."""

    def __init__(self, runtime: Runtime, *, threads: bool = True) -> None:
        """``threads=False`` (the simulator, ``tests/sim``): no thread; the caller runs :meth:`step` when
        :meth:`next_due` comes, and every write runs on the caller's thread."""
        self._rt = runtime
        self._threads = threads
        self._cond = threading.Condition()
        self._schedule = CommitSchedule(runtime.config.commit_frequency)
        self._shards: dict[str, Committable] = {}
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="kinsumer-commits", daemon=True)
        self._pool = ThreadPool(COMMIT_THREADS, "kinsumer-commit")

    def start(self) -> None:
        if self._threads:
            self._thread.start()

    def add(self, shard: Committable) -> None:
        """Commit ``shard`` from one period from now on."""
        with self._cond:
            self._shards[shard.shard_id] = shard
            self._schedule.add(shard.shard_id, clock.monotonic())
            self._cond.notify()

    def remove(self, shard: Committable) -> None:
        """No more commits of ``shard`` (a commit under way ends first: the lease serialises them)."""
        with self._cond:
            if self._shards.get(shard.shard_id) is shard:
                del self._shards[shard.shard_id]
                self._schedule.remove(shard.shard_id)

    def stop(self, timeout: float) -> None:
        """End the thread once the commit under way (if any) is done. Idempotent."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.ident is not None:
            join_thread(self._thread, timeout)
        self._pool.shutdown()

    def submit(self, shard: Committable, deadline: float) -> concurrent.futures.Future[bool | None]:
        """:meth:`commit` on the committer's threads (a worker confirming its lease); None once stopped."""
        if not self._threads:
            return _resolved(None if self._stopping else self.commit(shard, deadline))
        try:
            return self._pool.submit(functools.partial(self.commit, shard, deadline))
        except RuntimeError:  # shut down: the client is stopping
            return _resolved(None)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopping:
                    now, next_due = clock.monotonic(), self._schedule.next_due()
                    if next_due is not None and next_due <= now:
                        break
                    self._cond.wait(None if next_due is None else next_due - now)
                if self._stopping:
                    return
            self.step()

    def next_due(self) -> float | None:
        """When the next commit is due (monotonic); None with no shard, or once stopped."""
        with self._cond:
            return None if self._stopping else self._schedule.next_due()

    def step(self) -> None:
        """One round of the clock: the commits due now, the idle ones skipped without a write."""
        with self._cond:
            now = clock.monotonic()
            batch = []
            for shard_id in self._schedule.due(now):
                self._schedule.started(shard_id, now)
                batch.append(self._shards[shard_id])
        plans = [(shard, shard.to_commit()) for shard in batch]
        self._report_ages(plans)
        writes = [s for s, c in plans if s.lease.needs_commit(c)]  # most are idle
        if writes:
            self._round(writes, now + self._schedule.period)

    def _report_ages(self, plans: list[tuple[Committable, Commit]]) -> None:
        """The age of the oldest record in hand of each shard of the round, to the stats (once a period)."""
        now = now_ms()
        record_age = self._rt.stats.record_age
        for shard, commit in plans:
            arrival = commit.oldest_arrival
            record_age(shard.shard_id, None if arrival is None else max(0, now - arrival) / 1000)

    def _round(self, writes: list[Committable], deadline: float) -> None:
        """The writes of one round, side by side: one lane per :data:`WRITES_PER_LANE` writes (at most
        :data:`COMMIT_THREADS`), each taking the next write left; this thread is one of the lanes. The
        next round starts after this one."""
        left = collections.deque(writes)

        def lane() -> None:
            while True:
                try:
                    shard = left.popleft()
                except IndexError:
                    return
                self._write(shard, deadline)

        lanes = min(COMMIT_THREADS, math.ceil(len(writes) / WRITES_PER_LANE)) if self._threads else 1
        futures = [self._pool.submit(lane) for _ in range(lanes - 1)]
        lane()
        concurrent.futures.wait(futures)

    def commit(self, shard: Committable, deadline: float, stop: threading.Event | None = None) -> bool | None:
        """One commit of ``shard``, its transient faults retried until ``deadline`` (monotonic), or
        until ``stop`` is set.

        True: the lease is confirmed (or was released: nothing to write). False: another client owns
        the shard (its worker is told). None: the commit failed (or ``stop`` came first); a transient
        fault is counted and left to the next try, anything else stops the consumer. The clock calls
        it when a commit is due; a worker calls it to confirm a lease that is not fresh, and
        ``process()`` for a new reservation of the crash-loop guard.
        """
        return self._write(shard, deadline, stop)

    def _write(self, shard: Committable, deadline: float, stop: threading.Event | None = None) -> bool | None:
        """:meth:`commit` (what to store is asked of the shard under its lease's lock)."""
        try:
            call = self._rt.call_until(deadline, stop)
            owned = shard.lease.commit(shard.to_commit, call)
        except Stopped:
            return None
        except Exception as exc:  # noqa: BLE001 - transient: next time; anything else stops the consumer
            if not self._rt.retry_later(exc, f"the commit of {shard.shard_id}"):
                self._rt.fail(exc, f"the commit of {shard.shard_id}")
            return None
        if not owned:
            shard.ownership_lost()
        return owned


def _resolved(result: bool | None) -> concurrent.futures.Future[bool | None]:
    """A future that is done already, with ``result``."""
    future: concurrent.futures.Future[bool | None] = concurrent.futures.Future()
    future.set_result(result)
    return future
