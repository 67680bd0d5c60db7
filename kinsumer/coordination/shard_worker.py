"""One shard assigned to this client: capture, read, then finish or hand off.

The worker ties together the shard's :class:`~.lease.ShardLease` (the row in DynamoDB), a
:class:`~kinsumer.reading.reader.ShardReader` (records from Kinesis) and the delivery's
bookkeeping of the capture. It is a coroutine on the client's :class:`~kinsumer.reading.shard_loop.ShardLoop`:
its waits are timers and wake-ups there, its AWS calls run on the loop's pool, so a shard
holds no thread of its own. Its commits run on the client's :class:`~.committer.Committer`.
The :class:`~.shard_pool.ShardPool` starts it; it ends on its own: when the shard is
finished, handed off, or lost to another client.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from .. import clock
from ..aws.retry import Stopped
from ..aws.tables import now_ms
from ..delivery.budget import ByteBudget, Ticket
from ..delivery.delivery import EndHook
from ..delivery.phase import CALLED_OFF, CAPTURING, LOST, ShardPhase
from ..delivery.progress import ShardProgress
from ..handling.capture import CaptureHandling, attach_guard, guard_of, handling_of
from ..handling.guard import ShardGuard
from ..reading.position import Position, StartPosition
from ..reading.reader import Page, ReaderFactory, ShardReader
from ..reading.shard_loop import ShardLoop
from ..record import Record
from ..waiting import wait_event
from .checkpoints_table import CheckpointRow
from .committer import Commit, Committer
from .lease import Call, ShardLease
from .row_reads import RowReads
from .runtime import Runtime
from .streams import StreamScope

__all__ = ["ShardWorker"]

log = logging.getLogger("kinsumer.shard")

_RELEASE_DEADLINE = 5.0  # seconds spent retrying the final release of a handoff before giving up on it
_LOOK_AGAIN = 1.0  # seconds: a waiting worker looks again at least this often, poked or not
_CAPTURE_POLL_MAX = 1.0  # seconds between two looks at a row a live owner holds, at most
#: The most one GetRecords returns (bytes of record data).
MAX_PAGE_BYTES = 10 * 2**20
_MIN_ESTIMATE = 2**20  # bytes a read asks the budget for at least
T = TypeVar("T")


class ShardWorker:
    """Captures, reads and gives up one shard, as a coroutine on the client's
    :class:`~kinsumer.reading.shard_loop.ShardLoop`."""

    def __init__(
        self,
        runtime: Runtime,
        shard_id: str,
        parents: tuple[str, ...],
        committer: Committer,
        readers: ReaderFactory,
        loop: ShardLoop,
        scope: StreamScope,
        rows: RowReads,
    ) -> None:
        #: The shard's key: its ID, or ``<stream>/<shard ID>`` for a stream not the home one (:mod:`.streams`).
        self.shard_id = shard_id
        self.scope = scope
        #: The shard's ID in its stream.
        self.stream_shard_id = scope.shard_id(shard_id) or shard_id
        #: The shard's phase in this client (:mod:`kinsumer.delivery.phase`): the lease, the delivery and this
        #: worker move it; its ``stopping`` and ``ended`` events are what the worker's waits end on.
        self.phase = ShardPhase()
        self.lease = ShardLease(runtime, shard_id, parents, scope, self.phase)
        self.millis_behind_latest: int | None = None  # from the last page read
        #: User records of KPL aggregates read outside the shard's hash key range (delivered or dropped), this capture
        self.outside_range = 0
        self._busy: tuple[float, int] | None = None  # the long call's start: monotonic, and as stored (epoch ms)
        self._rt = runtime
        self._committer = committer
        self._readers = readers
        self._loop = loop
        self._rows = rows
        self._poke = loop.poke()  # any change this worker may be waiting for (a stop, room, a page)
        self._progress: ShardProgress | None = None
        self._started = False

    # ----------------------------------------------------------------- control (other threads)

    def start(self) -> None:
        self._started = True
        self._loop.spawn(self._run())

    def request_stop(self) -> None:
        """Hand the shard off: stop reading, wait for acknowledgements, release."""
        self.phase.revoke()  # no more deliveries from now on; the worker's waits end
        progress = self._progress
        if progress is not None:
            progress.revoke()  # so its waiters look again
        self._poke()

    def ownership_lost(self) -> None:
        """Another client owns the shard now (a commit said so): drop it without writing."""
        self.request_stop()

    def is_alive(self) -> bool:
        return self._started and not self.phase.ended.is_set()

    def join(self, timeout: float | None) -> None:
        if self._started:
            wait_event(self.phase.ended, math.inf if timeout is None else timeout)

    @property
    def captured(self) -> bool:
        return self.phase.value not in (CAPTURING, CALLED_OFF)

    @property
    def checkpoint(self) -> Position | None:
        """How far this client processed the shard."""
        progress = self._progress
        return progress.checkpoint if progress is not None else self.lease.committed

    @property
    def handling(self) -> CaptureHandling | None:
        """What ``process()`` keeps of the shard's capture (retries, expired records, calls under way); None if
        the shard is not captured."""
        progress = self._progress
        return handling_of(progress) if progress is not None else None

    @property
    def paused(self) -> bool:
        """Paused (``Kinsumer.pause()``): none of its records is handed out."""
        progress = self._progress
        return progress is not None and progress.paused

    def note_paused(self, paused: bool) -> None:
        """Store in the shard's row that it is paused (or no longer is), for ``kinsumer status``; best effort."""
        self.note(functools.partial(self.lease.note_paused, paused), f"that {self.shard_id} is paused")

    def note(self, write: Callable[[Call], bool], what: str) -> bool | None:
        """A write to the shard's row for operators only (``write(call)``, ``what``: what it stores, for the
        log); None if it failed (a failed note is logged and left, not tried again) or a stop came."""
        rt = self._rt
        try:
            return write(rt.call_until(clock.monotonic() + rt.config.commit_frequency, self.phase.stopping))
        except Stopped:
            return None
        except Exception as exc:  # noqa: BLE001 - only for operators: a failed note is logged and left
            if not rt.retry_later(exc, f"the note {what}"):
                log.warning("could not store %s: %s", what, exc)
            return None

    @property
    def oldest_record_age(self) -> float | None:
        """Seconds since the oldest record of the shard this client holds and has not finished with (read,
        queued, or under a handler) reached the stream; None if it holds none."""
        progress = self._progress
        arrival = progress.oldest_arrival() if progress is not None else None
        return None if arrival is None else max(0.0, clock.wall() - arrival.timestamp())

    def to_commit(self) -> Commit:
        """The checkpoint and lag, and the crash-loop guard (its new reservation is made under the
        lease's lock). In careful mode the guard's own writes move the checkpoint (with the markers),
        so a commit leaves it."""
        progress = self._progress
        guard = guard_of(progress) if progress is not None else None
        busy, expired = self._busy_since(progress), handling_of(progress).expired if progress is not None else 0
        arrival = progress.oldest_arrival() if progress is not None else None
        oldest = None if arrival is None else int(arrival.timestamp() * 1000)
        lag, outside = self.millis_behind_latest, self.outside_range
        if guard is None:
            return Commit(self.checkpoint, lag, None, busy, expired, oldest, outside)
        if guard.careful:
            return Commit(None, lag, None, busy, expired, oldest, outside)
        return Commit(self.checkpoint, lag, guard, busy, expired, oldest, outside)

    def _busy_since(self, progress: ShardProgress | None) -> int | None:
        """Epoch ms since which the oldest handler call under way has run, if that is longer than two commit
        periods (so a write is made only for a call that runs long, and once more when it ends)."""
        started = handling_of(progress).oldest_call_start() if progress is not None else None
        if started is None or clock.monotonic() - started < 2 * self._rt.config.commit_frequency:
            return None
        if self._busy is None or self._busy[0] != started:  # a call not stored yet: its start, on the wall clock
            self._busy = (started, int((clock.wall() - (clock.monotonic() - started)) * 1000))
        return self._busy[1]

    # ----------------------------------------------------------------- the coroutine

    async def _run(self) -> None:
        try:
            try:
                row = await self._capture()
            except Stopped:
                row = None  # asked to stop before the shard was ours
            except Exception as exc:  # noqa: BLE001
                self._rt.fail(exc, f"the consumer of {self.shard_id}")
                row = None
            if row is not None:
                await self._own(row)
        except Exception as exc:  # noqa: BLE001 - a bug here must not end the shard's coroutine silently
            self._rt.fail(exc, f"the consumer of {self.shard_id}")
        finally:
            self.phase.end()

    async def _own(self, row: CheckpointRow) -> None:
        progress = self._open(row)
        if progress.paused:  # captured while paused: so the row says
            await self._io(functools.partial(self.note_paused, True))
        try:
            if await self._read(progress, row) and await self._finish(progress):
                return
            await self._give_up(progress)
        finally:
            self._close()

    def _open(self, row: CheckpointRow) -> ShardProgress:
        """The shard was captured as ``row``: its delivery bookkeeping and crash-loop guard, and commits."""
        rt = self._rt
        self._progress = progress = rt.delivery.open_shard(self.shard_id, row.checkpoint, self.phase)
        writes = _GuardWrites(
            rt, self.lease, self.phase.stopping, functools.partial(self._committer.commit, self), self.note
        )
        guard = ShardGuard(row, writes, self._wait_unless_stopping, rt.config.commit_frequency)
        attach_guard(progress, guard)
        progress.confirm(self.lease.fresh_until)
        progress.watch(self._poke)  # acknowledgements, for the handoff's and the end's waits
        self.lease.on_confirmed = progress.confirm  # deliveries wait while the lease is not confirmed
        self._committer.add(self)
        rt.stats.shard_gained(self.shard_id)
        recorded = f"StartAt {row.start_at} ms" if row.start_at is not None else None
        start = row.checkpoint or recorded or rt.config.initial_position
        log.info("captured %s at %s", self.shard_id, start)
        return progress

    async def _give_up(self, progress: ShardProgress) -> None:
        """Reading stopped before the shard's end (or reached it with records given back): hand it off, or
        drop it if another client owns it."""
        if self.phase.value is LOST:
            self._abandon(progress)
        else:
            await self._hand_off(progress)

    def _close(self) -> None:
        """No more commits of the shard (after :meth:`_open`, whichever way it was given up)."""
        self._committer.remove(self)
        self._rt.stats.shard_lost(self.shard_id)  # once

    def _call(self, fn: Callable[[], Any], operation: str) -> Any:
        """An AWS call (on the loop's pool): transient faults retried until a stop request."""
        return self._rt.call(fn, operation, sleep=self._blocking_sleep, should_stop=self.phase.stopping.is_set)

    def _blocking_sleep(self, seconds: float) -> None:
        if clock.wait(self.phase.stopping, seconds):
            raise Stopped(self.shard_id)

    def _wait_unless_stopping(self, seconds: float) -> bool:
        """Wait ``seconds`` (a caller's thread); False (at once) if the shard is being given up."""
        return not clock.wait(self.phase.stopping, seconds)

    async def _io(self, fn: Callable[[], T], *, first: bool = True) -> T:
        """``fn()`` on the loop's pool: the lease's calls go ahead of the reads waiting for a thread (``first``),
        so a capture or a release never waits behind the GetRecords of hundreds of shards."""
        return await self._loop.io(fn, first=first)

    async def _sleep(self, seconds: float) -> None:
        """Wait ``seconds`` on the loop; :class:`Stopped` at once on a stop request."""
        await self._wait_for(lambda: False, seconds)

    async def _until_ready(self, reader: ShardReader) -> None:
        """Wait until the reader's next page is due (its pace) or waiting (a subscription's); Stopped on a stop."""
        await self._wait_until(reader.ready_at, None)

    async def _granted(self, ticket: Ticket) -> None:
        """Wait until the budget granted ``ticket``; Stopped on a stop."""
        await self._wait_for(lambda: ticket.granted, None)

    async def _wait_for(self, ready: Callable[[], bool], timeout: float | None, *, stoppable: bool = True) -> bool:
        """Wait until ``ready()``, or ``timeout`` seconds (None: no limit): False; as :meth:`_wait_until`."""
        return await self._wait_until(lambda: -math.inf if ready() else math.inf, timeout, stoppable=stoppable)

    async def _wait_until(self, due: Callable[[], float], timeout: float | None, *, stoppable: bool = True) -> bool:
        """Wait until the monotonic time ``due()`` (looked at again on every poke, and at least every
        second) or ``timeout`` seconds (None: no limit); False at the timeout. A stop request raises
        :class:`Stopped` unless ``stoppable`` is false."""
        deadline = math.inf if timeout is None else clock.monotonic() + timeout
        while True:
            self._poke.clear()
            if stoppable and self.phase.stopping.is_set():
                raise Stopped(self.shard_id)
            now, when = clock.monotonic(), due()
            if when <= now:
                return True
            if now >= deadline:
                return False
            await self._poke.wait(min(when, deadline, now + _LOOK_AGAIN) - now)

    # ----------------------------------------------------------------- capture

    async def _capture(self) -> CheckpointRow | None:
        """Take the row; None if the shard is finished. Waits while a live client owns it.

        The row is read first, with the other waiting shards' (:mod:`.row_reads`): a shard
        assigned to this client is often still another's (a join, a rebalance), and a capture
        that fails is a write DynamoDB charges for. A free row (or this client's) is then
        captured with one conditional write; a row a live client owns is read again until it is
        released (more slowly the longer it takes, up to once a second). A row whose owner is
        not live is taken as read (:mod:`.membership`). Nothing is captured while this client's
        own heartbeat is late.
        """
        rt, lease, call = self._rt, self.lease, self._call
        first_poll = poll = rt.config.throttle_delay
        attempt = False
        while not self.phase.stopping.is_set():
            if not rt.liveness.fresh():
                await self._sleep(first_poll)
                continue
            if attempt:
                captured = await self._io(lambda: lease.try_capture(call))
                if captured is not None:
                    return captured
            row = await self._read_row()
            if row is not None and row.finished and not row.foreign(self.scope.identity):
                log.debug("%s is already finished", self.shard_id)
                rt.request_refresh()
                return None
            if row is not None and row.owner_id not in (None, rt.client_id):
                if rt.membership.may_take(row.owner_id, row.last_update, now_ms(), row.owner_instance):
                    captured = await self._io(functools.partial(lease.try_capture, call, taking=row))
                    if captured is not None:
                        log.info("took %s from client %s, which is not live", self.shard_id, row.owner_id)
                        return captured
                else:  # a live owner: wait for its release (or its silence)
                    await self._sleep(poll)
                    poll = min(_CAPTURE_POLL_MAX, poll * 1.5)
                attempt = False  # read again before trying: a failed capture is a write
                continue
            if attempt:
                await self._sleep(first_poll)  # it looks free but the capture failed: it just changed hands
            attempt = True
        return None

    async def _read_row(self) -> CheckpointRow | None:
        """The shard's row, read with the other waiting shards' (:mod:`.row_reads`); Stopped on a stop."""
        future = self._rows.read(self.shard_id)
        future.add_done_callback(lambda _: self._poke())
        try:
            await self._wait_for(future.done, None)
        except Stopped:
            future.cancel()
            raise
        return future.result()

    # ----------------------------------------------------------------- reading

    async def _read(self, progress: ShardProgress, row: CheckpointRow) -> bool:
        """Read into the delivery until the shard ends (True) or a stop request (False).

        A shard with no checkpoint starts at its recorded start, else at ``initial_position``.
        A LATEST or AT_TIMESTAMP start is recorded before the first record is handed on, so
        that a restart or the shard's next owner starts there, not later (nothing written
        after this first start is skipped). A LATEST start is the service's time when the
        reader's first iterator was made. Each read waits for its turn (the reader's pace) and
        for room in the client's byte budget, on the loop; the call runs on the pool.
        """
        rt = self._rt
        cfg = rt.config
        start = row.resume_at
        unrecorded = start is None
        if start is None:
            start = StartPosition.initial(cfg.initial_position, cfg.initial_timestamp)
            unrecorded = start.kind != "TRIM_HORIZON"
        reader: ShardReader | None = None
        pages = _PageBytes(rt.delivery.budget)
        try:
            reader = self._readers(self.stream_shard_id, start, self.phase.stopping)
            reader.on_ready(self._poke)
            while True:
                await self._until_ready(reader)
                ticket, size = rt.delivery.budget.request(pages.estimate(), self._poke), 0
                try:
                    await self._granted(ticket)
                    page, records, size = await self._io(
                        functools.partial(_fetch, reader, self.scope.name), first=False
                    )
                finally:
                    pages.settle(ticket, size)
                try:
                    if unrecorded:
                        at = start.timestamp if start.timestamp is not None else reader.latest_at
                        if at is not None:
                            at_ms = int(at.timestamp() * 1000)
                            if not await self._io(functools.partial(self.lease.record_start, at_ms, self._call)):
                                return False  # not ours any more
                        unrecorded = False
                    self.millis_behind_latest = page.millis_behind_latest
                    self.outside_range += page.outside_range
                    pushing, size = size, 0  # from here on the push gives back what it does not queue
                    if records and not await self._push(progress, records, pushing):
                        return False
                finally:
                    rt.delivery.budget.free(size)  # read but never pushed
                if page.end_of_shard:
                    return True
        except Stopped:
            return False
        except Exception as exc:  # noqa: BLE001 - reported to the caller, then the shard is handed off
            rt.fail(exc, f"the reader of {self.shard_id}")
            return False
        finally:
            if reader is not None:
                await self._io(reader.close, first=False)

    async def _push(self, progress: ShardProgress, records: list[Record], size: int) -> bool:
        """Hand ``records`` (``size`` bytes) to the delivery while the lease is fresh; False on a stop
        or a lost lease. Records that do not go in give their bytes back to the budget.
        """
        delivery = self._rt.delivery
        progress.fetched(records)  # their arrival, for the age of the oldest record in hand
        start = 0
        try:
            while start < len(records):
                if not await self._confirm_lease() or delivery.closed:
                    return False
                self._poke.clear()  # the queue's call for room comes after this: it is not missed
                start += delivery.offer(progress, records, start, self._poke)  # asks for a call if not all fit
                if start < len(records):  # until there is room (or a stop, or the lease changes); then offer again
                    await self._poke.wait(_LOOK_AGAIN)
                    if self.phase.stopping.is_set():
                        return False
            return True
        except Stopped:
            return False
        finally:
            if start < len(records):
                delivery.budget.free(size if start == 0 else _size(records, start))

    async def _confirm_lease(self) -> bool:
        """Return at once if the lease is fresh; else commit now. False if it is lost (or a stop came)."""
        rt, lease, phase = self._rt, self.lease, self.phase
        while not lease.fresh():
            if phase.revoked:  # a stop, a handoff, or the row given back or lost
                return False
            if not rt.liveness.fresh():  # our heartbeat is late: the others may count us dead
                await self._sleep(rt.config.throttle_delay)
                continue
            log.info(
                "the heartbeat of this client was late; confirming the lease of %s before reading on", self.shard_id
            )
            deadline = clock.monotonic() + rt.config.commit_frequency
            confirmed = await asyncio.wrap_future(self._committer.submit(self, deadline))
            if confirmed is False:
                return False
            if confirmed is None:  # failed: try again shortly (a stop ends the wait)
                await self._sleep(rt.config.throttle_delay)
        return not phase.revoked

    # ----------------------------------------------------------------- giving the shard up

    async def _finish(self, progress: ShardProgress) -> bool:
        """The shard is closed and read to its end: once all is processed, mark it Finished."""
        log.info("%s reached its end; finishing once its records are processed", self.shard_id)
        self.phase.reached_end()  # unless a stop came meanwhile: then the wait below ends at once
        try:
            await self._wait_for(progress.all_processed, None)
        except Stopped:
            return False
        if progress.gave_back():  # its checkpoint stops before them: finished, they would never come again
            log.warning("%s reached its end with records given back; released unfinished, to be read again from "
                        "its checkpoint", self.shard_id)  # fmt: skip
            return False
        await self._revoked(progress, clock.monotonic() + self._rt.config.handoff_timeout)
        final = progress.release()
        call = self._call
        try:
            finished = await self._io(
                lambda: self.lease.release(
                    final, finished=True, call=call, expired=handling_of(progress).expired,
                    outside_range=self.outside_range,
                )
            )  # fmt: skip
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

    async def _hand_off(self, progress: ShardProgress) -> None:
        """Give the shard up: drop queued records, wait for acknowledgements, release."""
        rt = self._rt
        started = clock.monotonic()
        dropped = rt.delivery.start_hand_off(progress)
        await self._wait_for(progress.all_acknowledged, rt.config.handoff_timeout, stoppable=False)
        if progress.all_acknowledged():
            await self._revoked(progress, started + rt.config.handoff_timeout)
        else:
            self._lost(progress)
        result = rt.delivery.end_hand_off(progress, dropped)
        if not result.clean:
            log.warning(
                "handoff of %s timed out after %.1f s with %d records unacknowledged; they will be delivered again",
                self.shard_id, rt.config.handoff_timeout, result.outstanding,
            )  # fmt: skip
        released = await self._release(result.checkpoint, progress)
        if not released:
            log.warning(
                "could not store the release of %s: its row was no longer this client's (taken by a client that "
                "found this one silent, or deleted)", self.shard_id,
            )  # fmt: skip
        elapsed = clock.monotonic() - started
        log.info(
            "released %s at %s after %.2f s (%d queued records dropped)",
            self.shard_id, result.checkpoint, elapsed, result.dropped,
        )  # fmt: skip
        rt.stats.handoff(self.shard_id, elapsed, result.clean)

    async def _release(self, checkpoint: Position | None, progress: ShardProgress) -> bool:
        """Release the row (False: it was not ours any more).

        A failed release is tried again while this client stays: its heartbeat keeps the
        shard its own, so nobody else would take it. A client that leaves gives up: its
        client row is deleted, and the shard's row is taken once it is ``max_age`` old.
        """
        rt = self._rt
        guard = guard_of(progress)
        careful = guard.release_state() if guard is not None else None
        while True:
            call = rt.call_until(clock.monotonic() + _RELEASE_DEADLINE)
            try:
                release = functools.partial(
                    self.lease.release, checkpoint, finished=False, call=call, careful=careful,
                    expired=handling_of(progress).expired, outside_range=self.outside_range,
                )  # fmt: skip
                return await self._io(release)
            except Exception as exc:  # noqa: BLE001
                if not rt.leaving.is_set() and rt.retry_later(exc, f"the release of {self.shard_id}"):
                    await self._wait_for(rt.leaving.is_set, rt.config.throttle_delay, stoppable=False)
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
        self._lost(progress)

    async def _revoked(self, progress: ShardProgress, deadline: float) -> None:
        """``process()``'s ``on_revoked`` for a capture it announced, waited for until ``deadline`` (monotonic)."""
        finished = self._tell(progress, "on_revoked")
        if finished is not None and not await self._wait_for(
            finished.is_set, max(0.0, deadline - clock.monotonic()), stoppable=False
        ):
            log.warning("on_revoked(%r) is still running at the end of the handoff; the shard goes on", self.shard_id)

    def _lost(self, progress: ShardProgress) -> None:
        """``process()``'s ``on_lost`` for a capture it announced (not waited for)."""
        self._tell(progress, "on_lost")

    def _tell(self, progress: ShardProgress, hook: EndHook) -> threading.Event | None:
        """Start ``process()``'s ``hook`` for the end of a capture it announced (once per capture); set when it
        returns. None if there is nothing to call."""
        lifecycle = self._rt.delivery.lifecycle
        if lifecycle is None or not handling_of(progress).take_announced():
            return None
        return lifecycle.start(hook, self.shard_id, self._poke)


