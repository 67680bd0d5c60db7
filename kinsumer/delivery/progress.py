"""Delivery bookkeeping of one captured shard, and the Checkpoint callable.

A :class:`ShardProgress` lives as long as one capture of a shard. The shard's reader
counts what it pushes, ``next*()`` registers what it delivers (a :class:`Run` at a time),
and each record's :class:`Checkpoint` (or, in auto mode, the caller's next call)
acknowledges it. It is thread-safe and never blocks for long: every method holds one short
lock.

A record handed out is known in one of three shapes, by how it is acknowledged, and on purpose:
a position in a :class:`Run` (``next()`` in auto mode, ``process()``'s one worker: acknowledged
in order by moving ``processed``, nothing made per record), a ``Taken`` tuple of the record, its
progress and its token (``process()``'s workers, and manual mode before its Checkpoint: by token,
in any order), and the caller's :class:`Checkpoint`. One shape for all (the Go library's record
carries its checkpointer) costs an object per record where the runs make none: a Checkpoint
takes 0.95 µs to make, a two-slot object 0.12 µs, against 3.3 µs of CPU per record for all of
``next()`` (in-memory bench, 2026-12-06); ``(run, index)`` in place of ``Taken`` costs the same
tuple but keeps a parked record's whole chunk (up to 64 records, out of the byte budget) alive.
"""

from __future__ import annotations

import datetime as dt
import enum
import math
import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, NamedTuple, TypeVar

import attrs

from .. import clock
from ..reading.position import Position
from ..record import Record
from ..waiting import Deadline, nap
from .phase import ShardPhase
from .tracker import CheckpointTracker

__all__ = [
    "ARRIVAL_SAMPLE", "HANDED", "HELD", "STALE", "STOPPED", "Checkpoint", "Checkpointed", "Offer", "Run",
    "ShardProgress", "Stopped",
]  # fmt: skip

#: One arrival time is kept per this many records read (:meth:`ShardProgress.fetched`): the age of the oldest
#: record in hand is that of the first of its group, older by at most the arrivals of this many records.
ARRIVAL_SAMPLE = 32


class Run:
    """Consecutive records of one shard, registered as delivered together and handed over in order.

    ``next*()`` takes records from the queue a run at a time (one lock round and one
    registration per run, not per record) and hands them over one by one: ``records[:handed]``
    were handed over; in auto mode ``records[:processed]`` were processed (a holder's previous
    record counts once it asks for the next one), of which ``records[:folded]`` were already
    acknowledged in the shard's tracker. The token of ``records[i]`` is ``base + i``.

    The holder changes ``handed`` and ``processed`` under the delivery's lock, without the
    shard's: the shard reads them when it needs its checkpoint (see :meth:`ShardProgress._fold`).
    """

    __slots__ = ("base", "end", "folded", "handed", "processed", "progress", "records")

    def __init__(self, progress: ShardProgress, records: list[Record], base: int) -> None:
        self.progress = progress
        self.records = records
        self.base = base
        self.end = len(records)
        self.handed = 0
        self.processed = 0
        self.folded = 0

    def offer(self, i: int, now: float, gate: Callable[[Position], bool] | None = None) -> Offer:
        """The rule for handing a record over, written here only: ``records[i]`` goes out (HANDED: ``handed``
        moved past it) if the run is not over, its shard is neither revoked (its phase) nor paused, its lease is
        fresh at ``now`` (else STALE: wait until it is confirmed or lost, then offer again) and ``gate`` (the
        crash-loop guard's reservation) lets its position through; else HELD: it stays.

        ``handed`` moves before the last look at ``revoked``: a handoff revokes first and counts what is
        handed over after, so one of the two sees the other, and no record goes out that the handoff did
        not wait for (a look at ``revoked`` before moving ``handed`` could be overtaken).
        """
        progress = self.progress
        phase = progress.phase
        if i >= self.end or phase.revoked or progress.paused:
            return HELD
        if now >= progress.fresh_until:
            return STALE
        if gate is not None:
            record = self.records[i]
            if not gate((record.sequence_number, record.sub_sequence_number)):
                return HELD
        self.handed = i + 1
        if phase.revoked:
            self.handed = i
            return HELD
        return HANDED


