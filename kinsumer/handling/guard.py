"""The crash-loop guard of one captured shard: the bookkeeping of :mod:`.careful`, stored in its row.

One :class:`ShardGuard` per capture (it rides on the capture's
:class:`~kinsumer.delivery.progress.ShardProgress`). It does nothing until ``process()`` hands
out a record of the shard; a consumer that only uses ``next*()`` writes nothing of it.

- Normal mode: :meth:`ShardGuard.hand` counts each record handed to a handler, and waits for a
  write (:meth:`GuardIO.commit_now`) before going past the stored reservation; each commit
  stores a new one (:meth:`ShardGuard.reservation`), so in steady flow no extra write happens.
- Careful mode (an episode): :meth:`ShardGuard.plan` says what to do with each record, and the
  markers are stored before the records they cover go to a handler.

Thread-safe: the commit clock and ``process()``'s threads call it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Protocol

import attrs

from .. import clock
from ..reading.position import Position
from .careful import MIN_WINDOW, NO_EPISODE, Episode, Reservation, Walk, key, window_after

__all__ = ["GuardIO", "GuardedRow", "ShardGuard"]


class GuardedRow(Protocol):
    """What a guard starts from: the shard's checkpoint row as its capture read it
    (:class:`~kinsumer.coordination.checkpoints_table.CheckpointRow`)."""

    @property
    def shard_id(self) -> str: ...
    @property
    def checkpoint(self) -> Position | None: ...
    @property
    def careful(self) -> str | None: ...  # the stored episode (Episode.to_json())
    @property
    def handed(self) -> str | None: ...  # the stored reservation (Reservation.to_text())
    @property
    def previous_owner(self) -> str | None: ...  # the capture took the row from a live or dead owner


class GuardIO(Protocol):
    """The writes a guard needs, through the shard's lease (conditional on owning it)."""

    def write(self, careful: str, checkpoint: Position | None, handed: str | None = None) -> bool | None:
        """Store an episode (``NO_EPISODE``: remove it) with the checkpoint (and a reservation); True
        done, False the shard is not ours, None failed (try again)."""
        ...

    def commit_now(self) -> bool | None:
        """Commit the shard now (with a new reservation, if it is still ours); True done, False not ours,
        None failed or a stop came (the guard's ``wait`` says which)."""
        ...

    def note(self, retrying: str | None) -> bool | None:
        """Store what is being retried (None: nothing), for operators; None if it failed (it is not tried again)."""
        ...

    def given_up(self) -> bool:
        """The shard is being given up (handed off, lost, or the consumer stops): nothing more is handed out."""
        ...


