"""The asyncio front end of :class:`~kinsumer.Kinsumer`: the same delivery, awaited without blocking the loop.

The shard readers, the coordination and boto3 keep their threads. Taking a record is a
non-blocking call into :class:`~kinsumer.delivery.delivery.Delivery`; when nothing is ready the
caller awaits a future that the thread queueing the next records resolves (through
``call_soon_threadsafe``). Records that are ready come one after another without a wait, so the
loop is given a turn at least every :data:`YIELD_EVERY` seconds.

Holders (whose record in hand counts as processed when they ask again):

- :meth:`AsyncFront.next_record` (``anext_record()``): the calling task. When the task ends, its
  record in hand counts as processed; when it is cancelled or fails, the record goes back (the
  shard's next owner delivers it).
- :class:`AsyncRecords` (``async for``): the loop itself. Leaving the loop by ``break``, an
  exception or a cancellation gives its record in hand back: ``async for`` acknowledges a record
  only when the loop comes back for the next one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from .delivery.delivery import Delivery
from .delivery.progress import Checkpointed, Stopped
from .errors import NoRecordWithin
from .handling.timeouts import HandlerTimedOut
from .record import Record

__all__ = ["YIELD_EVERY", "AsyncFront", "AsyncRecords", "HandlerCancelled", "LoopCalls"]

T = TypeVar("T")

#: Seconds of records handed over back to back, at most, before the loop gets a turn.
YIELD_EVERY = 0.001
_RETRY_MAX = 0.05  # seconds between two looks when records are queued yet this caller may not take them


class _LoopHolder:
    """The holder of one ``async for`` loop's records."""

    __slots__ = ("__weakref__",)


class AsyncFront:
    """Takes records from one consumer's delivery on behalf of asyncio tasks."""

    def __init__(self, delivery: Delivery) -> None:
        self._delivery = delivery
        self._watched: weakref.WeakSet[asyncio.Task[object]] = weakref.WeakSet()  # tasks whose end is noted
        self._turn = 0.0  # loop.time() when the loop last had a turn

    async def next_record(self, timeout: float | None) -> Record | None:
        """The next record for the calling task (auto mode); None once stopped."""
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("anext_record() must be awaited in an asyncio task")
        if task not in self._watched:
            self._watched.add(task)
            task.add_done_callback(self._task_ended)
        return await self.next_for(task, timeout)

    async def next_for(self, holder: object, timeout: float | None) -> Record | None:
        """The next record for ``holder`` (auto mode); None once stopped."""
        next_auto = self._delivery.next_auto
        return await self._take(lambda: next_auto(holder, 0.0), timeout)

    async def next_manual(self, timeout: float | None) -> Checkpointed[Record] | Stopped:
        """The next record and its Checkpoint (manual mode); STOPPED once stopped."""
        next_manual = self._delivery.next_manual
        return await self._take(lambda: next_manual(0.0), timeout)

    def records(self) -> AsyncRecords:
        return AsyncRecords(self)

    def forget(self, holder: object) -> None:
        """``holder`` (an ``async for`` left) takes no more records: its record in hand goes back."""
        self._delivery.give_back_later(holder)

    def _task_ended(self, task: asyncio.Task[object]) -> None:
        self._delivery.end_holder(task, processed=not _failed(task))

    async def _take(self, attempt: Callable[[], T], timeout: float | None) -> T:
        """``attempt()`` (which raises NoRecordWithin when nothing is ready) until it gives something,
        awaiting records in between; NoRecordWithin after ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        deadline = None if timeout is None else now + timeout
        retry = 0.0
        if now - self._turn >= YIELD_EVERY:  # records handed over back to back: the loop's turn first
            self._turn = now
            await asyncio.sleep(0)
        while True:
            try:
                return attempt()
            except NoRecordWithin:
                pass
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                raise NoRecordWithin(timeout if timeout is not None else 0.0)
            waiter: asyncio.Future[None] = loop.create_future()
            wake = _waker(loop, waiter)
            if self._delivery.when_ready(wake):
                retry = 0.0
                try:
                    await asyncio.wait_for(waiter, remaining)
                except TimeoutError:
                    pass
                finally:
                    self._delivery.forget_ready(wake)
            else:  # records are queued, yet this caller could not take one (their lease is unconfirmed)
                retry = min(_RETRY_MAX, max(0.001, retry * 2))
                await asyncio.sleep(retry if remaining is None else min(retry, remaining))
            self._turn = loop.time()


class AsyncRecords:
    """``async for record in consumer``: records until the consumer stops (see the module's description)."""

    def __init__(self, front: AsyncFront) -> None:
        self._front = front
        self._holder = _LoopHolder()
        weakref.finalize(self, front.forget, self._holder)  # the loop was left: its record in hand goes back
        self._done = False

    def __aiter__(self) -> AsyncIterator[Record]:
        return self

    async def __anext__(self) -> Record:
        if self._done:
            raise StopAsyncIteration
        record = await self._front.next_for(self._holder, None)
        if record is None:
            self._done = True
            raise StopAsyncIteration
        return record


class HandlerCancelled(BaseException):
    """An async handler was cancelled (``aprocess()`` was): a BaseException, so ``process()``'s worker gives
    the record back (the shard's next owner delivers it) and stops, rather than counting a failed attempt."""


class LoopCalls:
    """Async callables (``aprocess()``'s handler and sink) made plain ones for ``process()``'s worker threads:
    each call runs the coroutine on ``loop`` and waits for it in the worker. :meth:`cancel` cancels those
    under way, and every later call is refused (HandlerCancelled), so nothing new starts."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._running: set[concurrent.futures.Future[Any]] = set()
        self._cancelled = False

    def plain(self, function: Callable[..., Awaitable[Any]], timeout: float | None = None) -> Callable[..., Any]:
        """``function`` (async) as a blocking callable for a worker thread; a call that runs longer than
        ``timeout`` seconds is cancelled and raises HandlerTimedOut."""

        def call(*args: Any) -> Any:
            with self._lock:
                if self._cancelled:
                    raise HandlerCancelled()
                try:
                    future = asyncio.run_coroutine_threadsafe(_awaited(function, *args), self._loop)
                except RuntimeError:  # the loop is closed
                    raise HandlerCancelled() from None
                self._running.add(future)
            try:
                return future.result(timeout)
            except concurrent.futures.CancelledError:
                raise HandlerCancelled() from None
            except concurrent.futures.TimeoutError:
                if not future.cancel() and future.done():  # it ended just now
                    return future.result()
                raise HandlerTimedOut(timeout or 0.0) from None
            finally:
                with self._lock:
                    self._running.discard(future)

        return call

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            running = list(self._running)
        for future in running:
            future.cancel()


async def _awaited(function: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    return await function(*args)


_UNKNOWN = object()


def _failed(task: asyncio.Task[object]) -> bool:
    """The task was cancelled or raised. Read without ``task.exception()``, which would mark the exception
    retrieved and silence asyncio's report of a task whose exception nobody retrieved (where it can)."""
    if task.cancelled():
        return True
    exception = getattr(task, "_exception", _UNKNOWN)
    if exception is _UNKNOWN:
        exception = task.exception()
    return exception is not None


def _waker(loop: asyncio.AbstractEventLoop, waiter: asyncio.Future[None]) -> Callable[[], None]:
    """A callback for another thread that resolves ``waiter`` on its loop."""

    def wake() -> None:
        with contextlib.suppress(RuntimeError):  # the loop was closed meanwhile: nobody waits any more
            loop.call_soon_threadsafe(_resolve, waiter)

    return wake


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
