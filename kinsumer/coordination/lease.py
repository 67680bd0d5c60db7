"""This client's lease on one shard: every write to its checkpoint row that depends on owning it.

Capture is a conditional write (the row is unfinished and free, ours, or stale); commit,
release and finish are conditional on ``OwnerID = me``. A write whose condition fails means
another client owns the shard: the lease is LOST and writes nothing more, so a client that
was paused or cut off can never move the new owner's checkpoint. The lease's writes are
serialised, so a commit never lands between a release and its caller's next step.

Other clients may capture the row once its ``LastUpdate`` is ``client_record_max_age`` old.
So the lease counts as *fresh* only for half of that after the start of its last successful
write; a worker hands no record on from a lease that is not fresh until a write confirms it
(a client resumed after a long pause learns it lost the shard before delivering more of it).
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..reading.position import Position, position_order
from . import checkpoints_table
from .checkpoints_table import CheckpointRow
from .runtime import Runtime

__all__ = ["Call", "LeaseState", "ShardLease"]

log = logging.getLogger("kinsumer.lease")

#: Runs one AWS call (a thunk, and the operation's name) with the caller's retry policy:
#: every write takes one, so the caller decides how long transient faults are retried.
Call = Callable[[Callable[[], Any], str], Any]


class LeaseState(enum.Enum):
    UNCLAIMED = "unclaimed"  # not captured (yet)
    OWNED = "owned"  # captured: commits keep it alive
    RELEASED = "released"  # given back with its final checkpoint
    FINISHED = "finished"  # released with Finished set: the shard is closed and fully processed
    LOST = "lost"  # a conditional write failed: another client owns the shard now


class ShardLease:
    """The checkpoint row of one shard, as far as this client owns it."""

    def __init__(self, runtime: Runtime, shard_id: str, parents: tuple[str, ...] = ()) -> None:
        self.shard_id = shard_id
        self._rt = runtime
        self._parents = parents
        self._lock = threading.Lock()  # one write at a time
        self._fresh_for = runtime.max_age / 2  # seconds a successful write vouches for the lease
        self._confirmed_at = -float("inf")  # monotonic start of the last successful capture or commit
        self.state = LeaseState.UNCLAIMED
        #: The checkpoint stored in the row (as captured, then as last written by us).
        self.committed: Position | None = None
        #: Told, after each successful capture or commit, until when the lease is fresh (monotonic).
        self.on_confirmed: Callable[[float], None] = lambda fresh_until: None

    def read_row(self, call: Call) -> CheckpointRow | None:
        """The row as stored now (to learn why a capture failed)."""
        rt = self._rt
        row = call(lambda: checkpoints_table.read_row(rt.dynamodb, rt.tables.checkpoints, self.shard_id), "GetItem")
        return row  # type: ignore[no-any-return]

    def try_capture(self, call: Call) -> CheckpointRow | None:
        """Take the row if it is unfinished and free, ours, or stale; the row as taken, else None.

        ``call`` runs the write with the caller's retry policy.
        """
        rt = self._rt
        with self._lock:
            if self.state is not LeaseState.UNCLAIMED:
                raise AssertionError(f"capture of {self.shard_id} in state {self.state}")
            started = time.monotonic()
            row: CheckpointRow | None = call(
                lambda: checkpoints_table.capture(
                    rt.dynamodb, rt.tables.checkpoints, self.shard_id, owner_id=rt.client_id,
                    owner_name=rt.client_name, max_age=rt.max_age, parents=self._parents,
                ),
                "UpdateItem",
            )  # fmt: skip
            if row is not None:
                self.state = LeaseState.OWNED
                self.committed = row.checkpoint
                self._confirm(started)
            return row

    def _confirm(self, started: float) -> None:
        """A write that started at ``started`` succeeded (lock held)."""
        self._confirmed_at = started
        self.on_confirmed(started + self._fresh_for)

    @property
    def fresh_until(self) -> float:
        """Until when (monotonic) the lease counts as fresh."""
        return self._confirmed_at + self._fresh_for

    def fresh(self) -> bool:
        """Owned, and confirmed by a write recently enough that no other client can have taken it."""
        return self.state is LeaseState.OWNED and time.monotonic() - self._confirmed_at < self._fresh_for

    def commit(self, checkpoint: Position | None, millis_behind_latest: int | None, call: Call) -> bool:
        """Keep the lease alive and store ``checkpoint`` if it moved forward. False once not owned."""
        rt = self._rt
        with self._lock:
            if self.state is not LeaseState.OWNED:
                return self.state is not LeaseState.LOST
            new = checkpoint if checkpoint is not None and checkpoint != self.committed else None
            if new is not None and self.committed is not None and position_order(new) < position_order(self.committed):
                log.error("refusing to move the checkpoint of %s back (%s < %s)", self.shard_id, new, self.committed)
                new = None
            started = time.monotonic()
            if not self._owned_write(
                call,
                lambda: checkpoints_table.commit(
                    rt.dynamodb, rt.tables.checkpoints, self.shard_id, owner_id=rt.client_id,
                    checkpoint=new, millis_behind_latest=millis_behind_latest,
                ),
            ):  # fmt: skip
                return False
            self._confirm(started)
            if new is not None:
                self.committed = new
                rt.stats.checkpoint_written(self.shard_id)
            return True

    def release(self, checkpoint: Position | None, *, finished: bool, call: Call) -> bool:
        """Store the final checkpoint (and Finished) and give the row up; False if it was not ours."""
        rt = self._rt
        with self._lock:
            if self.state is not LeaseState.OWNED:
                return self.state is not LeaseState.LOST
            moved = checkpoint if checkpoint != self.committed or finished else None
            if not self._owned_write(
                call,
                lambda: checkpoints_table.release(
                    rt.dynamodb, rt.tables.checkpoints, self.shard_id, owner_id=rt.client_id,
                    checkpoint=moved, finished=finished,
                ),
            ):  # fmt: skip
                return False
            self.state = LeaseState.FINISHED if finished else LeaseState.RELEASED
            if checkpoint is not None and checkpoint != self.committed:
                self.committed = checkpoint
                rt.stats.checkpoint_written(self.shard_id)
            return True

    def _owned_write(self, call: Call, write: Callable[[], bool]) -> bool:
        """Run a write conditional on ``OwnerID = me`` (lock held); a failed condition loses the lease."""
        if call(write, "UpdateItem"):
            return True
        self.state = LeaseState.LOST
        return False

    def abandon(self) -> None:
        """No more writes: a release could not be written; the row turns stale and is captured then."""
        with self._lock:
            if self.state is LeaseState.OWNED:
                self.state = LeaseState.RELEASED