def _fetch(reader: ShardReader, stream: str) -> tuple[Page, list[Record], int]:
    """One page of ``stream`` (on the pool): the page, its records, and their bytes of data."""
    page = reader.next_page()
    if not page.raw:
        return page, [], 0
    records = page.records(stream)
    return page, records, _size(records, 0)


def _size(records: list[Record], start: int) -> int:
    return sum([len(r.data) for r in records[start:]])


class _PageBytes:
    """A shard's side of the byte budget: how much a read asks for, and settling it after the read.

    A read asks for twice its shard's last page with records (at least 1 MiB, at most the 10 MiB
    one GetRecords returns at most): a shard's pages change size slowly, and a read of a shard
    that has been idle asks for little.
    """

    def __init__(self, budget: ByteBudget) -> None:
        self._budget = budget
        self._last = 0  # bytes of the shard's last page with records

    def estimate(self) -> int:
        return min(MAX_PAGE_BYTES, max(_MIN_ESTIMATE, 2 * self._last))

    def settle(self, ticket: Ticket, size: int) -> None:
        """The read under ``ticket`` is over: ``size`` bytes read (0 if it failed or was never made)."""
        if ticket.granted:
            self._budget.settle(ticket, size)
        else:
            self._budget.cancel(ticket)
        if size:
            self._last = size


