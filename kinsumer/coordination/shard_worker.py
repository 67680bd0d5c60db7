"""One shard assigned to this client, on a thread of its own: capture, read, then finish or hand off.

The worker ties together the shard's :class:`~.lease.ShardLease` (the row in DynamoDB), a
:class:`~kinsumer.reading.reader.ShardReader` (records from Kinesis) and the delivery's
bookkeeping of the capture. Its commits run on the client's :class:`~.committer.Committer`.
Its thread is started by the :class:`~.shard_pool.ShardPool` and ends on its own: when the
shard is finished, handed off, or lost to another client.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..aws.retry import Stopped
from ..aws.tables import now_ms
from ..delivery.progress import ShardProgress
from ..handling.guard import ShardGuard
from ..reading.position import Position, StartPosition
from ..reading.reader import ReaderFactory, ShardReader
from ..record import Record
from ..waiting import join_thread
from .checkpoints_table import CheckpointRow
from .committer import Commit, Committer
from .lease import LeaseState, ShardLease
from .runtime import Runtime

__all__ = ["ShardState", "ShardWorker"]

log = logging.getLogger("kinsumer.shard")

_RELEASE_DEADLINE = 5.0  # seconds spent retrying the final release of a handoff before giving up on it


class ShardState(enum.Enum):
    CAPTURING = "capturing"  # waiting to take the row (its previous owner lets go, or is found dead)
    READING = "reading"
    FINISHING = "finishing"  # read to its end: waiting for its records to be processed
    HANDING_OFF = "handing off"  # given up: waiting for delivered records, then releasing
    ENDED = "ended"  # the thread is done (finished, released, lost, or never captured)


class ShardWorker:
    """Captures, reads and gives up one shard on its own thread."""

    def __init__(
        self,
        runtime: Runtime,
        shard_id: str,
        parents: tuple[str, ...],
        committer: Committer,
        readers: ReaderFactory,
    ) -> None:
        self.shard_id = shard_id
        self.lease = ShardLease(runtime, shard_id, parents)
        self.state = ShardState.CAPTURING
        self.millis_behind_latest: int | None = None  # from the last page read
        self._rt = runtime
        self._committer = committer
        self._readers = readers
        self._stop = threading.Event()
        self._progress: ShardProgress | None = None
        self._thread = threading.Thread(target=self._run, name=f"kinsumer-{shard_id}", daemon=True)

    # ----------------------------------------------------------------- control (other threads)

    def start(self) -> None:
        self._thread.start()

    def request_stop(self) -> None:
        """Hand the shard off: stop reading, wait for acknowledgements, release."""
        self._stop.set()
        progress = self._progress
        if progress is not None:
            progress.revoke()  # no more deliveries from now on
        self._rt.delivery.wake_pushers()

    def ownership_lost(self) -> None:
        """Another client owns the shard now (a commit said so): drop it without writing."""
        self.request_stop()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float | None) -> None:
        join_thread(self._thread, timeout)

    @property
    def captured(self) -> bool:
        return self.lease.state is not LeaseState.UNCLAIMED

    @property
    def checkpoint(self) -> Position | None:
        """How far this client processed the shard."""
        progress = self._progress
        return progress.checkpoint if progress is not None else self.lease.committed

    @property
    def retrying(self) -> int | None:
        """``process()`` is calling a failing handler again for a record of the shard: the attempts so far."""
        progress = self._progress
        return progress.retrying if progress is not None else None

    def to_commit(self) -> Commit:
        """The checkpoint and lag, and the crash-loop guard's new reservation. In careful mode the
        guard's own writes move the checkpoint (with the markers), so a commit leaves it."""
        progress = self._progress
        guard = progress.guard if progress is not None else None
        if guard is None:
            return Commit(self.checkpoint, self.millis_behind_latest)
        if guard.careful:
            return Commit(None, self.millis_behind_latest)
        reservation = guard.reservation()
        if reservation is None:
            return Commit(self.checkpoint, self.millis_behind_latest)
        text, token = reservation
        return Commit(self.checkpoint, self.millis_behind_latest, text, lambda: guard.reserved(token))

    # ----------------------------------------------------------------- the thread

    def _run(self) -> None:
        try:
            row = self._capture()
        except Stopped:
            row = None  # asked to stop before the shard was ours
        except Exception as exc:  # noqa: BLE001
            self._rt.fail(exc, f"the consumer of {self.shard_id}")
            row = None
        if row is not None:
            self._own(row)
        self.state = ShardState.ENDED

    def _own(self, row: CheckpointRow) -> None:
        rt = self._rt
        self._progress = progress = rt.delivery.open_shard(self.shard_id, row.checkpoint)
        progress.guard = ShardGuard(row, _GuardWrites(self), self._wait_unless_stopping, rt.config.commit_frequency)
        progress.confirm(self.lease.fresh_until)
        self.lease.on_confirmed = progress.confirm  # deliveries wait while the lease is not confirmed
        if self._stop.is_set():
            progress.revoke()
        self._committer.add(self)
        rt.stats.shard_gained(self.shard_id)
        start = row.checkpoint or (f"StartAt {row.start_at} ms" if row.start_at else rt.config.initial_position)
        log.info("captured %s at %s", self.shard_id, start)
        try:
            if self._read(progress, row) and self._finish(progress):
                return
            if self.lease.state is LeaseState.LOST:
                self._abandon(progress)
            else:
                self._hand_off(progress)
        finally:
            self._committer.remove(self)
            rt.stats.shard_lost(self.shard_id)  # once, whichever way the shard was given up

    def _call(self, fn: Callable[[], Any], operation: str) -> Any:
        """An AWS call of this thread: transient faults retried until a stop request."""
        return self._rt.call(fn, operation, sleep=self._sleep, should_stop=self._stop.is_set)

    def _sleep(self, seconds: float) -> None:
        if self._stop.wait(seconds):
            raise Stopped(self.shard_id)

    def _wait_unless_stopping(self, seconds: float) -> bool:
        """Wait ``seconds``; False (at once) if the shard is being given up."""
        return not self._stop.wait(seconds)

    # ----------------------------------------------------------------- capture

    def _capture(self) -> CheckpointRow | None:
        """Take the row; None if the shard is finished. Waits while a live client owns it.

        The conditional capture is tried first (usually the shard is free: one round trip);
        the row is read to learn why a capture failed, and polled while a live client owns it.
        A row whose owner is not live is taken as read (:mod:`.membership`). Nothing is
        captured while this client's own heartbeat is late.
        """
        rt, lease = self._rt, self.lease
        poll = rt.config.throttle_delay
        attempt = True
        while not self._stop.is_set():
            if not rt.liveness.fresh():
                self._sleep(poll)
                continue
            if attempt:
                captured = lease.try_capture(self._call)
                if captured is not None:
                    return captured
            row = lease.read_row(self._call)
            if row is not None and row.finished and not row.foreign(rt.stream_identity):
                log.debug("%s is already finished", self.shard_id)
                rt.request_refresh()
                return None
            if row is not None and row.owner_id not in (None, rt.client_id):
                if rt.membership.may_take(row.owner_id, row.last_update, now_ms(), row.owner_instance):
                    captured = lease.try_capture(self._call, taking=row)
                    if captured is not None:
                        log.info("took %s from client %s, which is not live", self.shard_id, row.owner_id)
                        return captured
                else:  # a live owner: wait for its release (or its silence)
                    self._sleep(poll)
                attempt = False  # read again before trying: a failed capture is a write
                continue
            if attempt:
                self._sleep(poll)  # it looks free but the capture failed: it just changed hands
            attempt = True
        return None

    # ----------------------------------------------------------------- reading

    def _read(self, progress: ShardProgress, row: CheckpointRow) -> bool:
        """Read into the delivery until the shard ends (True) or a stop request (False).

        A shard with no checkpoint starts at its recorded start, else at ``initial_position``.
        A LATEST or AT_TIMESTAMP start is recorded before the first record is handed on, so
        that a restart or the shard's next owner starts there, not later (nothing written
        after this first start is skipped). A LATEST start is the service's time when the
        reader's first iterator was made.
        """
        rt = self._rt
        cfg = rt.config
        start = row.resume_at
        unrecorded = start is None
        if start is None:
            start = StartPosition.initial(cfg.initial_position, cfg.initial_timestamp)
            unrecorded = start.kind != "TRIM_HORIZON"
        self.state = ShardState.READING
        reader: ShardReader | None = None
        try:
            reader = self._readers(self.shard_id, start, self._stop)
            while True:
                page = reader.next_page()
                if unrecorded:
                    at = start.timestamp if start.timestamp is not None else reader.latest_at
                    if at is not None and not self.lease.record_start(int(at.timestamp() * 1000), self._call):
                        return False  # not ours any more
                    unrecorded = False
                self.millis_behind_latest = page.millis_behind_latest
                if page.raw and not self._push(progress, page.records()):
                    return False
                if page.end_of_shard:
                    return True
        except Stopped:
            return False
        except Exception as exc:  # noqa: BLE001 - reported to the caller, then the shard is handed off
            rt.fail(exc, f"the reader of {self.shard_id}")
            return False
        finally:
            if reader is not None:
                reader.close()

    def _push(self, progress: ShardProgress, records: list[Record]) -> bool:
        """Hand ``records`` to the delivery while the lease is fresh; False on a stop or a lost lease."""
        lease, stop = self.lease, self._stop

        def must_pause() -> bool:
            return stop.is_set() or not lease.fresh()

        delivery = self._rt.delivery
        start = 0
        while start < len(records):
            if not self._confirm_lease() or delivery.closed:
                return False
            start += delivery.push(progress, records[start:], must_pause)
        return True

    def _confirm_lease(self) -> bool:
        """Return at once if the lease is fresh; else commit now. False if it is lost (or a stop came)."""
        rt, lease = self._rt, self.lease
        while not lease.fresh():
            if self._stop.is_set() or lease.state is not LeaseState.OWNED:
                return False
            if not rt.liveness.fresh():  # our heartbeat is late: the others may count us dead
                self._sleep(rt.config.throttle_delay)
                continue
            log.info(
                "the heartbeat of this client was late; confirming the lease of %s before reading on", self.shard_id
            )
            confirmed = self._committer.commit(self, deadline=time.monotonic() + rt.config.commit_frequency)
            if confirmed is False:
                return False
            if confirmed is None:  # failed: try again shortly (a stop ends the wait)
                self._sleep(rt.config.throttle_delay)
        return not self._stop.is_set()

    # ----------------------------------------------------------------- giving the shard up

    def _finish(self, progress: ShardProgress) -> bool:
        """The shard is closed and read to its end: once all is processed, mark it Finished."""
        self.state = ShardState.FINISHING
        log.info("%s reached its end; finishing once its records are processed", self.shard_id)
        if not self._rt.delivery.wait_processed(progress, self._stop.is_set):
            return False
        final = progress.release()
        try:
            finished = self.lease.release(final, finished=True, call=self._call)  # an episode ends with its shard
        except Stopped:
            return False
        except Exception as exc:  # noqa: BLE001
            self._rt.fail(exc, f"the consumer of {self.shard_id}")
            return False
        if not finished:
            self._abandon(progress)
            return True
        log.info("%s finished at %s", self.shard_id, final)
        self._rt.request_refresh()
        return True

    def _hand_off(self, progress: ShardProgress) -> None:
        """Give the shard up: drop queued records, wait for acknowledgements, release."""
        rt = self._rt
        self.state = ShardState.HANDING_OFF
        started = time.monotonic()
        result = rt.delivery.hand_off(progress, rt.config.handoff_timeout)
        if not result.clean:
            log.warning(
                "handoff of %s timed out after %.1f s with %d records unacknowledged; they will be delivered again",
                self.shard_id, rt.config.handoff_timeout, result.outstanding,
            )  # fmt: skip
        released = self._release(result.checkpoint, progress)
        if not released:
            log.warning(
                "could not store the release of %s: its row was no longer this client's (taken by a client that "
                "found this one silent, or deleted)", self.shard_id,
            )  # fmt: skip
        elapsed = time.monotonic() - started
        log.info(
            "released %s at %s after %.2f s (%d queued records dropped)",
            self.shard_id, result.checkpoint, elapsed, result.dropped,
        )  # fmt: skip
        rt.stats.handoff(self.shard_id, elapsed, result.clean)

    def _release(self, checkpoint: Position | None, progress: ShardProgress) -> bool:
        """Release the row (False: it was not ours any more).

        A failed release is tried again while this client stays: its heartbeat keeps the
        shard its own, so nobody else would take it. A client that leaves gives up: its
        client row is deleted, and the shard's row is taken once it is ``max_age`` old.
        """
        rt = self._rt
        while True:
            call = rt.call_until(time.monotonic() + _RELEASE_DEADLINE)
            try:
                careful = progress.guard.release_state() if progress.guard is not None else None
                return self.lease.release(checkpoint, finished=False, call=call, careful=careful)
            except Exception as exc:  # noqa: BLE001
                if not rt.leaving.is_set() and rt.retry_later(exc, f"the release of {self.shard_id}"):
                    rt.leaving.wait(rt.config.throttle_delay)
                    continue
                if not rt.leaving.is_set():
                    rt.fail(exc, f"the release of {self.shard_id}")  # the client stops: its row goes
                log.warning("could not release %s (%s); it is taken once its row is old", self.shard_id, exc)
                self.lease.abandon()
                return True

    def _abandon(self, progress: ShardProgress) -> None:
        """Another client owns the shard (we were silent too long): drop everything of ours."""
        log.warning("%s is owned by another client now; dropping what this client still held", self.shard_id)
        self._rt.delivery.drop(progress)


