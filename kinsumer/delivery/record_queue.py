"""The bounded queue between the shard readers and ``next*()``.

One queue for all shards of a client; FIFO, so each shard's order is kept. It holds chunks
of consecutive records of one capture of a shard, so that a reader and ``next*()`` pay its
lock once per chunk rather than once per record. Its capacity, in records, bounds memory
whatever the stream holds. Closing it wakes every waiter.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from ..record import Record
from ..waiting import slice_of
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

    The fast paths take the lock directly and wake the other side only when it waits.
    """

    def __init__(self, capacity: int, chunk: int) -> None:
        self._capacity = capacity
        self._chunk = chunk
        self._items: deque[Item] = deque()
        self._count = 0  # records in self._items
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._not_full = threading.Condition(self._lock)
        self._getters = 0  # threads waiting in get()
        self._putters = 0  # threads waiting in put()
        self._closed = False

    def __len__(self) -> int:
        """Records queued."""
        return self._count

    @property
    def closed(self) -> bool:
        return self._closed

    def put(self, progress: ShardProgress, records: list[Record], start: int, should_stop: Callable[[], bool]) -> int:
        """Append ``records[start:]`` as room allows, waiting for room while ``should_stop()`` is false.

        Returns how many were appended (0 once closed or stopping). Whoever makes
        ``should_stop()`` true calls :meth:`wake_putters` afterwards.
        """
        with self._lock:
            while not self._closed and self._count >= self._capacity and not should_stop():
                self._putters += 1
                try:
                    self._not_full.wait()
                finally:
                    self._putters -= 1
            if self._closed:
                return 0
            end = min(len(records), start + self._capacity - self._count)
            if end <= start:
                return 0
            size, append = self._chunk, self._items.append
            for first in range(start, end, size):
                append((records[first : min(first + size, end)], progress))
            self._count += end - start
            if self._getters:
                self._not_empty.notify(self._getters)
            return end - start

    def wake_putters(self) -> None:
        """Have the threads waiting in :meth:`put` check their ``should_stop`` again."""
        with self._lock:
            self._not_full.notify_all()

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
            self._count -= len(item[0])
            if self._putters:
                self._not_full.notify(self._putters)
            return item

    def purge(self, progress: ShardProgress) -> int:
        """Drop the queued records of one capture of a shard (it is being handed off); how many."""
        with self._lock:
            kept = [item for item in self._items if item[1] is not progress]
            dropped = self._count - sum(len(records) for records, _ in kept)
            self._items.clear()  # in place: the deque is the queue's identity
            self._items.extend(kept)
            self._count -= dropped
            if dropped:
                self._not_full.notify_all()
            return dropped

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._not_empty.notify_all()
            self._not_full.notify_all()
