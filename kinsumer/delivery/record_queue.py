"""The bounded queue between the shard readers and ``next*()``.

One queue for all shards of a client; FIFO, so each shard's order is kept. It holds chunks
of consecutive records of one capture of a shard, so that a reader and ``next*()`` pay its
lock once per chunk rather than once per record. Its capacity is in records; the client's
:class:`~.budget.ByteBudget` bounds the bytes. Closing it wakes every waiter.

A capture of a shard may be *held* (``Kinsumer.pause()``): its chunks are set aside, nothing of
it is offered or taken, and its reader waits as for room, until :meth:`RecordQueue.release_held`
puts them back at the end of the queue (in order: nothing of the capture came in meanwhile),
after the runs of it that its takers had set aside (:class:`~.progress.Run`, registered already:
a taker hands them over as they are). Held chunks keep their bytes of the budget and do not count
against the capacity.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from ..record import Record
from ..waiting import Deadline, wait_condition
from .budget import ByteBudget
from .progress import Run, ShardProgress

__all__ = ["CLOSED", "Closed", "Entry", "Item", "RecordQueue"]

#: Consecutive records of one capture of a shard.
Item = tuple[list[Record], ShardProgress]
#: What the queue holds: chunks, and runs set aside at a pause and resumed (registered already).
Entry = Item | Run


def _capture(entry: Entry) -> ShardProgress:
    return entry.progress if isinstance(entry, Run) else entry[1]


def _records(entry: Entry) -> int:
    return 0 if isinstance(entry, Run) else len(entry[0])


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
        self._items: deque[Entry] = deque()
        self._sizes: deque[int] = deque()  # bytes of record data of each chunk in _items
        self._count = 0  # records in self._items
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._getters = 0  # threads waiting in get()
        self._room_waiters: dict[Callable[[], None], None] = {}  # readers told when there is room again, once each
        self._ready_waiters: dict[Callable[[], None], None] = {}  # takers told when records come, once each
        self._low_water = capacity // 2
        self._closed = False
        #: Captures held, with their chunks set aside (and those chunks' bytes), in order.
        self._held: dict[ShardProgress, deque[tuple[Entry, int]]] = {}
        self._held_waiters: dict[ShardProgress, Callable[[], None]] = {}  # their readers, told at release

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
            if progress in self._held:  # paused: its reader waits until it is released
                if wake is not None:
                    self._held_waiters[progress] = wake
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

    def get(self, timeout: Deadline | float | None) -> Entry | Closed | None:
        """The oldest chunk (or resumed run); None after ``timeout`` s (or at the deadline) with nothing; CLOSED
        once closed."""
        deadline = timeout if isinstance(timeout, Deadline) else Deadline(timeout)
        with self._lock:
            items = self._items
            if not items and not self._closed:
                self._getters += 1
                try:  # in slices: a signal to another thread is noticed
                    if not wait_condition(self._not_empty, lambda: bool(items) or self._closed, deadline):
                        return None
                finally:
                    self._getters -= 1
            if self._closed:
                return CLOSED
            item = items.popleft()
            size = self._sizes.popleft()
            self._count -= _records(item)
            waiters = self._take_waiters() if self._room_waiters and self._count <= self._low_water else None
        if self._budget is not None:
            self._budget.free(size)
        if waiters:
            _call_all(waiters)
        return item

    def purge(self, progress: ShardProgress) -> int:
        """Drop the queued records of one capture of a shard (it is being handed off), held ones too (and end
        its runs set aside: what they did not hand over goes back); how many records."""
        with self._lock:
            kept, gone = self._split(progress)
            self._count -= sum(_records(item) for item, _ in gone)
            gone += self._held.pop(progress, ())
            self._held_waiters.pop(progress, None)
            self._keep(kept)
            dropped = sum(_records(item) for item, _ in gone)
            freed = sum(size for _, size in gone)
            waiters = self._take_waiters() if dropped else None
        _end_runs(item for item, _ in gone)
        if self._budget is not None:
            self._budget.free(freed)
        if waiters:
            _call_all(waiters)
        return dropped

    def hold(self, progress: ShardProgress) -> int:
        """Set the capture's queued chunks aside, and take nothing more of it, until :meth:`release_held`;
        how many records were set aside."""
        with self._lock:
            if self._closed or progress in self._held:
                return 0
            kept, held = self._split(progress)
            self._keep(kept)
            self._held[progress] = deque(held)
            moved = sum(_records(item) for item, _ in held)
            self._count -= moved
            waiters = self._take_waiters() if moved else None
        if waiters:
            _call_all(waiters)
        return moved

    def release_held(self, progress: ShardProgress, runs: Sequence[Run] = ()) -> None:
        """The capture is not held any more: ``runs`` of it set aside by its takers, then its chunks, go back
        at the end of the queue, and its reader offers again."""
        with self._lock:
            held = self._held.pop(progress, None)
            reader = self._held_waiters.pop(progress, None)
            if held is None:
                return
            held.extendleft((run, 0) for run in reversed(runs))
            for item, size in held:
                self._items.append(item)
                self._sizes.append(size)
                self._count += _records(item)
            if held and self._getters:
                self._not_empty.notify(self._getters)
            ready = self._take_ready() if held and self._ready_waiters else []
        _call_all(ready + ([reader] if reader is not None else []))

    def _split(self, progress: ShardProgress) -> tuple[list[tuple[Entry, int]], list[tuple[Entry, int]]]:
        """The queued entries (with their sizes) of other captures, and of ``progress``, each in order (lock held)."""
        kept: list[tuple[Entry, int]] = []
        theirs: list[tuple[Entry, int]] = []
        for pair in zip(self._items, self._sizes, strict=True):
            (theirs if _capture(pair[0]) is progress else kept).append(pair)
        return kept, theirs

    def _keep(self, kept: list[tuple[Entry, int]]) -> None:
        """The queue holds ``kept`` from now on (lock held)."""
        self._items.clear()  # in place: the deque is the queue's identity
        self._items.extend(item for item, _ in kept)
        self._sizes.clear()
        self._sizes.extend(size for _, size in kept)

    def close(self) -> None:
        """Nothing more comes in or goes out; runs set aside at a pause end (what they processed counts)."""
        with self._lock:
            self._closed = True
            self._not_empty.notify_all()
            waiters = self._take_waiters() + self._take_ready() + list(self._held_waiters.values())
            self._held_waiters.clear()
            entries = [*self._items, *(item for held in self._held.values() for item, _ in held)]
        _end_runs(entries)
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


def _end_runs(entries: Iterable[Entry]) -> None:
    for entry in entries:
        if isinstance(entry, Run):
            entry.progress.end_run(entry)
