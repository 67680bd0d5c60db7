"""Which records may go to a handler now: one job per lane at a time, each lane in order. No I/O.

``process()``'s workers take records from the delivery (one taker at a time, so they arrive in
shard order) and park them here by *lane*. A worker claims a lane with parked records that no
other worker has: the lane is *busy* until the worker releases it, and records of it taken
meanwhile wait for it. So two records of one lane are never in handlers at once, and each
lane's records go in order; the lanes themselves are served in the order their records came.

With ``ordering="shard"`` a lane is a shard. With ``ordering="key"`` (a ``key_of`` given) each
partition key of a shard has a lane of its own (``process_batches()``: each of ``concurrency``
groups of keys, by a hash), so records of one shard with different keys go side by side and each
key's in order. A shard keeps a lane of its own for records that must go in shard order (the
crash-loop guard's careful mode): while anything of the shard waits or runs there, the shard's
later records go there too, and when it is released with nothing of it left to go one at a time,
what waits there moves to the keys' lanes, in order (:meth:`Scheduler.release`). A key's records
are never in two lanes with one of them running, so each key stays in order across the change.

Handler calls run in *sections*: normal ones side by side, an exclusive one (a record under
the crash-loop guard's marker) alone in the process, so a death during it is on its records.
Thread-safe.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

__all__ = ["LANE_SEPARATOR", "Scheduler"]

#: Between a shard's ID and its key in the name of a key's lane.
LANE_SEPARATOR = "\x1f"

T = TypeVar("T")


class Scheduler(Generic[T]):
    """Parked records by lane, busy lanes, and the handler sections (see the module's description)."""

    def __init__(
        self, limit: int, key_of: Callable[[T], str] | None = None, held: Callable[[T], bool] = lambda item: False
    ) -> None:
        """``limit``: records parked at most (a taker waits for room); ``key_of``: a record's key, for
        ``ordering="key"`` (None: a lane per shard); ``held``: a record's shard is paused (its lane is
        not claimed meanwhile)."""
        self._limit = max(1, limit)
        self._key_of = key_of
        self._held = held
        self._cond = threading.Condition()
        self._pending: dict[str, deque[T]] = {}
        self._ready: deque[str] = deque()  # lanes with parked records and no worker, in order of arrival
        self._busy: set[str] = set()
        self._parked = 0
        self._sections = 0  # normal handler sections running
        self._exclusive = False  # an exclusive section runs, or waits for the normal ones to end

    @property
    def parked(self) -> int:
        return self._parked

    @property
    def idle(self) -> bool:
        """Nothing is parked and no lane is claimed."""
        with self._cond:
            return not self._parked and not self._busy

    def room(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for room to park another record."""
        with self._cond:
            return self._cond.wait_for(lambda: self._parked < self._limit, timeout)

    def lane(self, shard: str, item: T, serial: bool = False) -> str:
        """The lane of ``item``, the next record of ``shard``: the shard's own with ordering by shard, when
        the record must go in shard order (``serial``), or while records of the shard wait or run
        there; else its key's."""
        if self._key_of is None:
            return shard
        with self._cond:
            if serial or shard in self._busy or self._pending.get(shard):
                return shard
        return f"{shard}{LANE_SEPARATOR}{self._key_of(item)}"

    def put(self, lane: str, item: T) -> None:
        """Park the next record of ``lane`` (taken in shard order)."""
        with self._cond:
            self._park(lane, item)
            self._parked += 1
            self._cond.notify_all()

    def claim_now(self, lane: str, item: T) -> bool:
        """Claim ``lane`` for ``item`` without parking it, if nothing of the lane waits or runs."""
        with self._cond:
            if lane in self._busy or self._pending.get(lane):
                return False
            self._busy.add(lane)
            return True

    def claim(self, most: int, timeout: float = 0.0, *, held_too: bool = False) -> tuple[str, list[T]] | None:
        """A lane with parked records and no worker, and up to ``most`` of its records (it is busy
        until :meth:`release`); None if there is none within ``timeout`` s. A paused shard's lanes wait,
        unless ``held_too``."""
        with self._cond:
            found = self._claimable(held_too)
            if found is None and timeout > 0:
                self._cond.wait_for(lambda: self._claimable(held_too) is not None, timeout)
                found = self._claimable(held_too)
            if found is None:
                return None
            lane = self._ready[found]
            del self._ready[found]
            self._busy.add(lane)
            return lane, self._take(lane, most)

    def more(self, lane: str, most: int) -> list[T]:
        """Up to ``most`` more parked records of ``lane`` (claimed by the caller)."""
        with self._cond:
            return self._take(lane, most)

    def put_back(self, lane: str, items: list[T]) -> None:
        """Return records taken with :meth:`more` to the front of the lane's queue (in order)."""
        if not items:
            return
        with self._cond:
            queue = self._pending.get(lane)
            if queue is None:
                queue = self._pending[lane] = deque()
            queue.extendleft(reversed(items))
            self._parked += len(items)

    def release(self, lane: str, serial: Callable[[T], bool] | None = None) -> None:
        """The caller is done with ``lane`` for now: its parked records wait for a worker. With ordering
        by key, the records parked in a shard's own lane go to their keys' lanes, in order, unless one
        of them must go in shard order (``serial``)."""
        with self._cond:
            self._busy.discard(lane)
            queue = self._pending.get(lane)
            key_of, in_order = self._key_of, serial or _never
            if queue and key_of is not None and LANE_SEPARATOR not in lane and not any(map(in_order, queue)):
                del self._pending[lane]
                for item in queue:
                    self._park(f"{lane}{LANE_SEPARATOR}{key_of(item)}", item)
                queue = None
            if queue:
                self._ready.append(lane)
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

    def _claimable(self, held_too: bool = False) -> int | None:
        """The place in ``_ready`` of the first lane whose shard is not paused (``held_too``: the first lane)
        (lock held)."""
        for i, lane in enumerate(self._ready):
            if held_too or not self._held(self._pending[lane][0]):
                return i
        return None

    def _park(self, lane: str, item: T) -> None:
        queue = self._pending.get(lane)
        if queue is None:
            queue = self._pending[lane] = deque()
        if not queue and lane not in self._busy:
            self._ready.append(lane)
        queue.append(item)

    def _take(self, lane: str, most: int) -> list[T]:
        queue = self._pending.get(lane)
        items: list[T] = []
        while queue and len(items) < most:
            items.append(queue.popleft())
        self._parked -= len(items)
        if not queue:
            self._pending.pop(lane, None)
        if items:
            self._cond.notify_all()
        return items


def _never(item: object) -> bool:
    return False
