"""One shard owned by this client: capture, read, commit, then finish or hand off.

Each ShardConsumer runs one thread, started and stopped by the coordinator. The thread
owns the shard's checkpoint row from capture to release; every wait in it keeps the
row's lease alive with periodic commits.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import botocore.exceptions

from . import checkpoints
from .checkpoints import CheckpointRow
from .delivery import ShardProgress
from .record import Record
from .retry import Stopped, error_code, is_transient
from .runtime import Runtime
from .stream import StartPosition, get_shard_iterator, stream_exists

__all__ = ["ShardConsumer"]

log = logging.getLogger("kinsumer.shard")

_RELEASE_DEADLINE = 5.0  # seconds spent retrying the final release before giving up on it


class OwnershipLost(Exception):
    """Our conditional write failed: another client owns the shard now."""


class ShardConsumer:
    """Captures, reads and checkpoints one shard on its own thread."""

    def __init__(self, runtime: Runtime, shard_id: str, parents: tuple[str, ...] = ()) -> None:
        self.shard_id = shard_id
        self._rt = runtime
        self._cfg = runtime.config
        self._parents = parents
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"kinsumer-{shard_id}", daemon=True)
        self._progress: ShardProgress | None = None
        self._committed: str | None = None  # the sequence number stored in the row
        self._next_commit = 0.0
        self._last_pushed: str | None = None
        self._last_fetch = -math.inf  # monotonic time of the last GetRecords attempt
        self._latest_at: dt.datetime | None = None  # when we took a LATEST iterator
        self.millis_behind_latest: int | None = None  # from the last GetRecords
        self.captured = False

    # ----------------------------------------------------------------- control (other threads)

    def start(self) -> None:
        self._thread.start()

    def request_stop(self) -> None:
        """Hand the shard off: stop reading, wait for acknowledgements, commit, release."""
        self._stop.set()
        if self._progress is not None:
            self._progress.revoke()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float | None) -> None:
        self._thread.join(timeout)

    @property
    def checkpoint(self) -> str | None:
        """The sequence number up to which this client processed the shard."""
        return self._progress.checkpoint if self._progress is not None else self._committed

    # ----------------------------------------------------------------- the thread

    def _run(self) -> None:
        try:
            row = self._capture()
            if row is None:
                return
            self._progress = progress = ShardProgress(self.shard_id, row.sequence_number)
            if self._stop.is_set():
                progress.revoke()
            self._committed = row.sequence_number
            self.captured = True
            self._next_commit = time.monotonic() + self._cfg.commit_frequency
            self._rt.stats.shard_gained(self.shard_id)
            log.info("captured %s at %s", self.shard_id, row.sequence_number or self._cfg.initial_position)
            try:
                self._own()
            finally:
                self._rt.stats.shard_lost(self.shard_id)  # once, whichever way the shard was given up
        except Stopped:
            pass  # asked to stop before the shard was ours
        except OwnershipLost:
            self._abandon()
        except Exception as exc:  # noqa: BLE001
            self._rt.fail(exc, f"the consumer of {self.shard_id}")

    def _own(self) -> None:
        """Read the captured shard until it ends or is handed off."""
        try:
            if self._read():
                return
        except Stopped:
            pass
        except OwnershipLost:
            raise
        except Exception as exc:  # noqa: BLE001 - reported to the caller, then hand off
            self._rt.fail(exc, f"the reader of {self.shard_id}")
        self._hand_off()

    def _call(self, fn: Callable[[], Any], operation: str, min_wait: float = 0.0) -> Any:
        return self._rt.call(fn, operation, sleep=self._sleep, should_stop=self._stop.is_set, min_wait=min_wait)

    # ----------------------------------------------------------------- capture

    def _capture(self) -> CheckpointRow | None:
        """Take the row; None if the shard is finished. Waits while another client owns it.

        The conditional capture is tried first (usually the shard is free: one round trip);
        the row is read to learn why a capture failed, and polled while a live client owns it.
        """
        rt, table = self._rt, self._rt.tables.checkpoints
        poll = self._cfg.throttle_delay
        attempt = True
        while not self._stop.is_set():
            if attempt:
                captured = self._try_capture()
                if captured is not None:
                    return captured
            row = self._call(lambda: checkpoints.read_row(rt.dynamodb, table, self.shard_id), "GetItem")
            if row is not None and row.finished:
                log.debug("%s is already finished", self.shard_id)
                rt.request_refresh()
                return None
            if row is not None and row.owner_id not in (None, rt.client_id):
                stale_in = row.last_update / 1000 + rt.max_age - time.time()
                if stale_in > 0:  # a live owner: wait for its release or its silence
                    self._sleep(min(stale_in, poll))
                    attempt = False  # read again before trying: a failed capture is a write
                    continue
            if attempt:
                self._sleep(poll)  # it looks free but the capture failed: it just changed hands
            attempt = True
        return None

    def _try_capture(self) -> CheckpointRow | None:
        rt = self._rt
        captured = self._call(
            lambda: checkpoints.capture(
                rt.dynamodb,
                rt.tables.checkpoints,
                self.shard_id,
                owner_id=rt.client_id,
                owner_name=rt.client_name,
                max_age=rt.max_age,
                parents=self._parents,
            ),
            "UpdateItem",
        )
        return captured  # type: ignore[no-any-return]

    # ----------------------------------------------------------------- reading

    def _start_position(self) -> StartPosition:
        if self._last_pushed is not None:
            return StartPosition.after(self._last_pushed)
        if self._committed is not None:
            return StartPosition.after(self._committed)
        if self._latest_at is not None:  # a LATEST iterator expired before any record came
            return StartPosition.at_timestamp(self._latest_at)
        if self._cfg.initial_position == "AT_TIMESTAMP" and self._cfg.initial_timestamp is not None:
            return StartPosition.at_timestamp(self._cfg.initial_timestamp)
        if self._cfg.initial_position == "LATEST":
            self._latest_at = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
            return StartPosition.latest()
        return StartPosition.trim_horizon()

    def _iterator(self) -> str | None:
        """A fresh iterator after the last record pushed; None if the shard is gone."""
        rt, position = self._rt, self._start_position()
        try:
            return self._call(  # type: ignore[no-any-return]
                lambda: get_shard_iterator(rt.kinesis, rt.stream_name, self.shard_id, position), "GetShardIterator"
            )
        except botocore.exceptions.ClientError as exc:
            if error_code(exc) != "ResourceNotFoundException":
                raise
            if not self._call(lambda: stream_exists(rt.kinesis, rt.stream_name), "DescribeStreamSummary"):
                raise
            log.warning("%s is no longer in the stream (past retention); marking it finished", self.shard_id)
            return None

    def _read(self) -> bool:
        """Read until the shard ends (returns True once finished) or Stopped is raised."""
        cfg = self._cfg
        iterator = self._iterator()
        while iterator is not None:
            self._sleep_until(self._last_fetch + cfg.throttle_delay)
            try:
                # a retry waits throttle_delay too: at most one GetRecords per throttle_delay
                response = self._call(
                    functools.partial(self._get_records, iterator), "GetRecords", min_wait=cfg.throttle_delay
                )
            except botocore.exceptions.ClientError as exc:
                if error_code(exc) != "ExpiredIteratorException":
                    raise
                self._rt.stats.error_retried("GetRecords", "ExpiredIteratorException")
                log.info("iterator of %s expired; resuming after %s", self.shard_id, self._last_pushed)
                iterator = self._iterator()
                continue
            records = response.get("Records", [])
            self.millis_behind_latest = response.get("MillisBehindLatest")
            self._rt.stats.records_fetched(self.shard_id, len(records), self.millis_behind_latest)
            if records:
                self._push(records)
            iterator = response.get("NextShardIterator")
        return self._finish()

    def _get_records(self, iterator: str) -> Any:
        self._last_fetch = time.monotonic()  # every attempt counts for the throttle
        return self._rt.kinesis.get_records(ShardIterator=iterator, Limit=self._cfg.max_records_per_call)

    def _push(self, records: list[dict[str, Any]]) -> None:
        progress, queue = self._progress, self._rt.queue
        assert progress is not None
        retrieved_at = dt.datetime.now(dt.UTC)
        shard_id = self.shard_id
        items = [(Record.from_api(r, shard_id, retrieved_at), progress) for r in records]
        start = 0
        while start < len(items):
            if self._stop.is_set():
                raise Stopped(shard_id)
            added = queue.put_many(items, start, max(0.0, self._next_commit - time.monotonic()))
            if added:
                progress.pushed(added)
                start += added
            elif queue.closed:
                raise Stopped(shard_id)
            else:
                self._commit_if_due()
        self._last_pushed = records[-1]["SequenceNumber"]

    # ----------------------------------------------------------------- ending

    def _finish(self) -> bool:
        """The shard is closed and read to its end: once all is processed, mark it Finished."""
        progress = self._progress
        assert progress is not None
        log.info("%s reached its end; finishing once its records are processed", self.shard_id)
        if not self._wait_for(progress.all_processed, deadline=None, interruptible=True):
            return False
        final = progress.release()
        if not self._release(final, finished=True):
            raise OwnershipLost(self.shard_id)
        log.info("%s finished at %s", self.shard_id, final)
        self._rt.request_refresh()
        return True

    def _hand_off(self) -> None:
        """Give the shard up: drop queued records, wait for acknowledgements, commit, release."""
        progress, rt = self._progress, self._rt
        assert progress is not None
        started = time.monotonic()
        progress.revoke()
        dropped = rt.queue.purge(progress)
        clean = self._wait_for(
            progress.all_acknowledged, deadline=started + self._cfg.handoff_timeout, interruptible=False
        )
        final = progress.release()
        if not clean:
            log.warning(
                "handoff of %s timed out after %.1f s with %d records unacknowledged; they will be delivered again",
                self.shard_id,
                self._cfg.handoff_timeout,
                progress.outstanding,
            )
        try:
            released = self._release(final, finished=False, deadline=time.monotonic() + _RELEASE_DEADLINE)
        except Exception as exc:  # noqa: BLE001 - the lease expires by itself
            log.warning("could not release %s (%s); another client takes it once it looks stale", self.shard_id, exc)
            released = True
        if not released:
            log.warning("%s was taken by another client during the handoff", self.shard_id)
        elif final is not None and final != self._committed:
            self._rt.stats.checkpoint_written(self.shard_id)
        elapsed = time.monotonic() - started
        log.info("released %s at %s after %.2f s (%d queued records dropped)", self.shard_id, final, elapsed, dropped)
        self._rt.stats.handoff(self.shard_id, elapsed, clean)

    def _release(self, final: str | None, *, finished: bool, deadline: float | None = None) -> bool:
        """Store the final checkpoint (and Finished) and give the row up; False if not ours.

        Retries until ``deadline`` if given (a handoff), else until a stop request (Stopped).
        """
        rt = self._rt

        def release() -> bool:
            return checkpoints.release(
                rt.dynamodb,
                rt.tables.checkpoints,
                self.shard_id,
                owner_id=rt.client_id,
                sequence_number=final if final != self._committed or finished else None,
                finished=finished,
            )

        if deadline is None:
            return bool(self._call(release, "UpdateItem"))
        return rt.call(release, "UpdateItem", deadline=deadline)

    def _abandon(self) -> None:
        """Another client owns the shard (we were silent too long): drop everything of ours."""
        log.warning("%s is owned by another client now; dropping what this client still held", self.shard_id)
        if self._progress is not None:
            self._progress.revoke()
            self._rt.queue.purge(self._progress)
            self._progress.release()

    # ----------------------------------------------------------------- waiting and committing

    def _sleep(self, seconds: float) -> None:
        self._sleep_until(time.monotonic() + seconds)

    def _sleep_until(self, until: float) -> None:
        """Wait, committing when due; raise Stopped as soon as a stop is requested."""
        while True:
            self._commit_if_due()
            if self._stop.is_set():
                raise Stopped(self.shard_id)
            now = time.monotonic()
            if now >= until:
                return
            wake = until if self._progress is None else min(until, self._next_commit)
            self._stop.wait(max(0.0, wake - now))

    def _wait_for(self, predicate: Callable[[], bool], deadline: float | None, *, interruptible: bool) -> bool:
        """Wait for ``predicate``, committing when due; False at the deadline or on a stop request."""
        progress = self._progress
        assert progress is not None
        while True:
            self._commit_if_due()
            if predicate():
                return True
            if interruptible and self._stop.is_set():
                return False
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return False
            wake = self._next_commit if deadline is None else min(deadline, self._next_commit)
            progress.wait(predicate, max(0.0, wake - now))

    def _commit_if_due(self) -> None:
        progress = self._progress
        now = time.monotonic()
        if progress is None or now < self._next_commit:
            return
        self._next_commit = now + self._cfg.commit_frequency
        checkpoint = progress.checkpoint
        new = checkpoint if checkpoint is not None and checkpoint != self._committed else None
        if new is not None and self._committed is not None and int(new) < int(self._committed):
            log.error("refusing to move the checkpoint of %s backwards (%s < %s)", self.shard_id, new, self._committed)
            new = None
        rt = self._rt
        try:
            owned = rt.call(
                lambda: checkpoints.commit(
                    rt.dynamodb,
                    rt.tables.checkpoints,
                    self.shard_id,
                    owner_id=rt.client_id,
                    sequence_number=new,
                    millis_behind_latest=self.millis_behind_latest,
                ),
                "UpdateItem",
                deadline=now + self._cfg.commit_frequency,
            )
        except Exception as exc:
            if not is_transient(exc):
                raise
            log.warning("commit of %s failed (%s); retrying at the next commit", self.shard_id, error_code(exc))
            return
        if not owned:
            raise OwnershipLost(self.shard_id)
        if new is not None:
            self._committed = new
            self._rt.stats.checkpoint_written(self.shard_id)
