"""Delivery: from the shard workers' pushes to the caller's ``next*()``.

One :class:`Delivery` per consumer. Shard workers open a :class:`ShardProgress` per capture,
push records (waiting for room in the bounded queue) and, when they give a shard up, hand
it off here: undelivered records are dropped and delivered ones waited for. Callers take
records one at a time: in auto mode a record counts as processed when its holder asks for
the next one (or at a clean stop); in manual mode each comes with its :class:`Checkpoint`.

Nothing here blocks except the explicit waits (a ``timeout``), so a front end other than the
threaded one drives the same object its own way: asyncio's (:mod:`kinsumer.asyncio_front`) asks
for a record with a timeout of 0 and, when none is ready, registers a wake-up with
:meth:`Delivery.when_ready` (called from a reader's thread once records are queued, or the
delivery closes), which resolves a future on its loop; the loop never blocks on a lock held long.

A shard worker gives a shard up in three steps, so that its waits are its own (timers on its
loop): :meth:`Delivery.start_hand_off`, then wait for :meth:`ShardProgress.all_acknowledged`,
then :meth:`Delivery.end_hand_off`.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Literal, Protocol

import attrs

from .. import clock
from ..config import DEFAULT_MAX_BUFFERED_BYTES
from ..errors import KinsumerError, NoRecordWithin
from ..reading.position import Position
from ..record import Record
from ..stats import GuardedStats
from ..waiting import Deadline, acquire
from .budget import ByteBudget
from .phase import ShardPhase
from .progress import HANDED, STALE, STOPPED, Checkpoint, Checkpointed, Run, ShardProgress, Stopped
from .record_queue import CLOSED, Closed, RecordQueue

__all__ = ["Delivery", "EndHook", "EndHooks", "ExplicitHolder", "HandoffResult", "age_of"]

#: Records per chunk of the queue (next*() takes a chunk in one go): at most this many, and at most buffer_size / 16.
MAX_BATCH = 64
_LEASE_WAIT = 0.5  # seconds between two looks at a closed delivery while waiting for a lease


#: The hooks of a capture's end.
EndHook = Literal["on_revoked", "on_lost"]


class EndHooks(Protocol):
    """What the shard workers call as a capture ends: ``process()``'s ``on_revoked`` and ``on_lost``
    (:class:`~kinsumer.handling.hooks.Lifecycle`, which ``process()`` sets as :attr:`Delivery.lifecycle`)."""

    def start(self, hook: EndHook, shard_id: str, done: Callable[[], None]) -> threading.Event | None:
        """Call ``hook`` on a thread of its own; the event is set (and ``done()`` called) when it returns.
        None if there is no such hook."""
        ...


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
_MANUAL = object()  # the holder of manual mode's run, shared by every calling thread


class ExplicitHolder:
    """A holder whose records count as processed only when it says so (``process()``): a clean stop
    does not count its record in hand, as it does an auto-mode caller's."""

    __slots__ = ("__weakref__",)


