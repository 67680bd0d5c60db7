"""The bounded queue between the shard readers and ``next*()``.

One queue for all shards of a client; FIFO, so each shard's order is kept. Its capacity,
in records, bounds memory whatever the stream holds. Closing it wakes every waiter.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence

from .delivery import ShardProgress
from .record import Record

__all__ = ["CLOSED", "Item", "RecordQueue"]

Item = tuple[Record, ShardProgress]


class _Closed:
    def __repr__(self) -> str:
        return "CLOSED"


CLOSED = _Closed()


class RecordQueue:
    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._items: deque[Item] = deque()
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._not_full = threading.Condition(self._lock)
        self._closed = False

    def __len__(self) -> int:
        return len(self._items)

    @property
    def closed(self) -> bool:
        return self._closed

    def put_many(self, items: Sequence[Item], start: int, timeout: float) -> int:
        """Append ``items[start:]`` as room allows, waiting up to ``timeout`` s for room.

        Returns how many were appended (0 on timeout or once closed).
        """
        with self._not_full:
            if not self._closed and len(self._items) >= self._capacity:
                self._not_full.wait(timeout)
            if self._closed:
                return 0
            room = self._capacity - len(self._items)
            chunk = items[start : start + room]
            self._items.extend(chunk)
            if chunk:
                self._not_empty.notify(len(chunk))
            return len(chunk)

    def get(self, timeout: float | None) -> Item | _Closed | None:
        """The oldest item; None after ``timeout`` s with nothing; CLOSED once closed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._not_empty:
            while not self._items and not self._closed:
                if deadline is None:
                    self._not_empty.wait()
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._not_empty.wait(remaining)
            if self._closed:
                return CLOSED
            if not self._items:
                return None
            item = self._items.popleft()
            self._not_full.notify()
            return item

    def purge(self, progress: ShardProgress) -> int:
        """Drop the queued records of one capture of a shard (it is being handed off)."""
        with self._lock:
            kept = deque(item for item in self._items if item[1] is not progress)
            dropped = len(self._items) - len(kept)
            self._items = kept
            if dropped:
                self._not_full.notify(dropped)
            return dropped

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._not_empty.notify_all()
            self._not_full.notify_all()
