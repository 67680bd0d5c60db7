"""This client's lease on one shard: every write to its checkpoint row that depends on owning it.

Capture is a conditional write (the row is unfinished and free, ours, or exactly as read
while its owner was found dead); commit, release and finish are conditional on ``OwnerID =
me``. A write whose condition fails means another client owns the shard: the lease is LOST
and writes nothing more, so a client that was paused or cut off can never move the new
owner's checkpoint. The lease's writes are serialised, so a commit never lands between a
release and its caller's next step.

Ownership stays alive through the client's heartbeat (:mod:`.liveness`), not through writes
to the row: a commit writes only when the checkpoint moved, so an idle shard writes nothing.
The lease is *fresh* while the heartbeat chain that was current when the lease was last
confirmed (captured, or a write succeeded) goes on. When the chain broke (a pause, DynamoDB
out of reach), others may have taken the shard: a worker hands no record on until a write
confirms the lease in the new chain (a client resumed after a long pause learns it lost the
shard before delivering more of it).
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

import attrs

from ..aws.kinesis import created_at
from ..aws.tables import now_ms
from ..delivery.phase import CALLED_OFF, CAPTURING, LOST, Phase, ShardPhase
from ..reading.position import Position, position_order
from . import checkpoints_table
from .checkpoints_table import CheckpointRow
from .runtime import Runtime
from .streams import StreamScope

__all__ = ["Call", "Commit", "LeaseState", "Reserving", "ShardLease"]

log = logging.getLogger("kinsumer.lease")

#: Runs one AWS call (a thunk, and the operation's name) with the caller's retry policy:
#: every write takes one, so the caller decides how long transient faults are retried.
Call = Callable[[Callable[[], Any], str], Any]


class Reserving(Protocol):
    """The crash-loop guard's side of a commit that stores a reservation (:class:`~kinsumer.handling.guard.ShardGuard`).

    The reservation is made and marked stored under the lease's lock, right before and right after
    its write: commits of the clock and of a worker run one at a time, so the row always holds the
    last reservation made, and the guard never counts on one that a later write replaced.
    """

    def reservation_due(self) -> bool:
        """A commit now would store a new reservation."""
        ...

    def reservation(self) -> tuple[str, tuple[int, int]] | None:
        """The reservation to store (its text, and a token for :meth:`reserved`); None if none is due."""
        ...

    def reserved(self, token: tuple[int, int]) -> None:
        """The reservation of ``token`` is stored."""
        ...


@attrs.frozen
class Commit:
    """What one commit of a shard stores."""

    checkpoint: Position | None
    lag: int | None = None
    #: The crash-loop guard in normal mode: the commit also stores its new reservation, if one is due.
    guard: Reserving | None = None
    #: Epoch ms since which a handler call under way has run, once it has for long (a write when it changes).
    busy_since: int | None = None
    #: Records sent to the sink as too old, this capture (stored with the writes that happen anyway).
    expired: int = 0
    #: Epoch ms: the arrival in the stream of the oldest record of the shard this client holds and has not
    #: finished with; None if it holds none (stored with the writes that happen anyway, and in a write of its
    #: own when the row says none while one is held for longer than two commit periods).
    oldest_arrival: int | None = None
    #: User records of KPL aggregates read outside the shard's hash key range, this capture (stored with the
    #: writes that happen anyway).
    outside_range: int = 0

    @property
    def holds_records(self) -> bool:
        """The shard holds records read and not processed yet (they wait for a fresh lease)."""
        return self.oldest_arrival is not None


class LeaseState(enum.Enum):
    """The row's side of the shard's :class:`~kinsumer.delivery.phase.Phase` (:attr:`ShardLease.state`, a view)."""

    UNCLAIMED = "unclaimed"  # not captured (yet)
    OWNED = "owned"  # captured: the client's heartbeat keeps it alive
    RELEASED = "released"  # given back with its final checkpoint
    FINISHED = "finished"  # released with Finished set: the shard is closed and fully processed
    LOST = "lost"  # a conditional write failed: another client owns the shard now


_LEASE_STATE = {
    Phase.CAPTURING: LeaseState.UNCLAIMED, Phase.CALLED_OFF: LeaseState.UNCLAIMED,
    Phase.READING: LeaseState.OWNED, Phase.FINISHING: LeaseState.OWNED, Phase.HANDING_OFF: LeaseState.OWNED,
    Phase.RELEASED: LeaseState.RELEASED, Phase.FINISHED: LeaseState.FINISHED, Phase.LOST: LeaseState.LOST,
}  # fmt: skip


class ShardLease:
    """The checkpoint row of one shard, as far as this client owns it."""

    def __init__(
        self,
        runtime: Runtime,
        shard_id: str,
        parents: tuple[str, ...] = (),
        scope: StreamScope | None = None,
        phase: ShardPhase | None = None,
    ) -> None:
        #: The row's key: the shard ID, or ``<stream>/<shard ID>`` for a stream not the home one.
        self.shard_id = shard_id
        self._scope = scope or runtime.streams[0]
        self._rt = runtime
        self._parents = parents
        self._lock = threading.Lock()  # one write at a time
        self._liveness = runtime.liveness
        self._epoch = -1  # the heartbeat epoch in which a write last confirmed the lease
        self._busy_since: int | None = None  # as stored in the row (a capture removes it)
        self._oldest_arrival: int | None = None  # as stored in the row (a capture removes it)
        #: The shard's phase, which the lease moves (under its lock) as it captures, releases or loses the row.
        self.phase = phase if phase is not None else ShardPhase()
        #: The checkpoint stored in the row (as captured, then as last written by us).
        self.committed: Position | None = None
        #: Told, after each successful capture or commit, until when the lease is fresh (monotonic).
        self.on_confirmed: Callable[[float], None] = lambda fresh_until: None

    @property
    def state(self) -> LeaseState:
        """The row's ownership, as the shard's phase says."""
        return _LEASE_STATE[self.phase.value]

    def read_row(self, call: Call) -> CheckpointRow | None:
        """The row as stored now (to learn why a capture failed)."""
        rt = self._rt
        row = call(lambda: checkpoints_table.read_row(rt.dynamodb, rt.tables.checkpoints, self.shard_id), "GetItem")
        return row  # type: ignore[no-any-return]

    def try_capture(self, call: Call, taking: CheckpointRow | None = None) -> CheckpointRow | None:
        """Take the row if it is unfinished and free or ours, or still exactly ``taking`` (read while
        its owner was found dead); the row as taken, else None.

        ``call`` runs the write with the caller's retry policy.
        """
        rt = self._rt
        with self._lock:
            if self.phase.value not in (CAPTURING, CALLED_OFF):
                raise AssertionError(f"capture of {self.shard_id} in phase {self.phase.value}")
            epoch = self._liveness.epoch
            row: CheckpointRow | None = call(
                lambda: checkpoints_table.capture(
                    rt.dynamodb, rt.tables.checkpoints, self.shard_id, owner_id=rt.client_id,
                    owner_name=rt.client_name, parents=self._parents, taking=taking, stream=self._scope.identity,
                    instance=rt.instance,
                ),
                "UpdateItem",
            )  # fmt: skip
            if row is not None and row.foreign(self._scope.identity):
                log.warning(
                    "the checkpoint of %s belongs to an earlier stream %s (created %s); this one was created "
                    "%s: the shard starts from initial_position and its row is overwritten",
                    self.shard_id, self._scope.name, created_at(row.stream), created_at(self._scope.identity),
                )  # fmt: skip
                reset = call(
                    lambda: checkpoints_table.reset(
                        rt.dynamodb, rt.tables.checkpoints, self.shard_id, owner_id=rt.client_id,
                        stream=self._scope.identity, parents=self._parents,
                    ),
                    "UpdateItem",
                )  # fmt: skip
                row = row.without_progress() if reset else None  # not reset: taken meanwhile, not ours
            if row is not None:
                self.phase.captured()
                self.committed = row.checkpoint
                self._busy_since = None
                self._oldest_arrival = None
                self._liveness.subscribe(self._heartbeat)
                self._confirm(epoch)
            return row

    def _confirm(self, epoch: int) -> None:
        """A write succeeded that started in heartbeat epoch ``epoch`` (lock held)."""
        self._epoch = epoch
        if self.fresh():
            self.on_confirmed(self._liveness.fresh_until)

    def _heartbeat(self, epoch: int, fresh_until: float) -> None:
        """The client heartbeated: the lease stays fresh if the chain it was confirmed in goes on."""
        if self.phase.owned and epoch == self._epoch:
            self.on_confirmed(fresh_until)

    @property
    def fresh_until(self) -> float:
        """Until when (monotonic) the lease counts as fresh."""
        return self._liveness.fresh_until if self._epoch == self._liveness.epoch else -float("inf")

    def fresh(self) -> bool:
        """Owned, confirmed in the current heartbeat chain, and that chain vouches for now."""
        return self.phase.owned and self._epoch == self._liveness.epoch and self._liveness.fresh()

    def needs_confirming(self) -> bool:
        """Owned, but last confirmed before the heartbeat chain broke: a write must confirm it."""
        return self.phase.owned and self._epoch != self._liveness.epoch

    def needs_commit(self, commit: Commit) -> bool:
        """Whether :meth:`commit` would write anything now (the decision it takes, without the write)."""
        with self._lock:
            guard = commit.guard
            more = (guard is not None and guard.reservation_due()) or commit.busy_since != self._busy_since
            more = more or self._held_unstored(commit)
            return self.phase.owned and self._to_write(commit.checkpoint, more, commit.holds_records)[2]

    def _held_unstored(self, commit: Commit) -> bool:
        """The row says no record is held while one has been for longer than two commit periods (lock held)."""
        arrival = commit.oldest_arrival
        if arrival is None or self._oldest_arrival is not None:
            return False
        return now_ms() - arrival > 2000 * self._rt.config.commit_frequency

    def _to_write(self, checkpoint: Position | None, more: bool, held: bool) -> tuple[Position | None, int, bool]:
        """What a commit stores (lock held): the checkpoint if it moved forward, the heartbeat epoch it
        writes in, and whether it writes at all (a new checkpoint, a lease to confirm, or ``more``: a
        reservation, or a long handler call begun or ended).

        A lease last confirmed before the heartbeat chain broke is confirmed by a write only while the
        shard holds records (``held``: read and not yet processed), which wait for it: an idle shard's
        lease is confirmed when records come (the worker asks before it hands them on). So a late
        heartbeat costs a write per busy shard, not one per owned shard: at 1,024 idle shards those
        1,024 writes at once slowed the machine enough to make the next heartbeat late too."""
        new = self._forward(checkpoint)
        epoch = self._liveness.epoch
        confirm = held and epoch != self._epoch and self._liveness.fresh()  # a write in this chain confirms it
        return new, epoch, new is not None or confirm or more

    def commit(self, latest: Callable[[], Commit], call: Call) -> bool:
        """Store what ``latest()`` says, asked under the lease's lock (so of two commits racing, the
        clock's and one a worker asked for, the later stores the later checkpoint): the checkpoint if it
        moved forward, and the crash-loop guard's new reservation if one is due; or confirm a lease the
        heartbeat no longer vouches for (once it does again); otherwise write nothing. False once not
        owned; True without a write once released."""
        rt = self._rt
        with self._lock:
            if not self.phase.owned:
                return self.phase.value is not LOST
            commit = latest()
            checkpoint, millis_behind_latest, guard = commit.checkpoint, commit.lag, commit.guard
            reservation = guard.reservation() if guard is not None else None
            handed = None if reservation is None else reservation[0]
            busy = commit.busy_since
            more = handed is not None or busy != self._busy_since or self._held_unstored(commit)
            new, epoch, writes = self._to_write(checkpoint, more, commit.holds_records)
            if not writes:
                return True
            if not self._owned_write(
                call,
                lambda: checkpoints_table.commit(
                    rt.dynamodb, rt.tables.checkpoints, self.shard_id, owner_id=rt.client_id,
                    checkpoint=new, millis_behind_latest=millis_behind_latest, handed=handed,
                    busy_since=busy, expired=commit.expired, oldest_arrival=commit.oldest_arrival,
                    outside_range=commit.outside_range,
                ),
            ):  # fmt: skip
                return False
            self._written(epoch, new)
            self._busy_since = busy
            self._oldest_arrival = commit.oldest_arrival
            if guard is not None and reservation is not None:
                guard.reserved(reservation[1])
            return True

    def guard(self, checkpoint: Position | None, careful: str, call: Call, handed: str | None = None) -> bool:
        """Store the crash-loop guard's episode (``NO_EPISODE``: remove it) with the
        checkpoint (if it moved forward), and a reservation if given. False once not owned."""
        rt = self._rt
        with self._lock:
            if not self.phase.owned:
                return False
            new = self._forward(checkpoint)
            epoch = self._liveness.epoch
            if not self._owned_write(
                call,
                lambda: checkpoints_table.guard(
                    rt.dynamodb, rt.tables.checkpoints, self.shard_id, owner_id=rt.client_id,
                    checkpoint=new, careful=careful, handed=handed,
                ),
            ):  # fmt: skip
                return False
            self._written(epoch, new)
            return True

    def note_retrying(self, retrying: str | None, call: Call) -> bool:
        """Store what ``process()`` retries on the shard (None: nothing); False once not owned."""
        return self._owned_field(call, checkpoints_table.note_retrying, retrying=retrying)

    def note_paused(self, paused: bool, call: Call) -> bool:
        """Store that the shard is paused (or no longer is); False once not owned."""
        return self._owned_field(call, checkpoints_table.note_paused, paused=paused)

    def _forward(self, checkpoint: Position | None) -> Position | None:
        """``checkpoint`` if it is ahead of the stored one, else None (lock held)."""
        new = checkpoint if checkpoint is not None and checkpoint != self.committed else None
        if new is not None and self.committed is not None and position_order(new) < position_order(self.committed):
            log.error("refusing to move the checkpoint of %s back (%s < %s)", self.shard_id, new, self.committed)
            return None
        return new

    def _written(self, epoch: int, new: Position | None) -> None:
        """An owned write that started in heartbeat epoch ``epoch`` succeeded (lock held)."""
        if epoch == self._liveness.epoch:
            self._confirm(epoch)
        if new is not None:
            self.committed = new
            self._rt.stats.checkpoint_written(self.shard_id)

    def record_start(self, start_at: int, call: Call) -> bool:
        """Store where the shard starts while it has no checkpoint (epoch ms); False once not owned."""
        return self._owned_field(call, checkpoints_table.record_start, start_at=start_at)

    def _owned_field(self, call: Call, write: Callable[..., bool], **fields: object) -> bool:
        """One of the row's fields written by its owner through ``write`` (a function of
        :mod:`.checkpoints_table`); False once not owned."""
        rt = self._rt
        with self._lock:
            if not self.phase.owned:
                return False
            return self._owned_write(
                call,
                lambda: write(rt.dynamodb, rt.tables.checkpoints, self.shard_id, owner_id=rt.client_id, **fields),
            )

    def release(
        self,
        checkpoint: Position | None,
        *,
        finished: bool,
        call: Call,
        careful: str | None = None,
        expired: int = 0,
        outside_range: int = 0,
    ) -> bool:
        """Store the final checkpoint (and Finished, and a crash-loop guard's episode to go on with, and the
        records sent to the sink as too old, and those read outside the shard's range) and give the row up;
        False if it was not ours."""
        rt = self._rt
        with self._lock:
            if not self.phase.owned:
                return self.phase.value is not LOST
            moved = checkpoint if checkpoint != self.committed or finished else None
            if not self._owned_write(
                call,
                lambda: checkpoints_table.release(
                    rt.dynamodb, rt.tables.checkpoints, self.shard_id, owner_id=rt.client_id,
                    checkpoint=moved, finished=finished, careful=careful, expired=expired, outside_range=outside_range,
                ),
            ):  # fmt: skip
                return False
            self.phase.released(finished=finished)
            self._liveness.unsubscribe(self._heartbeat)
            if checkpoint is not None and checkpoint != self.committed:
                self.committed = checkpoint
                rt.stats.checkpoint_written(self.shard_id)
            return True

    def _owned_write(self, call: Call, write: Callable[[], bool]) -> bool:
        """Run a write conditional on ``OwnerID = me`` (lock held); a failed condition loses the lease."""
        if call(write, "UpdateItem"):
            return True
        self.phase.lost()
        self._liveness.unsubscribe(self._heartbeat)
        return False

    def abandon(self) -> None:
        """No more writes: a release could not be written as this client left; its row is taken once old."""
        with self._lock:
            if self.phase.owned:
                self.phase.released(finished=False)
                self._liveness.unsubscribe(self._heartbeat)
