"""The phase of one shard in this client: one value, one owner, named mutators.

A :class:`ShardPhase` lives as long as one shard worker (at most one capture of the shard). Before
it, a shard's phase was spread over four holders that had to be read together: the lease's
``LeaseState`` (the row's ownership), the delivery's ``revoked`` flag (nothing more handed out),
and the worker's ``_stop`` (a stop was asked) and ``_ended`` (its coroutine is over) events. Now the
phase is :attr:`ShardPhase.value`; the lease's state is a view of it, and the events are set here.

The transitions (``-`` a no-op; any other pair is refused with :class:`PhaseError`)::

                 captured      reached_end  revoke        released     lost
    CAPTURING    READING       !            CALLED_OFF    !            !
    CALLED_OFF   HANDING_OFF   !            -             !            !
    READING      !             FINISHING    HANDING_OFF   RELEASED *   LOST
    FINISHING    !             !            HANDING_OFF   RELEASED *   LOST
    HANDING_OFF  !             -            -             RELEASED *   LOST
    RELEASED     !             !            -             !            !
    FINISHED     !             !            -             !            !
    LOST         !             -            -             !            !

    * FINISHED if released ``finished``. The worker revokes before it releases (a handoff) or reaches
      the end first (a finish): a release from READING is the lease's own tests'.

Who calls what: the lease, under its lock, ``captured``, ``released`` and ``lost`` (the row's writes,
so the ownership it checks before a write changes only under that lock); anyone ``revoke`` (a stop
asked of the worker, a rebalance, a commit that found the row taken, the delivery starting a
handoff or a drop); the worker ``reached_end`` and ``end``.

Derived from the value, and set only here: :attr:`ShardPhase.owned` (the row is ours: the lease may
write), :attr:`ShardPhase.revoked` (nothing more is handed out; read without a lock on the
per-record path) and :attr:`ShardPhase.stopping`, the event waits and AWS calls end on, set with
``revoked``. :attr:`ShardPhase.ended` is the worker's: its coroutine is over (any phase).
"""

from __future__ import annotations

import enum
import threading

__all__ = ["Phase", "PhaseError", "ShardPhase"]


class Phase(enum.Enum):
    #: the row is not ours yet
    CAPTURING = "capturing"
    #: asked to stop before the row was ours (a capture under way that succeeds is handed off at once)
    CALLED_OFF = "called off"
    #: ours: read and handed out
    READING = "reading"
    #: ours, read to the end of its closed shard: handed out until all is processed, then released Finished
    FINISHING = "finishing"
    #: ours, given up (a stop, a rebalance, a failure): nothing more handed out, what was is awaited, then released
    HANDING_OFF = "handing off"
    #: given back (or left to age as the client left)
    RELEASED = "released"
    #: given back marked Finished
    FINISHED = "finished"
    #: another client owns the row: nothing more is written or awaited
    LOST = "lost"


CAPTURING, CALLED_OFF, READING, FINISHING = Phase.CAPTURING, Phase.CALLED_OFF, Phase.READING, Phase.FINISHING
HANDING_OFF, RELEASED, FINISHED, LOST = Phase.HANDING_OFF, Phase.RELEASED, Phase.FINISHED, Phase.LOST

_OWNED = frozenset({READING, FINISHING, HANDING_OFF})
_HANDING_OUT = frozenset({CAPTURING, READING, FINISHING})  # not revoked (CAPTURING: nothing to hand out yet)


class PhaseError(AssertionError):
    """A transition the shard's phase does not allow: a bug in its caller."""


class ShardPhase:
    """The one value of a shard's phase in this client, and its mutators (see the module's description)."""

    __slots__ = ("_lock", "ended", "owned", "revoked", "stopping", "value")

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one transition at a time (they come from several threads)
        #: The phase (read it; change it only through the mutators).
        self.value = CAPTURING
        #: The row is ours (READING, FINISHING, HANDING_OFF): the lease may write it.
        self.owned = False
        #: Nothing more is handed out (neither CAPTURING, READING nor FINISHING); read without the lock.
        self.revoked = False
        #: Set with ``revoked``: the worker's waits and AWS calls end, its reader stops.
        self.stopping = threading.Event()
        #: The worker's coroutine is over.
        self.ended = threading.Event()

    def __repr__(self) -> str:
        return f"ShardPhase({self.value.name}{', ended' if self.ended.is_set() else ''})"

    # ----------------------------------------------------------------- the lease's (under its lock)

    def captured(self) -> None:
        """The lease took the row: READING, or HANDING_OFF if a stop was asked meanwhile."""
        with self._lock:
            if self.value is CAPTURING:
                self._enter(READING)
            elif self.value is CALLED_OFF:
                self._enter(HANDING_OFF)
            else:
                raise PhaseError(f"captured while {self.value.name}")

    def released(self, *, finished: bool) -> None:
        """The lease gave the row back (``finished``: marked Finished), or left it to age as the client left."""
        with self._lock:
            if self.value not in _OWNED:
                raise PhaseError(f"released while {self.value.name}")
            self._enter(FINISHED if finished else RELEASED)

    def lost(self) -> None:
        """A write of the lease found the row another client's."""
        with self._lock:
            if self.value not in _OWNED:
                raise PhaseError(f"lost while {self.value.name}")
            self._enter(LOST)

    # ----------------------------------------------------------------- anyone's

    def revoke(self) -> bool:
        """Hand nothing more out: a stop asked of the worker, a rebalance, a commit that found the row taken,
        the delivery starting a handoff or a drop. True if the phase changed."""
        with self._lock:
            if self.value is CAPTURING:
                self._enter(CALLED_OFF)
            elif self.value in (READING, FINISHING):
                self._enter(HANDING_OFF)
            else:
                return False
            return True

    # ----------------------------------------------------------------- the worker's

    def reached_end(self) -> bool:
        """The worker read the shard to its end: FINISHING, unless it is being given up already (False)."""
        with self._lock:
            if self.value is READING:
                self._enter(FINISHING)
                return True
            if self.value in (HANDING_OFF, LOST):
                return False
            raise PhaseError(f"reached the end while {self.value.name}")

    def end(self) -> None:
        """The worker's coroutine is over (whatever the phase): it changes the shard no more."""
        self.ended.set()

    # ----------------------------------------------------------------- with the lock held

    def _enter(self, phase: Phase) -> None:
        """The one place the value and what is derived from it change."""
        self.value = phase
        self.owned = phase in _OWNED
        if phase not in _HANDING_OUT:
            self.revoked = True
            self.stopping.set()
