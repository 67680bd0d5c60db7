"""One worker's job: records of one shard, in order, until none of it is left to handle for now.

A job begins the shard's crash-loop guard (once per capture), hands each record out through it
(never past the stored reservation) and handles it (:class:`~.attempts.Attempts`), or a batch of
them (:class:`~.batches.Batches`), or, during an episode, goes the careful way
(:mod:`.careful_mode`). A shard may be given up and captured again while its records wait: each
capture's records go with their own guard, and those of a capture given up go back. Whatever ends
a job by raising (``RecordFailed``, a fatal error, Ctrl-C) leaves its records not done
unacknowledged and gives them back.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable, Sequence

from ..delivery.delivery import Taken
from ..delivery.progress import ShardProgress
from ..errors import RecordFailed
from ..reading.position import Position
from .attempts import Attempts
from .batches import Batches
from .capture import guard_of, handling_of
from .careful_mode import handle_carefully, position_of
from .guard import ShardGuard
from .hooks import Lifecycle
from .options import Options, Origin, RunSpans, no_run_spans
from .scheduler import LANE_SEPARATOR, Scheduler

__all__ = ["JobRecords", "ShardJobs", "by_key", "by_key_group", "give_back", "in_shard_order", "paused"]


class JobRecords(threading.local):
    """The records of the current worker's job not done yet (given back if the job ends early)."""

    def __init__(self) -> None:
        self.current: list[Taken] = []


class ShardJobs:
    """Runs the jobs of ``process()``'s workers (see the module's description)."""

    def __init__(
        self,
        options: Options,
        origin: Origin,
        attempts: Attempts,
        scheduler: Scheduler[Taken],
        stopping: threading.Event,
        batches: Batches | None,
        lifecycle: Lifecycle | None = None,
        *,
        failing: threading.Event | None = None,
        runs: RunSpans = no_run_spans,
    ) -> None:
        """``failing``: given with ``ordering="key"`` (records of a shard in handlers side by side, see
        :mod:`.scheduler`), set when ``process()`` fails: until then, the records of a shard being given
        up (or of a consumer that stops) that precede one handed out are still handled."""
        self._options = options
        self._runs = runs  # a job's records are one run (its span)
        self._by_key = failing is not None
        self._failing = failing
        self._lifecycle = lifecycle
        self._origin = origin
        self._attempts = attempts
        self._scheduler = scheduler
        self._stopping = stopping
        self._batches = batches
        self._job = JobRecords()

    def run(self, lane: str, items: list[Taken]) -> None:
        """Handle ``items`` (records of one lane of a shard, in order) and the records of it that come meanwhile.

        After RecordFailed nothing more of that capture of the shard is handled in this process (its
        next owner tries the record again).
        """
        job = self._job
        job.current = items
        try:
            with self._runs(items[0][1].shard_id if items else lane):
                self._run_lane(lane, items)
        except RecordFailed as failed:
            for record, progress, _ in job.current:
                if record is failed.failure.record:
                    handling_of(progress).failed = True
            raise
        finally:
            give_back(job.current)
            job.current = []

    def _run_lane(self, lane: str, items: list[Taken]) -> None:
        """See :meth:`run`; ``self._job.current`` holds the records not done yet."""
        job = self._job
        # with ordering by key, a shard's own lane is for careful mode: once that is over, what waits
        # there goes to the keys' lanes when the lane is released (see Scheduler.release)
        serial_lane = self._by_key and LANE_SEPARATOR not in lane
        guard: ShardGuard | None = None
        while items:
            progress = items[0][1]
            run = [taken for taken in items if taken[1] is progress]  # one capture's records (a shard may be
            rest = [taken for taken in items if taken[1] is not progress]  # given up and taken again meanwhile)
            guard = self.begun(progress)
            if guard is None or blocked(progress) or (progress.phase.revoked and not self._by_key):
                give_back(run)  # its next owner delivers them
                run = []
            elif self._ending(progress):
                run = self._owed(run)
            if not run or guard is None:
                items = job.current = rest
            else:
                left = self._careful(run, guard) if guard.careful else run
                while left and not guard.careful:
                    if self._batches is not None:
                        left = self._batches.gather(lane, left)
                        job.current = left + rest
                    done = self._settle(left, guard)
                    left = left[done:]
                    job.current = left + rest
                    if done and self._ending(progress):
                        left = self._owed(left)
                        job.current = left + rest
                    elif done == 0 or progress.phase.revoked or self._stopping.is_set():
                        break
                if left:  # the consumer stops, or the shard is being given up: the rest is given back
                    return
                items = job.current = rest
            if not items and (not self._stopping.is_set() or self._finishing()):
                if serial_lane and not (guard is not None and guard.careful):
                    return  # what waits in the lane goes to the keys' lanes when it is released
                if progress.paused and not self._stopping.is_set():
                    return  # what waits in the lane waits for resume()
                items = job.current = self._scheduler.more(lane, self._options.max_records)

    def _ending(self, progress: ShardProgress) -> bool:
        """With ordering by key: the shard is being given up, or the consumer stops."""
        return self._by_key and (progress.phase.revoked or self._stopping.is_set())

    def _finishing(self) -> bool:
        """With ordering by key, after a clean stop: records before one handed out are still handled."""
        return self._failing is not None and not self._failing.is_set()

    def _owed(self, items: list[Taken]) -> list[Taken]:
        """Of ``items`` (one capture's, in shard order) those that precede a record handed out: handled even
        as their shard is given up, so that the checkpoint reaches the records done after them (none is
        handled twice on a clean handoff). The others are given back."""
        owed = 0
        if self._finishing():
            guard = guard_of(items[0][1]) if items else None
            while owed < len(items) and guard is not None and not items[owed][1].released:
                if items[owed][2] >= guard.handed:
                    break
                owed += 1
        give_back(items[owed:])
        return items[:owed]

    def begun(self, progress: ShardProgress) -> ShardGuard | None:
        """The shard's crash-loop guard, begun (and ``on_assigned`` told of the capture, before its first
        record goes out); None if the shard is not ours any more."""
        guard = guard_of(progress)
        if guard is None:  # a capture made without one (tests that build deliveries by hand)
            guard = _UNGUARDED
        elif not guard.began and not guard.begin(self._options.max_attempts):
            return None
        if self._lifecycle is not None and not progress.phase.revoked and handling_of(progress).announce():
            self._lifecycle.call("on_assigned", progress.shard_id)
        return guard

    def _settle(self, items: list[Taken], guard: ShardGuard) -> int:
        """Hand ``items`` out (one record, or a batch) until each is done; how many are (fewer only on a stop)."""
        if self._by_key:  # records of the shard go out of shard order: counted up to each one's token
            for record, _, token in items:
                if not guard.hand_through(position_of(record), token + 1):
                    return 0
        else:
            for record, _, _ in items:
                if not guard.hand(position_of(record)):
                    return 0
        if self._batches is not None:
            return self._batches.handle(items)
        record, progress, token = items[0]
        if self._attempts.until_done(record, progress) == "left":
            return 0
        progress.ack(token)
        return 1

    def _careful(self, items: list[Taken], guard: ShardGuard) -> list[Taken]:
        return handle_carefully(
            items, guard, self._attempts, lambda: self._scheduler.section(exclusive=True), self._origin, self._job
        )


