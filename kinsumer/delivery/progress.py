"""Delivery bookkeeping of one captured shard, and the Checkpoint callable.

A :class:`ShardProgress` lives as long as one capture of a shard. The shard's reader
counts what it pushes, ``next*()`` registers what it delivers, and each record's
:class:`Checkpoint` (or, in auto mode, the caller's next call) acknowledges it. It is
thread-safe and never blocks for long: every method holds one short lock.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

import attrs

from ..reading.position import Position
from .tracker import CheckpointTracker

__all__ = ["Checkpoint", "ShardProgress"]


class ShardProgress:
    """What has been pushed, delivered and acknowledged under one capture of a shard."""

    __slots__ = (
        "_cond",
        "_delivered",
        "_fresh_until",
        "_lock",
        "_pushed",
        "_released",
        "_revoked",
        "_tracker",
        "_version",
        "_waiting",
        "shard_id",
    )

    def __init__(self, shard_id: str, checkpoint: Position | None) -> None:
        self.shard_id = shard_id
        self._lock = threading.Lock()  # taken directly on the per-record paths
        self._cond = threading.Condition(self._lock)
        self._waiting = 0  # threads in wait()
        self._version = 0  # bumped by every change wait() may be waiting for
        self._tracker = CheckpointTracker(checkpoint)
        self._pushed = 0  # records the reader put into the queue
        self._delivered = 0  # records next*() handed over
        self._revoked = False  # no more deliveries (handoff started)
        self._released = False  # no more acknowledgements (shard given up)
        self._fresh_until = math.inf  # monotonic time until which the shard's lease is known to be ours

    def confirm(self, fresh_until: float) -> None:
        """The shard's lease was confirmed: records may be delivered until ``fresh_until`` (monotonic)."""
        with self._lock:
            self._fresh_until = fresh_until
            self._changed()

    def fresh(self, now: float) -> bool:
        """The lease was confirmed recently enough at ``now`` (a plain read: called per record)."""
        return now < self._fresh_until

    def fresh_or_revoked(self) -> bool:
        """What a delivery waiting for the lease waits for: a confirmation, or the shard's loss."""
        return self._revoked or time.monotonic() < self._fresh_until

    @property
    def checkpoint(self) -> Position | None:
        with self._lock:
            return self._tracker.checkpoint

    @property
    def outstanding(self) -> int:
        """Delivered records not yet acknowledged."""
        with self._lock:
            return self._tracker.outstanding

    def pushed(self, count: int) -> None:
        with self._lock:
            self._pushed += count

    def deliver(self, position: Position) -> int | None:
        """Register a delivery; None if the shard is being handed off (drop the record)."""
        with self._lock:
            if self._revoked:
                return None
            self._delivered += 1
            return self._tracker.deliver(position)

    def ack(self, token: int) -> None:
        """Acknowledge a delivered record; a no-op once the shard is released."""
        with self._lock:
            if self._released:
                return
            if self._tracker.ack(token) and self._tracker.outstanding == 0:
                self._changed()

    def revoke(self) -> None:
        """Stop deliveries: records still queued for this capture will be dropped."""
        with self._lock:
            self._revoked = True
            self._changed()

    def _changed(self) -> None:
        """Something wait() may be waiting for happened (called with the lock held)."""
        self._version += 1
        if self._waiting:
            self._cond.notify_all()

    def release(self) -> Position | None:
        """Stop acknowledgements; returns the final checkpoint."""
        with self._lock:
            self._released = True
            return self._tracker.checkpoint

    def all_acknowledged(self) -> bool:
        """Every delivered record is acknowledged."""
        with self._lock:
            return self._tracker.outstanding == 0

    def all_processed(self) -> bool:
        """Every pushed record was delivered and acknowledged."""
        with self._lock:
            return self._delivered == self._pushed and self._tracker.outstanding == 0

    def wait(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait up to ``timeout`` s for ``predicate`` (one of the methods above) to hold."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                version = self._version
            if predicate():
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with self._cond:
                if self._version != version:
                    continue  # it changed while the predicate was evaluated: evaluate again
                self._waiting += 1
                try:
                    self._cond.wait(remaining)
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

    def __call__(self) -> None:
        self._progress.ack(self._token)