class ShardGuard:
    """The crash-loop guard of one capture of a shard (see the module's description)."""

    def __init__(
        self, row: GuardedRow, io: GuardIO, wait: Callable[[float], bool], commit_period: float = 3.0
    ) -> None:
        """``wait(seconds)``: sleep before trying a failed write again; False if the shard is being given up.
        ``commit_period``: how often commits come (the reservation's window covers twice that)."""
        self.shard_id = row.shard_id
        self._stored = Episode.from_json(row.careful) if row.careful else None
        self._reservation = Reservation.from_text(row.handed) if row.handed else None
        self._unclean = row.previous_owner is not None
        self._io = io
        self._given_up = io.given_up  # once per record
        self._wait = wait
        self._lock = threading.Lock()
        self._handing = threading.Lock()  # one hand_through() at a time
        self._began = False
        self._walk: Walk | None = None
        self._handed = 0  # records of this capture handed to a handler
        self._last: Position | None = row.checkpoint  # the last of them (at first: the checkpoint)
        self._allowed = -1  # how many the stored reservation allows (-1: none stored by this owner yet)
        self._reserved_at = 0  # ``_handed`` when the stored reservation was made
        self._reserved_time = clock.monotonic()  # ... and when
        self._period = commit_period

    def begin(self, max_attempts: int) -> bool:
        """``process()`` starts handing out this capture's records: go on with (or begin) an episode,
        stored before anything is handed out. False if the shard is not ours any more."""
        with self._lock:
            if self._began:
                return True
            episode = Episode.on_capture(self._stored, self._reservation, self._unclean)
        if episode != self._stored and not self._store(NO_EPISODE if episode is None else episode.to_json(), None):
            return False
        with self._lock:
            self._began = True
            self._stored = episode
            self._walk = None if episode is None else Walk(episode, max_attempts)
        return True

    @property
    def careful(self) -> bool:
        """An episode is on: records go one marker at a time, alone in the process."""
        walk = self._walk
        return walk is not None and not walk.done

    # ----------------------------------------------------------------- normal mode

    @property
    def began(self) -> bool:
        """:meth:`begin` succeeded: records of this capture may be handed out."""
        return self._began

    def hand(self, position: Position) -> bool:
        """A record goes to a handler: counted, after a write if the stored reservation is used up.
        False if the shard is not ours any more (or is being given up).

        Only after :meth:`begin`, in normal mode. No lock: one record of a shard is handed out at a
        time, and ``_allowed`` only grows. ``_last`` goes first, so a reservation made meanwhile
        never promises less than was handed out.
        """
        if self._given_up() or not self._room(self._handed + 1):
            return False
        self._last = position
        self._handed += 1
        return True

    def hand_through(self, position: Position, count: int) -> bool:
        """:meth:`hand` for records handed out of shard order (``ordering="key"``, from several threads):
        the record at ``position``, the capture's ``count``-th, goes to a handler, and the records before
        it count as handed out too (they went, or go soon), so that the stored reservation still bounds
        what may be in a handler. False if the shard is not ours any more (or is being given up).

        The record counts before the write it may need: a reservation is made after the last record
        counted, so one write covers a record far past the stored reservation's end too. A record before
        one already handed out goes even while the shard is being given up: the handoff waits for it,
        as the checkpoint cannot pass it (see :meth:`handed`).
        """
        if count <= self._handed:
            return True
        if self._given_up():
            return False
        with self._handing:
            with self._lock:
                if count > self._handed:
                    self._last, self._handed = position, count
            return self._room(self._handed)

    @property
    def handed(self) -> int:
        """How many records of this capture count as handed out (with ``ordering="key"``: up to the furthest)."""
        return self._handed

    def _room(self, count: int) -> bool:
        """The stored reservation allows ``count`` records handed out, after writes if needed; False if
        the shard is not ours any more."""
        while count > self._allowed:  # always so before begin() and in careful mode (none stored)
            if not self._began or self.careful:
                when = "in careful mode" if self._began else "before begin()"
                raise AssertionError(f"a record of {self.shard_id} handed out {when}")
            allowed = self._allowed
            if not self._retry(self._io.commit_now):
                return False
            if self._allowed == allowed:  # the commit stored no reservation: the lease was given up meanwhile
                return False
        return True

    def reservation_due(self) -> bool:
        """A commit now would store a new reservation: records were handed out since the stored one
        (or none is stored yet), in normal mode."""
        return self._began and not self.careful and (self._allowed < 0 or self._handed != self._reserved_at)

    def reservation(self) -> tuple[str, tuple[int, int]] | None:
        """The reservation a commit should store now (its text, and the token for :meth:`reserved`);
        None if none is due (see :meth:`reservation_due`). Called under the shard lease's lock, as
        :meth:`reserved` is after the write: one reservation is made and stored at a time."""
        with self._lock:
            if not self.reservation_due():
                return None
            last, handed = self._last, self._handed  # in this order: see hand()
            elapsed = clock.monotonic() - self._reserved_time
            window = window_after(handed - self._reserved_at, max(0, self._allowed - handed), elapsed, self._period)
            return Reservation(last, window).to_text(), (handed, window)

    def reserved(self, token: tuple[int, int]) -> None:
        """The reservation of ``token`` (from :meth:`reservation`) is stored."""
        handed, window = token
        with self._lock:
            self._reserved_at, self._reserved_time = handed, clock.monotonic()
            self._allowed = max(self._allowed, handed + window)

    # ----------------------------------------------------------------- careful mode

    def plan(self, position: Position, following: Sequence[Position] = ()) -> tuple[str, Episode | None]:
        """What to do with the record at ``position`` in careful mode (see :meth:`.careful.Walk.next`)."""
        walk = self._walk
        assert walk is not None
        return walk.next(position, following)

    def deaths(self, position: Position) -> int:
        """The deaths counted against the record at ``position`` (careful mode)."""
        walk = self._walk
        return walk.episode.blame.get(key(position), 0) if walk is not None else 0

    def mark(self, episode: Episode, checkpoint: Position | None) -> bool:
        """Store a marker before its records go to a handler; False if the shard is not ours any more."""
        return self._store(episode.to_json(), checkpoint)

    def leave(self, checkpoint: Position | None) -> bool:
        """No record of the shard is in a handler for now: the marker goes (the episode stays)."""
        walk = self._walk
        if walk is None or walk.done:
            return True
        return self._store(walk.leave().to_json(), checkpoint)

    def finish(self, last: Position | None, checkpoint: Position | None, count: int) -> bool:
        """If the window is over: back to normal mode (the episode removed, a reservation stored).
        ``last``: the record just done, the capture's ``count``-th (every record before it is done)."""
        walk = self._walk
        if walk is None or not walk.done:
            return True
        handed = count
        reservation = Reservation(last, MIN_WINDOW)
        if not self._store(NO_EPISODE, checkpoint, reservation.to_text()):
            return False
        with self._lock:
            self._walk = None
            self._last, self._handed = last, handed
            self._reserved_at, self._allowed = handed, handed + MIN_WINDOW
        return True

    def note_retrying(self, attempts: int | None, error: str = "") -> None:
        """``process()`` calls a failing handler again (``attempts`` so far), or stopped doing so (None).
        Stored in the row for ``kinsumer status``; a write only when a record fails."""
        self._io.note(None if attempts is None else f"attempt {attempts}: {error}"[:200])

    def release_state(self) -> str | None:
        """The episode the next owner goes on with, if one is under way (its marker cleared).

        A clean release tells the next owner that nothing was in a handler, and removes the
        reservation. So a capture from a dead owner that is given up before ``process()`` began
        on it passes on what :meth:`begin` would have stored: the death counted (its marker
        cleared), or the episode a death in normal mode begins. Else that death would be lost.
        """
        with self._lock:
            if not self._began:
                episode = Episode.on_capture(self._stored, self._reservation, self._unclean)
                return None if episode is None or episode == self._stored else episode.to_json()
            walk = self._walk
        if walk is None or walk.done:
            return None
        return attrs.evolve(walk.episode, marked=None).to_json()

    # ----------------------------------------------------------------- writes

    def _store(self, careful: str, checkpoint: Position | None, handed: str | None = None) -> bool:
        return self._retry(lambda: self._io.write(careful, checkpoint, handed))

    def _retry(self, write: Callable[[], bool | None]) -> bool:
        """Run ``write`` until it succeeds (True) or says the shard is not ours (False)."""
        while True:
            done = write()
            if done is not None:
                return done
            if not self._wait(0.25):
                return False
