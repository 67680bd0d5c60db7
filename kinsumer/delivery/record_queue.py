"""The bounded queue between the shard readers and ``next*()``.

One queue for all shards of a client; FIFO, so each shard's order is kept. Its capacity,
in records, bounds memory whatever the stream holds. Closing it wakes every waiter.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from ..record import Record
from .progress import ShardProgress

__all__ = ["CLOSED", "Closed", "Item", "RecordQueue"]

Item = tuple[Record, ShardProgress]


class Closed:
    def __repr__(self) -> str:
        return "CLOSED"


CLOSED = Closed()


class RecordQueue:
    """FIFO of (record, progress) items holding at most ``capacity`` records.

    The fast paths take the lock directly and wake the other side only when it waits.
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._items: deque[Item] = deque()
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._not_full = threading.Condition(self._lock)
        self._getters = 0  # threads waiting in get_many()
        self._putters = 0  # threads waiting in put_many()
        self._closed = False

    def __len__(self) -> int:
        return len(self._items)

    @property
    def closed(self) -> bool:
        return self._closed

    def put_many(self, items: Sequence[Item], start: int, should_stop: Callable[[], bool]) -> int:
        """Append ``items[start:]`` as room allows, waiting for room while ``should_stop()`` is false.

        Returns how many were appended (0 once closed or stopping). Whoever makes
        ``should_stop()`` true calls :meth:`wake_putters` afterwards.
        """
        with self._lock:
            while not self._closed and len(self._items) >= self._capacity and not should_stop():
                self._putters += 1
                try:
                    self._not_full.wait()
                finally:
                    self._putters -= 1
            if self._closed:
                return 0
            room = self._capacity - len(self._items)
            chunk = items[start : start + room]
            self._items.extend(chunk)
            if chunk and self._getters:
                self._not_empty.notify(len(chunk))
            return len(chunk)

    def wake_putters(self) -> None:
        """Have the threads waiting in :meth:`put_many` check their ``should_stop`` again."""
        with self._lock:
            self._not_full.notify_all()

    def get_many(self, limit: int, timeout: float | None) -> list[Item] | Closed | None:
        """Up to ``limit`` of the oldest items; None after ``timeout`` s with nothing; CLOSED once closed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            items = self._items
            while not items and not self._closed:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._getters += 1
                try:
                    self._not_empty.wait(remaining)
                finally:
                    self._getters -= 1
            if self._closed:
                return CLOSED
            taken = [items.popleft() for _ in range(min(limit, len(items)))]
            if self._putters:
                self._not_full.notify(self._putters)
            return taken

    def get(self, timeout: float | None) -> Item | Closed | None:
        """The oldest item; None after ``timeout`` s with nothing; CLOSED once closed."""
        taken = self.get_many(1, timeout)
        return taken[0] if isinstance(taken, list) else taken

    def purge(self, progress: ShardProgress) -> int:
        """Drop the queued records of one capture of a shard (it is being handed off)."""
        with self._lock:
            kept = [item for item in self._items if item[1] is not progress]
            dropped = len(self._items) - len(kept)
            self._items.clear()  # in place: the deque is the queue's identity
            self._items.extend(kept)
            if dropped:
                self._not_full.notify_all()
            return dropped

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._not_empty.notify_all()
            self._not_full.notify_all()
