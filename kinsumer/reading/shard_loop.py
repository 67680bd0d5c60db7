"""Where the shard workers of one client run: one event loop, and a bounded pool for blocking calls.

Each owned shard is a coroutine (:class:`~.shard_worker.ShardWorker`) on one event loop
thread. Its waits (the throttle between reads, an idle shard's longer pause, room in the
queue, acknowledgements during a handoff, a live owner's release) are timers and wake-ups on
that loop, not threads asleep. Its AWS calls and the parsing of their answers run on a pool of
at most ``threads`` threads, started as they are needed: the threads of a client do not grow
with its shards (an idle shard holds none; a busy one holds one while its call is under way).

Whoever makes the loop stops it (:meth:`ShardLoop.stop`), after the last worker ended.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ..config import DEFAULT_THREADS
from ..waiting import join_thread

__all__ = ["Poke", "ShardLoop", "ThreadPool"]

log = logging.getLogger("kinsumer.coordinator")
T = TypeVar("T")

_IDLE_THREAD = 10.0  # seconds a pool thread waits for a call before it ends


class ShardLoop:
    """An event loop on a thread of its own, and the pool its coroutines run blocking calls in."""

    def __init__(
        self, threads: int = DEFAULT_THREADS, name: str = "kinsumer-shards", pool: str = "kinsumer-io"
    ) -> None:
        self.loop = asyncio.new_event_loop()
        self._pool = ThreadPool(threads, pool)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = threading.Event()

    def start(self) -> None:
        self._thread.start()
        self._started.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        try:
            self.loop.run_forever()
        finally:
            # what is left (a batch of row reads its shards stopped waiting for) is cancelled and
            # let end, as asyncio.run does, not destroyed pending with the loop
            left = asyncio.all_tasks(self.loop)
            for task in left:
                task.cancel()
            with contextlib.suppress(Exception):
                self.loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            with contextlib.suppress(Exception):
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> concurrent.futures.Future[None]:
        """Run ``coroutine`` on the loop (from any thread)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    async def io(self, fn: Callable[[], T], *, first: bool = False) -> T:
        """``fn()`` on the pool (from the loop): a blocking call, or parsing. ``first``: ahead of the calls
        waiting for a thread (a lease's writes: a handoff does not wait behind reads of a slow Kinesis)."""
        return await asyncio.wrap_future(self._pool.submit(fn, first=first), loop=self.loop)

    def poke(self) -> Poke:
        """A wake-up for one coroutine of this loop (see :class:`Poke`)."""
        return Poke(self.loop)

    def stop(self, timeout: float) -> bool:
        """End the loop and the pool (the workers have ended). Idempotent; False if it did not end in time."""
        if self._thread.ident is None:
            self._pool.shutdown()
            return True
        with contextlib.suppress(RuntimeError):  # already closed
            self.loop.call_soon_threadsafe(self.loop.stop)
        ended = join_thread(self._thread, timeout)
        self._pool.shutdown()
        if not ended:
            log.warning("the shard loop did not end within %.1f s", timeout)
        return ended


class Poke:
    """Wakes one coroutine waiting on the loop, from any thread: "something changed, look again".

    Pokes coalesce: many before the coroutine looks again wake it once. The coroutine clears
    the poke, checks what it waits for, and only then waits, so a change after the check is
    never missed.
    """

    __slots__ = ("_event", "_loop", "_pending")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._event = asyncio.Event()
        self._pending = False

    def __call__(self) -> None:
        """Wake the coroutine (from any thread)."""
        if self._pending:
            return
        self._pending = True
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            self._loop.call_soon_threadsafe(self._set)

    def _set(self) -> None:
        self._pending = False
        self._event.set()

    def clear(self) -> None:
        """Before checking: a poke from now on ends the next wait at once."""
        self._event.clear()

    async def wait(self, timeout: float | None) -> None:
        """Until poked, or ``timeout`` seconds (None: no limit)."""
        if timeout is None:
            await self._event.wait()
            return
        if timeout <= 0:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._event.wait()


class ThreadPool:
    """At most ``size`` threads running submitted calls, started as calls wait for one.

    The thread that went idle last takes the next call, so a few threads do the work of a light
    load and the others end after :data:`_IDLE_THREAD` seconds without a call. Unlike
    :class:`concurrent.futures.ThreadPoolExecutor`, it takes calls until its owner shuts it
    down, also while the interpreter exits: a program that ends without ``stop()`` still releases
    its shards from the exit hook (the executor refuses new calls once exit has begun).
    """

    def __init__(self, size: int, name: str) -> None:
        self._size = size
        self._name = name
        self._lock = threading.Lock()
        self._calls: collections.deque[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = collections.deque()
        self._idle: list[threading.Event] = []  # a wake-up per idle thread; the last one idle first
        self._threads = 0
        self._started = 0
        self._shut = False

    def submit(self, fn: Callable[[], T], *, first: bool = False) -> concurrent.futures.Future[T]:
        """Run ``fn()`` on a thread of the pool; ``first``: before the calls already waiting for one."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            if self._shut:
                raise RuntimeError(f"{self._name}: shut down")
            if first:
                self._calls.appendleft((fn, future))
            else:
                self._calls.append((fn, future))
            if self._idle:
                self._idle.pop().set()
            elif self._threads < self._size:
                self._threads += 1
                self._started += 1
                thread = threading.Thread(target=self._work, name=f"{self._name}-{self._started}", daemon=True)
                thread.start()
        return future

    def shutdown(self) -> None:
        """Take no more calls; the threads end once the calls queued are done."""
        with self._lock:
            self._shut = True
            for wake in self._idle:
                wake.set()
            self._idle.clear()

    def _work(self) -> None:
        wake = threading.Event()
        while True:
            with self._lock:
                if self._calls:
                    fn, future = self._calls.popleft()
                elif self._shut:
                    self._threads -= 1
                    return
                else:
                    wake.clear()
                    self._idle.append(wake)
                    fn = None
            if fn is None:
                if not wake.wait(_IDLE_THREAD):
                    with self._lock:
                        if wake in self._idle:  # not picked meanwhile: fewer threads while there is less to do
                            self._idle.remove(wake)
                            self._threads -= 1
                            return
                continue
            if future.set_running_or_notify_cancel():
                try:
                    result = fn()
                except BaseException as exc:  # noqa: BLE001 - handed to the caller
                    future.set_exception(exc)
                else:
                    future.set_result(result)