class _GuardWrites:
    """The crash-loop guard's writes, through a worker's lease (see :class:`~kinsumer.handling.guard.GuardIO`):
    made by the worker with what they need (its runtime, lease, its phase's ``stopping`` event, commit and note)."""

    def __init__(
        self,
        runtime: Runtime,
        lease: ShardLease,
        stopping: threading.Event,
        commit: Callable[[float, threading.Event], bool | None],
        note: Callable[[Callable[[Call], bool], str], bool | None],
    ) -> None:
        self._rt = runtime
        self._lease = lease
        self._stopping = stopping
        self._commit = commit
        self._note = note

    def write(self, careful: str, checkpoint: Position | None, handed: str | None = None) -> bool | None:
        rt, shard_id = self._rt, self._lease.shard_id
        try:
            call = rt.call_until(clock.monotonic() + rt.config.commit_frequency, self._stopping)
            return self._lease.guard(checkpoint, careful, call, handed)
        except Stopped:
            return False  # the shard is being given up
        except Exception as exc:  # noqa: BLE001 - transient: the guard tries again; anything else stops the consumer
            if not rt.retry_later(exc, f"the crash-loop guard's write of {shard_id}"):
                rt.fail(exc, f"the crash-loop guard of {shard_id}")
                return False
            return None

    def note(self, retrying: str | None) -> bool | None:
        write = functools.partial(self._lease.note_retrying, retrying)
        return self._note(write, f"that a record of {self._lease.shard_id} is being retried")

    def given_up(self) -> bool:
        return self._stopping.is_set()

    def commit_now(self) -> bool | None:
        return self._commit(clock.monotonic() + self._rt.config.commit_frequency, self._stopping)