class _GuardWrites:
    """The crash-loop guard's writes, through a worker's lease (see :class:`~kinsumer.handling.guard.GuardIO`)."""

    def __init__(self, worker: ShardWorker) -> None:
        self._worker = worker

    def write(self, careful: str, checkpoint: Position | None, handed: str | None = None) -> bool | None:
        worker = self._worker
        rt = worker._rt
        try:
            call = rt.call_until(time.monotonic() + rt.config.commit_frequency)
            return worker.lease.guard(checkpoint, careful, call, handed)
        except Exception as exc:  # noqa: BLE001 - transient: the guard tries again; anything else stops the consumer
            if not rt.retry_later(exc, f"the crash-loop guard's write of {worker.shard_id}"):
                rt.fail(exc, f"the crash-loop guard of {worker.shard_id}")
                return False
            return None

    def note(self, retrying: str | None) -> bool | None:
        worker = self._worker
        rt = worker._rt
        try:
            return worker.lease.note_retrying(retrying, rt.call_until(time.monotonic() + rt.config.commit_frequency))
        except Exception as exc:  # noqa: BLE001 - only for operators: a failed note is logged and left
            if not rt.retry_later(exc, f"the note of a retried record of {worker.shard_id}"):
                log.warning("could not store that a record of %s is being retried: %s", worker.shard_id, exc)
            return None

    def commit_now(self) -> bool | None:
        worker = self._worker
        return worker._committer.commit(worker, deadline=time.monotonic() + worker._rt.config.commit_frequency)