class Delivery:
    """The queue between the shard workers and the caller, and what was delivered from it.

    ``next*()`` takes records from the queue a chunk at a time and hands them over from a
    :class:`Run`: in auto mode each calling thread has a run of its own, so handing over its
    next record and counting its previous one processed take one short lock and no
    bookkeeping per record; the shard's checkpoint folds the run in when it is read.
    """

    def __init__(
        self, buffer_size: int, stats: GuardedStats, max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES
    ) -> None:
        #: Bytes of record data read and not yet taken: every shard reads within it.
        self.budget = ByteBudget(max_buffered_bytes)
        self._queue = RecordQueue(buffer_size, max(1, min(MAX_BATCH, buffer_size // 16)), self.budget)
        self._stats = stats
        self._wants_deliveries = stats.wants_deliveries
        #: The clock a lease's ``fresh_until`` is compared on (that it is computed on), bound once: per record.
        self.monotonic = clock.monotonic_source()
        self._take_lock = threading.Lock()  # one taker waits on the queue at a time: runs start in queue order
        self._hand_lock = threading.Lock()  # short: handing a record over, starting or ending a run
        self._runs: dict[Hashable, Run] = {}  # each holder's run being handed over
        #: Runs a holder shared by several threads (manual mode's) took while its run was still being handed over.
        self._next_runs: dict[Hashable, deque[Run]] = {}
        self._closed = False
        self._error: KinsumerError | None = None
        #: Holders whose record in hand goes back (an ``async for`` left): queued by finalizers, which may
        #: run in any thread at any time, so they only append here; ended at the next hand-over or stop.
        self._given_back: deque[Hashable] = deque()
        #: ``process()``'s shard lifecycle hooks (set by it), which the shard workers call at handoffs.
        self.lifecycle: EndHooks | None = None
        # pauses (Kinsumer.pause()), by shard key; each key's open capture; runs of a paused capture set
        # aside mid-way, which go back into the queue at resume(), before its chunks (hand lock)
        self._paused: set[str] = set()
        self._pausing = threading.Lock()  # one pause() or resume() at a time, the queue's part included
        self._open: dict[str, ShardProgress] = {}
        self._parked: dict[ShardProgress, list[Run]] = {}

    # ----------------------------------------------------------------- the shard workers' side

    def open_shard(self, shard_id: str, checkpoint: Position | None, phase: ShardPhase | None = None) -> ShardProgress:
        """The bookkeeping of one capture of a shard, starting at its stored checkpoint (held, if the
        shard is paused); ``phase``: the shard's (its worker's), else one of its own, captured."""
        progress = ShardProgress(shard_id, checkpoint, phase)
        with self._pausing:
            with self._hand_lock:
                self._open[shard_id] = progress
                progress.paused = shard_id in self._paused
            if progress.paused:
                self._queue.hold(progress)
        return progress

    # ----------------------------------------------------------------- pauses

    def pause(self, shard_id: str) -> ShardProgress | None:
        """Hand out nothing more of the shard (its capture now, and the next ones) until :meth:`resume`;
        its open capture, if there is one."""
        with self._pausing:
            with self._hand_lock:
                self._paused.add(shard_id)
                progress = self._open.get(shard_id)
                if progress is None or progress.paused:
                    return progress
                progress.paused = True
            self._queue.hold(progress)  # its resumed runs not taken yet too
            return progress

    def resume(self, shard_id: str) -> ShardProgress | None:
        """The shard's records are handed out again, in order: what was set aside first; its open capture."""
        with self._pausing:
            with self._hand_lock:
                self._paused.discard(shard_id)
                progress = self._open.get(shard_id)
                if progress is None or not progress.paused:
                    return progress
                progress.paused = False
                parked = self._parked.pop(progress, [])
            self._queue.release_held(progress, parked)
            return progress

    def _set_aside(self, run: Run) -> None:
        """A run of a paused capture, not handed over entirely: it waits for resume() (hand lock held)."""
        self._parked.setdefault(run.progress, []).append(run)

    @property
    def paused(self) -> frozenset[str]:
        """The shard keys paused."""
        return frozenset(self._paused)

    def offer(self, progress: ShardProgress, records: list[Record], start: int, wake: Callable[[], None]) -> int:
        """Queue as many of ``records[start:]`` as there is room for, in order; how many (0 once closed).

        Never waits: if not all fit, ``wake`` is called once there is room again.
        """
        added = self._queue.offer(progress, records, start, wake)
        if added:
            progress.pushed(added)
        return added

    def has_room(self) -> bool:
        """The queue has room (or is closed: nothing more goes in)."""
        return self._queue.has_room()

    def start_hand_off(self, progress: ShardProgress) -> int:
        """Begin giving a shard's records up: no more deliveries, its queued records dropped; how many.

        Then wait for :meth:`ShardProgress.all_acknowledged` and call :meth:`end_hand_off`.
        """
        self._revoke(progress)
        return self._queue.purge(progress)

    @staticmethod
    def end_hand_off(progress: ShardProgress, dropped: int) -> HandoffResult:
        """After :meth:`start_hand_off` and the wait: no acknowledgement counts any more."""
        outstanding = progress.outstanding
        return HandoffResult(outstanding == 0, progress.release(), dropped, outstanding)

    def drop(self, progress: ShardProgress) -> None:
        """Forget a shard at once (another client owns it): no delivery, no acknowledgement, no wait."""
        self._revoke(progress)
        self._queue.purge(progress)
        progress.release()

    def _revoke(self, progress: ShardProgress) -> None:
        progress.revoke()
        with self._hand_lock:  # a record being handed over meanwhile is in its holder's hands now; none follows
            if self._open.get(progress.shard_id) is progress:
                del self._open[progress.shard_id]
            for run in self._parked.pop(progress, []):  # set aside at a pause: the shard's next owner delivers the rest
                progress.end_run(run)

    # ----------------------------------------------------------------- the caller's side

    def close(self, error: KinsumerError | None = None) -> None:
        """No more deliveries: waiting callers wake; later calls raise ``error``, or get None.

        A close without error (a stop) wins over any error, whichever came first.
        """
        with self._hand_lock:
            if error is None:
                self._error = None
            elif not self._closed:
                self._error = error
            self._closed = True
        self._queue.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def error(self) -> KinsumerError | None:
        """The background error the delivery was closed with (raised from the callers' next calls), if any."""
        return self._error

    def next_auto(self, holder: Hashable, timeout: float | None) -> Record | None:
        """Auto mode: count ``holder``'s previous record processed, then take the next one.

        Raises :class:`NoRecordWithin` after ``timeout`` s without one, and the error the
        delivery was closed with.
        """
        record, shard_key = None, ""
        with self._hand_lock:  # the usual case: the next record of the holder's run
            run = self._runs.get(holder)
            if run is not None and not self._closed:
                i = run.handed
                if run.offer(i, self.monotonic()) is HANDED:
                    run.processed = i  # asking again: the record in hand is processed
                    record, shard_key = run.records[i], run.progress.shard_id
        if record is None:
            taken = self._taken(self._hand(holder, Deadline(timeout), auto=True), timeout)
            return None if taken is None else taken[0]
        if self._wants_deliveries:  # outside the lock: the receiver is the user's code
            self._stats.record_delivered(shard_key, age_of(record.approximate_arrival_timestamp))
        return record

    def next_manual(self, timeout: float | None) -> Checkpointed[Record] | Stopped:
        """Manual mode: the next record and the Checkpoint that marks it processed; STOPPED once closed."""
        taken = self.take(timeout)
        if taken is None:
            return STOPPED
        record, progress, token = taken
        checkpoint = Checkpoint(
            record.shard_id, record.sequence_number, record.sub_sequence_number, progress, token, record.stream
        )
        return Checkpointed(record, checkpoint)

    def acknowledge_held(self) -> None:
        """A clean stop: the record each auto-mode holder has in hand counts as processed."""
        self._end_runs(processed=True)

    def abandon_held(self) -> None:
        """A stop after a failure: the record each auto-mode holder has in hand was not processed.

        It is not acknowledged, and no handoff waits for it: the shard's next owner delivers it.
        """
        self._end_runs(processed=False)

    def end_holder(self, holder: Hashable, *, processed: bool) -> None:
        """``holder`` takes no more records (a task that ended): its record in hand counts as processed,
        or goes back with the rest of its run (the shard's next owner delivers them)."""
        with self._hand_lock:
            self._end_holder(holder, processed)

    def give_back_later(self, holder: Hashable) -> None:
        """Like ``end_holder(holder, processed=False)``, from a finalizer: done at the next hand-over or stop."""
        self._given_back.append(holder)

    def when_ready(self, wake: Callable[[], None]) -> bool:
        """Have ``wake`` called (from another thread) once records are queued or the delivery closes;
        False, and nothing registered, if that is so already. For front ends that wait their own way."""
        return self._queue.when_ready(wake)

    def forget_ready(self, wake: Callable[[], None]) -> None:
        self._queue.forget_ready(wake)

    def _end_holder(self, holder: Hashable, processed: bool) -> None:
        """(hand lock held)"""
        runs = [self._runs.pop(holder)] if holder in self._runs else []
        runs += self._next_runs.pop(holder, ())
        for run in runs:
            if processed:
                run.processed = run.handed
            run.progress.end_run(run, abandon_in_hand=not processed)

    def _end_given_back(self) -> None:
        """(hand lock held)"""
        while self._given_back:
            self._end_holder(self._given_back.popleft(), False)

    def _end_runs(self, *, processed: bool) -> None:
        with self._hand_lock:
            self._end_given_back()
            runs, self._runs = self._runs, {}
            queued, self._next_runs = self._next_runs, {}
            aside = [run for parked in self._parked.values() for run in parked]
            self._parked = {}
            for run in aside:  # set aside at a pause: what was processed counts, the rest goes back
                run.progress.end_run(run)
            for holder, run in [*runs.items(), *((h, r) for h, rs in queued.items() for r in rs)]:
                auto = holder is not _MANUAL and not isinstance(holder, ExplicitHolder)
                if auto and processed:
                    run.processed = run.handed
                run.progress.end_run(run, abandon_in_hand=auto and not processed)

    def take(self, timeout: float | None) -> Taken | None:
        """The next record (manual mode), registered as delivered, with its token; None once closed.

        Raises :class:`NoRecordWithin` after ``timeout`` s without one, and the error the
        delivery was closed with.
        """
        return self._taken(self._hand(_MANUAL, Deadline(timeout), auto=False), timeout)

    def take_run(self, holder: ExplicitHolder, timeout: float | None) -> Run | None:
        """The next chunk of the queue as a run of ``holder`` (registered as delivered), for it to hand
        over itself (``run.handed``) and count processed (``run.processed``) in order; None once closed.

        The holder checks ``run.progress.phase.revoked``, ``paused`` and ``fresh_until`` before each record, as
        :meth:`next_auto` does, begins at ``run.handed`` (a run set aside at a pause and resumed goes on
        where it stopped), and ends the run with :meth:`end_run`. Raises :class:`NoRecordWithin` after
        ``timeout`` s without one, and the error the delivery was closed with.
        """
        started = self._start_run(Deadline(timeout), holder)
        if started is None:
            raise NoRecordWithin(timeout if timeout is not None else 0.0)
        if isinstance(started, Closed):
            if self._error is not None:
                raise self._error
            return None
        return started

    def end_run(self, holder: ExplicitHolder) -> None:
        """``holder`` is done with its run: what it processed counts, what it never handed over goes back
        (or, its shard paused, waits for resume())."""
        with self._hand_lock:
            run = self._runs.pop(holder, None)
            if run is None:
                return
            progress = run.progress
            if progress.paused and run.handed < run.end and not progress.phase.revoked and not self._closed:
                self._set_aside(run)
            else:
                progress.end_run(run)

    def wait_for_lease(self, progress: ShardProgress, timeout: float | None = None) -> bool:
        """Wait until the shard's lease is confirmed or lost (a record may be handed over, or not);
        False once closed, or after ``timeout`` s (None: no limit)."""
        return self._wait_for_lease(progress, Deadline(timeout))

    def _taken(self, handed: tuple[Run, int] | Closed | None, timeout: float | None) -> Taken | None:
        """What :meth:`_hand` gave, as (record, progress, token); raising as :meth:`take` says."""
        if handed is None:
            raise NoRecordWithin(timeout if timeout is not None else 0.0)
        if isinstance(handed, Closed):
            if self._error is not None:
                raise self._error
            return None
        run, i = handed
        record = run.records[i]
        if self._wants_deliveries:
            self._stats.record_delivered(run.progress.shard_id, age_of(record.approximate_arrival_timestamp))
        return record, run.progress, run.base + i

    def _hand(self, holder: Hashable, deadline: Deadline, *, auto: bool) -> tuple[Run, int] | Closed | None:
        """Hand over ``holder``'s next record: (its run, its index); None at the deadline; CLOSED.

        Ends the holder's run once it is handed over entirely or its shard is revoked, and
        starts the next run from the queue. A record whose shard's lease is not known to be
        ours (not confirmed for a while: the process was paused, or DynamoDB is out of reach)
        waits for the lease to be confirmed or lost.
        """
        while True:
            waiting_for: ShardProgress | None = None
            with self._hand_lock:
                if self._closed:
                    return CLOSED
                if self._given_back:
                    self._end_given_back()
                run = self._runs.get(holder)
                if run is not None:
                    progress, i = run.progress, run.handed
                    if auto:
                        run.processed = i  # asking again: the record in hand is processed
                    offered = run.offer(i, self.monotonic())
                    if offered is HANDED:
                        return run, i
                    if offered is STALE:
                        waiting_for = progress
                    elif i < run.end and not progress.phase.revoked and progress.paused:  # the rest waits for resume()
                        self._next_run(holder)
                        self._set_aside(run)
                        continue
                    else:  # handed over entirely, or its shard is being handed off: the new owner delivers the rest
                        self._next_run(holder)
                        progress.end_run(run)
                        if holder in self._runs:
                            continue  # a run another thread took for this holder meanwhile
            if waiting_for is not None:
                if not self._wait_for_lease(waiting_for, deadline):
                    return CLOSED if self._closed else None
                continue
            started = self._start_run(deadline, holder)
            if not isinstance(started, Run):
                return started

    def _next_run(self, holder: Hashable) -> None:
        """The holder's run is over: the next one it took becomes its run (hand lock held)."""
        queued = self._next_runs.get(holder)
        if queued:
            self._runs[holder] = queued.popleft()
            if not queued:
                del self._next_runs[holder]
        else:
            del self._runs[holder]

    def _start_run(self, deadline: Deadline, holder: Hashable) -> Run | Closed | None:
        """The next chunk of the queue as ``holder``'s run, registered as delivered; None at the deadline; CLOSED.

        Taking a chunk, registering it and giving it to its holder happen under one lock, so that
        with several calling threads each shard's records are registered and handed over in
        shard order. A holder that still has a run (manual mode's, shared by several threads)
        gets the new one after it.
        """
        lock = self._take_lock
        if not acquire(lock, deadline, lambda: self._closed):
            return CLOSED if self._closed else None
        try:
            while True:
                taken = self._queue.get(deadline)
                if isinstance(taken, Run):  # set aside at a pause, resumed: registered already
                    run = taken
                elif not isinstance(taken, tuple):
                    return taken
                else:
                    records, progress = taken
                    started = progress.start_run(records)
                    if started is None:
                        continue  # its shard is being handed off: the new owner delivers these
                    run = started
                progress = run.progress
                with self._hand_lock:
                    if self._closed:  # a stop came while it waited: nothing more is handed over
                        progress.end_run(run)
                        return CLOSED
                    if holder in self._runs:
                        self._next_runs.setdefault(holder, deque()).append(run)
                    else:
                        self._runs[holder] = run
                return run
        finally:
            lock.release()

    def _wait_for_lease(self, progress: ShardProgress, deadline: Deadline) -> bool:
        """Wait until the shard's lease is confirmed or lost; False at the deadline or once closed."""
        while not progress.fresh_or_revoked():
            if self._closed or deadline.passed():
                return False
            left = deadline.remaining()
            progress.wait(progress.fresh_or_revoked, _LEASE_WAIT if left is None else min(_LEASE_WAIT, left))
        return True


_last_arrival: tuple[dt.datetime | None, float] = (None, 0.0)


def age_of(timestamp: dt.datetime) -> float:
    """Seconds since ``timestamp``. The records of a page written together share one arrival datetime (see
    records_parser): its epoch is kept, as one tuple that every thread may replace (a race only repeats the
    conversion)."""
    global _last_arrival  # noqa: PLW0603
    last, epoch = _last_arrival
    if last is not timestamp:
        epoch = timestamp.timestamp()
        _last_arrival = (timestamp, epoch)
    age = time.time() - epoch
    return age if age > 0.0 else 0.0