class Offer(enum.Enum):
    """What :meth:`Run.offer` did with a record."""

    #: handed over
    HANDED = "handed"
    #: not now: the shard's lease must be confirmed first
    STALE = "stale"
    #: not handed: the run is over, its shard revoked or paused, or the gate closed
    HELD = "held"


HANDED, STALE, HELD = Offer.HANDED, Offer.STALE, Offer.HELD


class ShardProgress:
    """What has been pushed, delivered and acknowledged under one capture of a shard.

    ``phase.revoked`` and ``fresh_until`` are read without the lock on the per-record path.
    """

    __slots__ = (
        "_arrivals",
        "_cond",
        "_delivered",
        "_fetched",
        "_initial",
        "_lock",
        "_pushed",
        "_released",
        "_runs",
        "_tracker",
        "_version",
        "_waiting",
        "_watchers",
        "fresh_until",
        "handling",
        "paused",
        "phase",
        "shard_id",
    )

    def __init__(self, shard_id: str, checkpoint: Position | None, phase: ShardPhase | None = None) -> None:
        self.shard_id = shard_id
        if phase is None:  # on its own (tests): a shard just captured
            phase = ShardPhase()
            phase.captured()
        #: The shard's phase (its worker's): revoked, nothing more of this capture is handed out.
        self.phase = phase
        self._lock = threading.Lock()  # taken directly on the per-run paths
        self._cond = threading.Condition(self._lock)
        self._waiting = 0  # threads in wait()
        self._watchers: tuple[Callable[[], None], ...] = ()  # told of every change wait() may be waiting for
        self._version = 0  # bumped by every change wait() may be waiting for
        self._initial = checkpoint
        self._tracker: CheckpointTracker[Record] = CheckpointTracker()
        self._runs: list[Run] = []  # runs being handed over
        self._pushed = 0  # records the reader put into the queue
        self._delivered = 0  # records registered as delivered (retracted ones excluded)
        self._fetched = 0  # records the reader read, to be pushed in order (their tokens follow the same order)
        #: (index among the records read, arrival) of every ARRIVAL_SAMPLE-th record read not yet finished with
        self._arrivals: deque[tuple[int, dt.datetime]] = deque()
        self._released = False  # no more acknowledgements (shard given up)
        #: Monotonic time until which the shard's lease is known to be ours.
        self.fresh_until = math.inf
        #: ``Kinsumer.pause()``: nothing more of this capture is handed out until it is resumed.
        self.paused = False
        #: ``process()``'s state of this capture (a ``handling.capture.CaptureHandling``: this layer knows nothing
        #: of process()), made when the shard is captured or process() first touches it. It lives as long as the
        #: capture: a map beside it kept every capture alive, its crash-loop guard holding the capture's worker.
        self.handling: object | None = None

    def confirm(self, fresh_until: float) -> None:
        """The shard's lease was confirmed: records may be delivered until ``fresh_until`` (monotonic)."""
        with self._lock:
            self.fresh_until = fresh_until
            self._changed()

    def fresh_or_revoked(self) -> bool:
        """What a delivery waiting for the lease waits for: a confirmation, or the shard's loss."""
        return self.phase.revoked or clock.monotonic() < self.fresh_until

    @property
    def released(self) -> bool:
        """The capture is over (its shard given up): acknowledgements count no more."""
        return self._released

    @property
    def checkpoint(self) -> Position | None:
        with self._lock:
            return self._checkpoint()

    @property
    def outstanding(self) -> int:
        """Delivered records not yet acknowledged."""
        with self._lock:
            return self._outstanding()

    def fetched(self, records: list[Record]) -> None:
        """The shard's reader read ``records``, to be pushed next, in order: their arrival is kept, one per
        :data:`ARRIVAL_SAMPLE` records, for :meth:`oldest_arrival` (a cost per page, not per record)."""
        with self._lock:
            first = self._fetched
            self._arrivals.extend(
                (first + i, records[i].approximate_arrival_timestamp) for i in range(0, len(records), ARRIVAL_SAMPLE)
            )
            self._fetched = first + len(records)
            self._drop_arrivals(self._tracker.prefix_end)

    def oldest_arrival(self) -> dt.datetime | None:
        """When the oldest record of the capture this client holds and has not finished with (read, queued,
        delivered and not yet acknowledged) reached the stream, to :data:`ARRIVAL_SAMPLE` records; None if
        it holds none. Records are finished with in order of the shard: the oldest is the first one not
        acknowledged in order. Amortised O(1)."""
        with self._lock:
            for run in self._runs:
                self._fold(run)
            done = self._tracker.prefix_end  # tokens count the records read, in the order they were read
            self._drop_arrivals(done)
            return self._arrivals[0][1] if done < self._fetched and self._arrivals else None

    def _drop_arrivals(self, done: int) -> None:
        """Forget the arrivals of groups every record of which is finished with (lock held)."""
        arrivals = self._arrivals
        if done >= self._fetched:
            arrivals.clear()
            return
        while len(arrivals) > 1 and arrivals[1][0] <= done:
            arrivals.popleft()

    def pushed(self, count: int) -> None:
        with self._lock:
            self._pushed += count

    def start_run(self, records: list[Record]) -> Run | None:
        """Register ``records`` as delivered, to be handed over in order; None once revoked."""
        with self._lock:
            if self.phase.revoked:
                return None
            run = Run(self, records, self._tracker.deliver_many(records))
            self._runs.append(run)
            self._delivered += run.end
            return run

    def end_run(self, run: Run, *, abandon_in_hand: bool = False) -> None:
        """The run is over: its processed records count, those never handed over are retracted.

        Records not handed over are left for the shard's next owner, so a run ends early only
        once the shard is revoked or the consumer stops. With ``abandon_in_hand``, the records
        handed over but not processed are retracted too (an auto-mode caller that failed).
        """
        with self._lock:
            self._fold(run)
            self._runs.remove(run)
            keep = run.processed if abandon_in_hand else run.handed
            if keep < run.end:
                self._tracker.retract(run.base + keep, run.base + run.end - 1)
                self._delivered -= run.end - keep
            self._changed()

    def ack(self, token: int) -> None:
        """Acknowledge a delivered record; a no-op once the shard is released."""
        with self._lock:
            if self._released:
                return
            if self._tracker.ack(token) and self._outstanding() == 0:
                self._changed()

    def retract(self, token: int) -> None:
        """A delivered record will not be handled here after all (``process()`` leaving): it no longer
        counts as outstanding, and the shard's next owner delivers it."""
        with self._lock:
            if not self._released:
                self._tracker.retract(token, token)
                self._changed()

    def revoke(self) -> None:
        """Stop deliveries (the shard's phase revoked): records still queued for this capture will be dropped;
        those waiting for the lease look again."""
        with self._lock:
            self.phase.revoke()
            self._changed()

    def release(self) -> Position | None:
        """Stop acknowledgements; returns the final checkpoint."""
        with self._lock:
            checkpoint = self._checkpoint()
            self._released = True
            return checkpoint

    def all_acknowledged(self) -> bool:
        """Every delivered record is acknowledged."""
        with self._lock:
            return self._outstanding() == 0

    def all_processed(self) -> bool:
        """Every pushed record was delivered, handed over and acknowledged (or given back: see
        :meth:`gave_back`). Records of a run not handed over yet count as not processed: a shard at its
        end is finished only once its holder has had them all (:meth:`all_acknowledged`, for a handoff,
        leaves them out: they are given back)."""
        with self._lock:
            self._fold_runs()
            return self._delivered == self._pushed and self._tracker.outstanding == 0

    def gave_back(self) -> bool:
        """Records of this capture were given back (never to be acknowledged here): the checkpoint
        stops before the first of them, and only a next capture delivers them again."""
        with self._lock:
            return self._tracker.retracted > 0

    # ----------------------------------------------------------------- with the lock held

    def _fold(self, run: Run) -> None:
        """Acknowledge what the run's holder processed since the last fold."""
        processed = run.processed  # one read: the holder may move it on meanwhile
        if processed > run.folded and not self._released:
            self._tracker.ack_range(run.base + run.folded, run.base + processed - 1)
            run.folded = processed

    def _checkpoint(self) -> Position | None:
        for run in self._runs:
            self._fold(run)
        last = self._tracker.checkpoint
        return self._initial if last is None else (last.sequence_number, last.sub_sequence_number)

    def _outstanding(self) -> int:
        """Records handed over and not yet acknowledged (registered ones not handed over excluded)."""
        not_handed = self._fold_runs()  # first: folding acknowledges what the holders processed
        return self._tracker.outstanding - not_handed

    def _fold_runs(self) -> int:
        """Fold what every run's holder processed into the tracker; how many of the runs' records are not
        handed over yet."""
        not_handed = 0
        for run in self._runs:
            self._fold(run)
            not_handed += run.end - run.handed
        return not_handed

    def _changed(self) -> None:
        """Something wait() may be waiting for happened."""
        self._version += 1
        if self._waiting:
            self._cond.notify_all()
        for watcher in self._watchers:
            watcher()

    def watch(self, watcher: Callable[[], None]) -> None:
        """Have ``watcher`` called (under the progress's lock: it must not block) on every change a
        :meth:`wait` may be waiting for: how a waiter that is not a thread learns it."""
        with self._lock:
            self._watchers = (*self._watchers, watcher)

    def wait(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait up to ``timeout`` s for ``predicate`` (one of the methods above) to hold."""
        deadline = Deadline(timeout)
        while True:
            with self._lock:
                version = self._version
            if predicate():
                return True
            if deadline.passed():
                return False
            with self._cond:
                if self._version != version:
                    continue  # it changed while the predicate was evaluated: evaluate again
                self._waiting += 1
                try:
                    nap(self._cond, deadline)
                finally:
                    self._waiting -= 1


@attrs.frozen
class Checkpoint:
    """Call it once the record is processed. Never blocks; idempotent; thread-safe.

    Calls may come in any order from any thread: the stored checkpoint advances over the
    contiguous prefix of processed records. After the shard moved to another client the
    call does nothing.
    """

    shard_id: str
    sequence_number: str
    #: The record's index in its KPL aggregate; None for a record that was not aggregated.
    sub_sequence_number: int | None
    _progress: ShardProgress = attrs.field(repr=False, eq=False)
    _token: int = attrs.field(repr=False)
    #: The name of the record's stream.
    stream: str = ""

    def __call__(self) -> None:
        self._progress.ack(self._token)


T = TypeVar("T")


class Checkpointed(NamedTuple, Generic[T]):
    """What ``next_with_checkpointer()`` (``value``: the record's data) and ``next_record_with_checkpointer()``
    (``value``: the :class:`~kinsumer.Record`) return while running: a pair, unpacked as before
    (``data, checkpoint = got``), whose ``checkpoint`` is never None. Once stopped they return :class:`Stopped`.

    A type checker tells the two apart by ``got.checkpoint is not None`` (or ``got.value``), and then
    knows both parts::

        while (got := k.next_with_checkpointer()).checkpoint is not None:
            data, checkpoint = got  # bytes, Checkpoint
    """

    #: The record's data (``next_with_checkpointer()``) or the whole record (``next_record_with_checkpointer()``).
    value: T
    #: Call it once the record is processed.
    checkpoint: Checkpoint


class Stopped(NamedTuple):
    """What the ``*_with_checkpointer()`` calls return once the consumer stopped: ``(None, None)``, equal to that
    tuple and unpacked the same way."""

    value: None = None
    checkpoint: None = None


#: The one :class:`Stopped` value.
STOPPED = Stopped()