def blocked(progress: ShardProgress) -> bool:
    """A record of this capture failed for good here (RecordFailed): nothing more of it is handled."""
    return handling_of(progress).failed


def in_shard_order(taken: Taken) -> bool:
    """The record must go in shard order, one at a time (with ``ordering="key"`` too): its capture is in
    the crash-loop guard's careful mode."""
    guard = guard_of(taken[1])
    return guard is not None and (not guard.began or guard.careful)


def paused(taken: Taken) -> bool:
    """The record's shard is paused (``Kinsumer.pause()``): it waits."""
    return taken[1].paused


def by_key(taken: Taken) -> str:
    """A record's lane within its shard with ``ordering="key"``: its partition key."""
    return taken[0].partition_key


def by_key_group(groups: int) -> Callable[[Taken], str]:
    """A record's lane within its shard for batches with ``ordering="key"``: one of ``groups`` groups of
    partition keys (a hash, the same in every process), so a batch holds many keys, each in order."""

    def group(taken: Taken) -> str:
        return str(zlib.crc32(taken[0].partition_key.encode()) % groups)

    return group


def give_back(items: Sequence[Taken]) -> None:
    """Records taken but not handled here: their shard's next owner delivers them."""
    for _, progress, token in items:
        progress.retract(token)


class _Unguarded(ShardGuard):
    """No crash-loop guard: every record in normal mode, nothing stored."""

    def note_retrying(self, attempts: int | None, error: str = "") -> None:
        pass

    def __init__(self) -> None:
        pass

    @property
    def careful(self) -> bool:
        return False

    @property
    def began(self) -> bool:
        return True

    def begin(self, max_attempts: int) -> bool:
        return True

    def hand(self, position: Position) -> bool:
        return True


_UNGUARDED = _Unguarded()
