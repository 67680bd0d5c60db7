"""Delivery: from the shard workers' pushes to the caller's ``next*()``.

One :class:`Delivery` per consumer. Shard workers open a :class:`ShardProgress` per capture,
push records (waiting for room in the bounded queue) and, when they give a shard up, hand
it off here: undelivered records are dropped and delivered ones waited for. Callers take
records one at a time: in auto mode a record counts as processed when its holder asks for
the next one (or at a clean stop); in manual mode each comes with its :class:`Checkpoint`.

Nothing here blocks except the explicit waits, so a front end other than the threaded one
(asyncio, say) can drive the same object with :meth:`Delivery.poll` and its own waiting.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence

import attrs

from ..errors import KinsumerError, NoRecordWithin
from ..reading.position import Position
from ..record import Record
from ..stats import GuardedStats
from .progress import Checkpoint, ShardProgress
from .record_queue import CLOSED, Closed, RecordQueue

__all__ = ["Delivery", "HandoffResult"]

#: Records next*() takes from the queue in one go: at most this many, and at most buffer_size / 16.
MAX_BATCH = 64
_LEASE_WAIT = 0.5  # seconds between two looks at a closed delivery while waiting for a lease


@attrs.frozen
class HandoffResult:
    """How handing a shard's records off ended."""

    #: Every delivered record was acknowledged in time.
    clean: bool
    #: The checkpoint to store on release: the contiguous prefix of acknowledged records.
    checkpoint: Position | None
    #: Records of the shard dropped from the queue (the next owner delivers them); those
    #: next*() had already taken from the queue in its batch are skipped when their turn comes.
    dropped: int
    #: Delivered records still unacknowledged when the wait ended (delivered again later).
    outstanding: int


Taken = tuple[Record, ShardProgress, int]
_TIMED_OUT = object()


