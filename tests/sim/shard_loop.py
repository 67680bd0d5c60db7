"""A client's shard loop on virtual time: kinsumer's shard workers run as they do in production, without a thread.

:class:`VirtualLoop` is an asyncio event loop whose clock is the simulation's: its timers (a worker's pause
between capture polls, an idle shard's next read, a handoff's deadline, ``asyncio.timeout``) fall due when
the virtual clock reaches them, and the cluster (:mod:`.cluster`) runs them then (:meth:`VirtualLoop.run_due`),
in order with the other clients' events. :class:`SimShardLoop` is :class:`~kinsumer.reading.shard_loop.ShardLoop`
on that loop: ``spawn`` makes a task, ``io`` runs the call on the loop's thread (the simulation's: no pool), at
once or, with a ``latency``, that many virtual seconds later while the other workers go on (the call's effect
lands at the end), ``poke`` is the production :class:`~kinsumer.reading.shard_loop.Poke`.

The loop steps through asyncio's own ``_run_once`` (``run_forever`` with a stop queued runs one iteration)
and looks at its ``_ready`` and ``_scheduled`` queues: private, and stable since Python 3.4.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import heapq
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from kinsumer.reading.shard_loop import Poke, ShardLoop

__all__ = ["SimShardLoop", "VirtualLoop"]

T = TypeVar("T")


class VirtualLoop(asyncio.SelectorEventLoop):
    """An event loop whose ``time()`` is ``now()`` (virtual seconds), run a step at a time by its owner."""

    def __init__(self, now: Callable[[], float]) -> None:
        super().__init__()
        self._now = now

    def time(self) -> float:
        return self._now()

    def next_at(self) -> float | None:
        """When something is due next: now if a callback is ready, else the first live timer; None: nothing."""
        if self._ready:  # type: ignore[attr-defined]
            return self._now()
        scheduled = self._scheduled  # type: ignore[attr-defined]
        while scheduled and scheduled[0].cancelled():  # what _run_once would drop first
            heapq.heappop(scheduled)
            self._timer_cancelled_count -= 1  # type: ignore[attr-defined]
        return float(scheduled[0].when()) if scheduled else None

    def run_due(self) -> None:
        """Run every callback ready and every timer due at the current virtual time, and what they make
        ready in turn, until nothing is due before the clock moves."""
        while (at := self.next_at()) is not None and at <= self._now():
            self.call_soon(self.stop)
            self.run_forever()


class SimShardLoop(ShardLoop):
    """:class:`~kinsumer.reading.shard_loop.ShardLoop`'s interface on a :class:`VirtualLoop`, without threads."""

    def __init__(self, now: Callable[[], float], latency: float = 0.0) -> None:
        self.virtual = VirtualLoop(now)
        self.loop = self.virtual
        self.tasks: set[asyncio.Task[None]] = set()  # the workers' coroutines under way (held: not collected)
        self.latency = latency  # virtual seconds each call of a worker takes (its effect lands at the end)

    def start(self) -> None:
        pass

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> concurrent.futures.Future[None]:
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.tasks.add(task := self.loop.create_task(coroutine))

        def done(task: asyncio.Task[None]) -> None:
            self.tasks.discard(task)
            error = None if task.cancelled() else task.exception()
            future.set_exception(error) if error is not None else future.set_result(None)

        task.add_done_callback(done)
        return future

    async def io(self, fn: Callable[[], T], *, first: bool = False) -> T:
        if self.latency:  # the other workers' calls run meanwhile, as in the production pool
            await asyncio.sleep(self.latency)
        return fn()

    def poke(self) -> Poke:
        return Poke(self.loop)

    def stop(self, timeout: float) -> bool:
        """Close the loop (a crashed client's: its coroutines are dropped where they wait)."""
        for task in asyncio.all_tasks(self.loop):  # the workers' and any other (a batch of row reads)
            task.cancel()
        self.run_due()
        self.loop.close()
        return True

    def run_due(self) -> None:
        self.virtual.run_due()

    def next_at(self) -> float | None:
        return self.virtual.next_at()
