"""The bounded queue between the shard readers and ``next*()``.

One queue for all shards of a client; FIFO, so each shard's order is kept. It holds chunks
of consecutive records of one capture of a shard, so that a reader and ``next*()`` pay its
lock once per chunk rather than once per record. Its capacity is in records; the client's
:class:`~.budget.ByteBudget` bounds the bytes. Closing it wakes every waiter.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from ..record import Record
from ..waiting import slice_of
from .budget import ByteBudget
from .progress import ShardProgress

__all__ = ["CLOSED", "Closed", "Item", "RecordQueue"]

#: Consecutive records of one capture of a shard.
Item = tuple[list[Record], ShardProgress]


class Closed:
    def __repr__(self) -> str:
        return "CLOSED"


CLOSED = Closed()


class RecordQueue:
    """FIFO of chunks of at most ``chunk`` records, holding at most ``capacity`` records.

    Readers never block here: :meth:`offer` adds what fits and, when something did not, keeps
    the reader's ``wake`` callback to call once the queue is half empty again (or closed, or
    purged): a reader waiting for room is woken once per half a queue taken, not per chunk.
    Bytes of records that leave the queue are given back to the client's ``budget``.
    """

    def __init__(self, capacity: int, chunk: int, budget: ByteBudget | None = None) -> None:
        self._capacity = capacity
        self._chunk = chunk
        self._budget = budget
        self._items: deque[Item] = deque()
        self._sizes: deque[int] = deque()  # bytes of record data of each chunk in _items
        self._count = 0  # records in self._items
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._getters = 0  # threads waiting in get()
        self._room_waiters: dict[Callable[[], None], None] = {}  # readers told when there is room again, once each
        self._ready_waiters: dict[Callable[[], None], None] = {}  # takers told when records come, once each
        self._low_water = capacity // 2
        self._closed = False

    def __len__(self) -> int:
        """Records queued."""
        return self._count

    @property
    def closed(self) -> bool:
        return self._closed

    def has_room(self) -> bool:
        return self._closed or self._count < self._capacity

    def offer(
        self, progress: ShardProgress, records: list[Record], start: int, wake: Callable[[], None] | None = None
    ) -> int:
        """Append as many of ``records[start:]`` as there is room for; how many (0 once closed).

        If not all fit, ``wake`` (if given) is called once there is room again: once, for every
        offer that did not fit since the last call. Another reader may take that room first, so a
        reader offers again after each call (and is called again if it still does not fit).
        """
        with self._lock:
            if self._closed:
                return 0
            end = min(len(records), start + self._capacity - self._count)
            if end < len(records) and wake is not None:
                self._room_waiters[wake] = None
            if end <= start:
                return 0
            size, append, sizes = self._chunk, self._items.append, self._sizes.append
            for first in range(start, end, size):
                chunk = records[first : min(first + size, end)]
                append((chunk, progress))
                sizes(sum([len(r.data) for r in chunk]))
            self._count += end - start
            if self._getters:
                self._not_empty.notify(self._getters)
            ready = self._take_ready() if self._ready_waiters else None
        if ready:
            _call_all(ready)
        return end - start

    def when_ready(self, wake: Callable[[], None]) -> bool:
        """Have ``wake`` called once records are queued or the queue closes (from the thread that
        queues them); False, and nothing registered, if that is so already."""
        with self._lock:
            if self._items or self._closed:
                return False
            self._ready_waiters[wake] = None
            return True

    def forget_ready(self, wake: Callable[[], None]) -> None:
        """``wake`` is not wanted any more (its waiter gave up)."""
        with self._lock:
            self._ready_waiters.pop(wake, None)

    def get(self, timeout: float | None) -> Item | Closed | None:
        """The oldest chunk; None after ``timeout`` s with nothing; CLOSED once closed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            items = self._items
            while not items and not self._closed:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._getters += 1
                try:
                    self._not_empty.wait(slice_of(remaining))  # a signal to another thread is noticed
                finally:
                    self._getters -= 1
            if self._closed:
                return CLOSED
            item = items.popleft()
            size = self._sizes.popleft()
            self._count -= len(item[0])
            waiters = self._take_waiters() if self._room_waiters and self._count <= self._low_water else None
        if self._budget is not None:
            self._budget.free(size)
        if waiters:
            _call_all(waiters)
        return item

    def purge(self, progress: ShardProgress) -> int:
        """Drop the queued records of one capture of a shard (it is being handed off); how many."""
        with self._lock:
            pairs = zip(self._items, self._sizes, strict=True)
            kept = [(item, size) for item, size in pairs if item[1] is not progress]
            dropped = self._count - sum(len(item[0]) for item, _ in kept)
            freed = sum(self._sizes) - sum(size for _, size in kept)
            self._items.clear()  # in place: the deque is the queue's identity
            self._items.extend(item for item, _ in kept)
            self._sizes.clear()
            self._sizes.extend(size for _, size in kept)
            self._count -= dropped
            waiters = self._take_waiters() if dropped else None
        if self._budget is not None:
            self._budget.free(freed)
        if waiters:
            _call_all(waiters)
        return dropped

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._not_empty.notify_all()
            waiters = self._take_waiters() + self._take_ready()
        _call_all(waiters)

    def _take_waiters(self) -> list[Callable[[], None]]:
        waiters, self._room_waiters = list(self._room_waiters), {}
        return waiters

    def _take_ready(self) -> list[Callable[[], None]]:
        waiters, self._ready_waiters = list(self._ready_waiters), {}
        return waiters


def _call_all(callbacks: list[Callable[[], None]]) -> None:
    for callback in callbacks:
        callback()