class Delivery:
    """The queue between the shard workers and the caller, and what was delivered from it."""

    def __init__(self, buffer_size: int, stats: GuardedStats) -> None:
        self._queue = RecordQueue(buffer_size)
        self._stats = stats
        self._batch_size = max(1, min(MAX_BATCH, buffer_size // 16))
        self._batch: deque[tuple[Record, ShardProgress]] = deque()  # taken from the queue, not yet delivered
        self._take_lock = threading.Lock()
        self._held: dict[Hashable, tuple[ShardProgress, int]] = {}  # auto mode: each holder's record in hand
        self._error: KinsumerError | None = None

    # ----------------------------------------------------------------- the shard workers' side

    def open_shard(self, shard_id: str, checkpoint: Position | None) -> ShardProgress:
        """The bookkeeping of one capture of a shard, starting at its stored checkpoint."""
        return ShardProgress(shard_id, checkpoint)

    def push(self, progress: ShardProgress, records: Sequence[Record], should_stop: Callable[[], bool]) -> int:
        """Queue ``records`` in order, waiting for room; how many are in (fewer if stopped or closed)."""
        items = [(record, progress) for record in records]
        start = 0
        while start < len(items) and not should_stop():
            added = self._queue.put_many(items, start, should_stop)
            if not added and self._queue.closed:
                break
            progress.pushed(added)
            start += added
        return start

    def wake_pushers(self) -> None:
        """Make pushes waiting for room check their ``should_stop`` again."""
        self._queue.wake_putters()

    def hand_off(self, progress: ShardProgress, timeout: float) -> HandoffResult:
        """Give a shard's records up: drop the queued ones, wait up to ``timeout`` s for the delivered ones.

        After this no record of ``progress`` is delivered and no acknowledgement counts.
        """
        progress.revoke()
        dropped = self._queue.purge(progress)
        clean = progress.wait(progress.all_acknowledged, timeout)
        outstanding = progress.outstanding
        return HandoffResult(clean, progress.release(), dropped, outstanding)

    def drop(self, progress: ShardProgress) -> None:
        """Forget a shard at once (another client owns it): no delivery, no acknowledgement, no wait."""
        progress.revoke()
        self._queue.purge(progress)
        progress.release()

    @staticmethod
    def wait_processed(progress: ShardProgress, should_stop: Callable[[], bool], poll: float = 1.0) -> bool:
        """Wait until every pushed record was delivered and acknowledged; False if stopped first.

        A stop revokes the progress, which wakes this wait; ``poll`` bounds it regardless.
        """
        while not progress.all_processed():
            if should_stop():
                return False
            progress.wait(progress.all_processed, poll)
        return True

    # ----------------------------------------------------------------- the caller's side

    def close(self, error: KinsumerError | None = None) -> None:
        """No more deliveries: waiting callers wake; later calls raise ``error``, or get None.

        A close without error (a stop) wins over any error, whichever came first.
        """
        if error is None:
            self._error = None
        elif not self._queue.closed:
            self._error = error
        self._queue.close()

    @property
    def closed(self) -> bool:
        return self._queue.closed

    def next_auto(self, holder: Hashable, timeout: float | None) -> Record | None:
        """Auto mode: count ``holder``'s previous record processed, then take the next one."""
        held = self._held.pop(holder, None)
        if held is not None:
            held[0].ack(held[1])
        taken = self.take(timeout)
        if taken is None:
            return None
        record, progress, token = taken
        self._held[holder] = (progress, token)
        return record

    def next_manual(self, timeout: float | None) -> tuple[Record, Checkpoint] | tuple[None, None]:
        """Manual mode: the next record and the Checkpoint that marks it processed."""
        taken = self.take(timeout)
        if taken is None:
            return None, None
        record, progress, token = taken
        return record, Checkpoint(record.shard_id, record.sequence_number, record.sub_sequence_number, progress, token)

    def acknowledge_held(self) -> None:
        """A clean stop: the record each holder has in hand counts as processed."""
        while self._held:
            _holder, (progress, token) = self._held.popitem()
            progress.ack(token)

    def take(self, timeout: float | None) -> Taken | None:
        """The next record, registered as delivered; None once closed.

        Raises :class:`NoRecordWithin` after ``timeout`` s without one, and the error the
        delivery was closed with.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        taken = self._take_until(deadline)
        if taken is _TIMED_OUT:
            raise NoRecordWithin(timeout if timeout is not None else 0.0)
        return taken  # type: ignore[return-value]

    def poll(self) -> Taken | None:
        """Like :meth:`take` without waiting: None when nothing is ready, or once :attr:`closed`."""
        taken = self._take_until(time.monotonic())
        return None if taken is _TIMED_OUT else taken  # type: ignore[return-value]

    def _take_until(self, deadline: float | None) -> Taken | object | None:
        """A record, None once closed, or _TIMED_OUT at the deadline."""
        while True:
            taken = self._take_one(deadline)
            if isinstance(taken, Closed):
                if self._error is not None:
                    raise self._error
                return None
            if taken is None:
                return _TIMED_OUT
            if taken[2] is not None:
                return taken
            # its shard is being handed off: the new owner delivers it

    def _take_one(self, deadline: float | None) -> tuple[Record, ShardProgress, int | None] | Closed | None:
        """The next record, registered as delivered; None at the deadline; CLOSED once closed.

        Records leave the queue in batches (one lock round per batch, not per record). Taking
        one and registering its delivery happen under one lock, so that with several calling
        threads each shard's records are registered in shard order. A record whose shard's
        lease is not known to be ours (not confirmed for a while: the process was paused, or
        DynamoDB is out of reach) waits for the lease to be confirmed or lost.
        """
        lock = self._take_lock
        if not lock.acquire(blocking=False):  # the usual case: one calling thread
            wait = -1.0 if deadline is None else max(0.0, deadline - time.monotonic())
            if not lock.acquire(timeout=wait):
                return None
        try:
            if self._queue.closed:
                return CLOSED
            batch = self._batch
            if not batch:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                taken = self._queue.get_many(self._batch_size, remaining)
                if not isinstance(taken, list):
                    return taken
                batch.extend(taken)
            record, progress = batch[0]
            if not progress.fresh(time.monotonic()) and not self._wait_for_lease(progress, deadline):
                return CLOSED if self._queue.closed else None
            batch.popleft()
            token = progress.deliver((record.sequence_number, record.sub_sequence_number))
        finally:
            lock.release()
        if token is not None and self._stats.wants_deliveries:
            self._stats.record_delivered(record.shard_id, _age(record.approximate_arrival_timestamp))
        return record, progress, token

    def _wait_for_lease(self, progress: ShardProgress, deadline: float | None) -> bool:
        """Wait until the shard's lease is confirmed or lost; False at the deadline or once closed."""
        while not progress.fresh_or_revoked():
            if self._queue.closed:
                return False
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return False
            wake = _LEASE_WAIT if deadline is None else min(_LEASE_WAIT, deadline - now)
            progress.wait(progress.fresh_or_revoked, wake)
        return True


def _age(timestamp: dt.datetime) -> float:
    return max(0.0, time.time() - timestamp.timestamp())
