"""Which records may go to a handler now: one job per shard at a time, in shard order. No I/O.

``process()``'s workers take records from the delivery (one taker at a time, so they arrive in
shard order) and park them here by shard. A worker claims a shard with parked records that no
other worker has: the shard is *busy* until the worker releases it, and records of it taken
meanwhile wait for it. So two records of one shard are never in handlers at once, and each
shard's records go in order; the shards themselves are served in the order their records came.

Handler calls run in *sections*: normal ones side by side, an exclusive one (a record under
the crash-loop guard's marker) alone in the process, so a death during it is on its records.
Thread-safe.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Iterator
from typing import Generic, TypeVar

__all__ = ["Scheduler"]

T = TypeVar("T")


class Scheduler(Generic[T]):
    """Parked records by shard, busy shards, and the handler sections (see the module's description)."""

    def __init__(self, limit: int) -> None:
        """``limit``: records parked at most (a taker waits for room)."""
        self._limit = max(1, limit)
        self._cond = threading.Condition()
        self._pending: dict[str, deque[T]] = {}
        self._ready: deque[str] = deque()  # shards with parked records and no worker, in order of arrival
        self._busy: set[str] = set()
        self._parked = 0
        self._sections = 0  # normal handler sections running
        self._exclusive = False  # an exclusive section runs, or waits for the normal ones to end

    @property
    def parked(self) -> int:
        return self._parked

    def room(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for room to park another record."""
        with self._cond:
            return self._cond.wait_for(lambda: self._parked < self._limit, timeout)

    def put(self, shard: str, item: T) -> None:
        """Park the next record of ``shard`` (taken in shard order)."""
        with self._cond:
            queue = self._pending.get(shard)
            if queue is None:
                queue = self._pending[shard] = deque()
            if not queue and shard not in self._busy:
                self._ready.append(shard)
            queue.append(item)
            self._parked += 1
            self._cond.notify_all()

    def claim_now(self, shard: str, item: T) -> bool:
        """Claim ``shard`` for ``item`` without parking it, if nothing of the shard waits or runs."""
        with self._cond:
            if shard in self._busy or self._pending.get(shard):
                return False
            self._busy.add(shard)
            return True

    def claim(self, most: int, timeout: float = 0.0) -> tuple[str, list[T]] | None:
        """A shard with parked records and no worker, and up to ``most`` of its records (it is busy
        until :meth:`release`); None if there is none within ``timeout`` s."""
        with self._cond:
            if not self._ready and timeout > 0:
                self._cond.wait_for(lambda: bool(self._ready), timeout)
            if not self._ready:
                return None
            shard = self._ready.popleft()
            self._busy.add(shard)
            return shard, self._take(shard, most)

    def more(self, shard: str, most: int) -> list[T]:
        """Up to ``most`` more parked records of ``shard`` (claimed by the caller)."""
        with self._cond:
            return self._take(shard, most)

    def put_back(self, shard: str, items: list[T]) -> None:
        """Return records taken with :meth:`more` to the front of the shard's queue (in order)."""
        if not items:
            return
        with self._cond:
            queue = self._pending.get(shard)
            if queue is None:
                queue = self._pending[shard] = deque()
            queue.extendleft(reversed(items))
            self._parked += len(items)

    def release(self, shard: str) -> None:
        """The caller is done with ``shard`` for now: its parked records wait for a worker."""
        with self._cond:
            self._busy.discard(shard)
            if self._pending.get(shard):
                self._ready.append(shard)
            self._cond.notify_all()

    def drain(self) -> list[T]:
        """Every parked record (``process()`` ends: they are given back)."""
        with self._cond:
            items = [item for queue in self._pending.values() for item in queue]
            self._pending.clear()
            self._ready.clear()
            self._parked = 0
            self._cond.notify_all()
            return items

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    @contextlib.contextmanager
    def section(self, exclusive: bool = False) -> Iterator[None]:
        """A handler call: side by side with others, or (``exclusive``) alone in the process."""
        with self._cond:
            if exclusive:
                self._cond.wait_for(lambda: not self._exclusive)
                self._exclusive = True
                self._cond.wait_for(lambda: self._sections == 0)
            else:
                self._cond.wait_for(lambda: not self._exclusive)
                self._sections += 1
        try:
            yield
        finally:
            with self._cond:
                if exclusive:
                    self._exclusive = False
                else:
                    self._sections -= 1
                self._cond.notify_all()

    def _take(self, shard: str, most: int) -> list[T]:
        queue = self._pending.get(shard)
        items: list[T] = []
        while queue and len(items) < most:
            items.append(queue.popleft())
        self._parked -= len(items)
        if not queue:
            self._pending.pop(shard, None)
        if items:
            self._cond.notify_all()
        return items
