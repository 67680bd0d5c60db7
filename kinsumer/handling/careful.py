"""The crash-loop guard's bookkeeping: which record a process died on. Pure, no I/O.

A process that dies while a record is in its handler (killed for memory, a native crash,
``os._exit``) cannot say which record it was. Normal operation writes nothing per record, so
the guard works in two modes, kept in the shard's checkpoint row by its owner:

- **Normal**: each commit also stores a :class:`Reservation`: the last record handed to a
  handler, and how many records after it the owner may hand out before its next write. An
  owner never hands out a record past its reservation (it writes a new one first, which the
  window's size, twice what one commit period hands out, makes rare). So when an owner dies,
  the record it died on lies between the shard's checkpoint and the end of its reservation.
- **Careful** (an :class:`Episode`): the next owner of a shard whose owner ended uncleanly
  (captured from it rather than released by it) handles that window alone in its process, under
  markers written before each record or group of records goes to a handler. A death under a
  group's marker makes the group's records go one at a time; a death under one record's marker
  blames that record exactly. Records that merely follow the fatal one are handled under their
  own markers and never blamed.

Deaths are counted per record: the death that began the episode and the death of a group are
presumed to be on each record they cover (they might have been), a death under a record's own
marker adds one. Once a record blamed at least once under its own marker reaches
``max_attempts``, the next owner hands it to the dead-letter sink without calling the handler.
So a record that kills every process handling it kills ``max_attempts`` of them (two when
``max_attempts`` is 1: the first death cannot be pinned on a record without a write per
record), and a record that was in a handler when its process was killed for another reason is
handled again, under its own marker, and not blamed unless it kills a process itself.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence

import attrs

from ..reading.position import Position, position_order

__all__ = [
    "MAX_WINDOW", "MIN_WINDOW", "NO_EPISODE", "Episode", "Range", "Reservation", "Walk", "group_size", "key",
    "window_after",
]  # fmt: skip

#: The fewest records a reservation lets an owner hand out before its next write.
MIN_WINDOW = 100
#: A stored episode's text that means none: the row's episode is removed.
NO_EPISODE = ""
#: The most (a window is replayed carefully after a death: about its square root in writes).
MAX_WINDOW = 1_000_000
_MAX_GROUP = 1000


def key(position: Position) -> str:
    """A record's position as a key of the blame table: ``seq`` or ``seq:sub``."""
    sequence_number, sub_sequence = position
    return sequence_number if sub_sequence is None else f"{sequence_number}:{sub_sequence}"


def _position(text: str) -> Position:
    sequence_number, _, sub_sequence = text.partition(":")
    return sequence_number, int(sub_sequence) if sub_sequence else None


@attrs.frozen
class Reservation:
    """Normal mode's promise: no record past ``window`` records after ``handed`` was handed out."""

    handed: Position | None  # the last record handed to a handler when it was written (None: the shard's start)
    window: int

    def to_text(self) -> str:
        return f"{'' if self.handed is None else key(self.handed)}/{self.window}"

    @classmethod
    def from_text(cls, text: str) -> Reservation:
        position, _, window = text.rpartition("/")
        return cls(_position(position) if position else None, int(window))


def window_after(handed_since: int, previous_end: int, elapsed: float = 0.0, period: float = 0.0) -> int:
    """The next reservation's window: twice what is handed out in a commit ``period`` (at the rate of the
    ``handed_since`` records of the last ``elapsed`` seconds; a window used up early grows at once to
    the rate, not by doubling), at least :data:`MIN_WINDOW`, at most :data:`MAX_WINDOW`, and never
    ending before the previous reservation did (``previous_end``: records after the new ``handed``
    that it already allowed)."""
    scale = period / elapsed if 0 < elapsed < period else 1.0
    return max(MIN_WINDOW, min(MAX_WINDOW, int(2 * handed_since * scale)), previous_end)


@attrs.frozen
class Range:
    """``count`` consecutive records of a shard from ``start`` (in shard order), under one marker."""

    start: Position
    count: int

    def to_json(self) -> list[object]:
        return [key(self.start), self.count]

    @classmethod
    def from_json(cls, data: list[object]) -> Range:
        return cls(_position(str(data[0])), int(str(data[1])))


@attrs.frozen
class Episode:
    """Careful mode on one shard (see the module's description). Stored as JSON in the row, always
    with the checkpoint it goes with: ``marked`` and ``single`` count records right after it."""

    until: Position | None  # the dead owner's reservation: the window ends ``extra`` records after it (None: passed)
    extra: int
    deaths: int = 1  # presumed deaths of each record of the window (the death that began it)
    marked: Range | None = None  # in a handler now: the records right after the checkpoint
    single: int = 0  # records right after the checkpoint that go one at a time (a group that died)
    single_deaths: int = 0  # presumed deaths of each of them
    blame: Mapping[str, int] = attrs.field(factory=dict)  # deaths of records that died under their own marker

    @classmethod
    def begin(cls, reservation: Reservation) -> Episode:
        """The episode after an owner holding ``reservation`` ended uncleanly."""
        return cls(reservation.handed, reservation.window)

    @classmethod
    def on_capture(cls, episode: Episode | None, reservation: Reservation | None, unclean: bool) -> Episode | None:
        """The episode a new owner goes on with: the stored one (a death counted if its owner died),
        a new one if an owner holding a reservation died, else none."""
        if not unclean:
            return episode
        if episode is not None:
            return episode.after_death()
        return None if reservation is None else cls.begin(reservation)

    def after_death(self) -> Episode:
        """The owner handling this episode died: count the death against what was marked.

        A death with nothing marked (between records, or in a DynamoDB call) is on no record. A
        death under a record's own marker counts on it exactly, on top of the deaths presumed on
        it; a death under a group's makes the group's records go one at a time.
        """
        marked = self.marked
        if marked is None:
            return self
        if marked.count == 1:
            name = key(marked.start)
            presumed = self.single_deaths if self.single > 0 else self.deaths
            blame = {**self.blame, name: self.blame.get(name, presumed) + 1}
            return attrs.evolve(self, marked=None, blame=blame)
        return attrs.evolve(self, marked=None, single=marked.count, single_deaths=self.deaths + 1)

    def blamed(self, position: Position, max_attempts: int) -> int | None:
        """Deaths counted for the record at ``position`` if it is to be dead-lettered, else None."""
        deaths = self.blame.get(key(position))
        return deaths if deaths is not None and deaths >= max_attempts else None

    def to_json(self) -> str:
        data: dict[str, object] = {"until": None if self.until is None else key(self.until), "extra": self.extra,
                                   "deaths": self.deaths}  # fmt: skip
        if self.marked is not None:
            data["marked"] = self.marked.to_json()
        if self.single:
            data["single"], data["single_deaths"] = self.single, self.single_deaths
        if self.blame:
            data["blame"] = dict(self.blame)
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Episode:
        data = json.loads(text)
        return cls(
            until=None if data.get("until") is None else _position(str(data["until"])),
            extra=int(data["extra"]),
            deaths=int(data.get("deaths", 1)),
            marked=Range.from_json(data["marked"]) if data.get("marked") else None,
            single=int(data.get("single", 0)),
            single_deaths=int(data.get("single_deaths", 0)),
            blame={str(k): int(v) for k, v in data.get("blame", {}).items()},
        )


def group_size(window: int, max_attempts: int) -> int:
    """How many records go under one marker: one at a time when no death may be spent on a group
    (``max_attempts`` of 2 or less), else about the square root of the window (writes grow as its root)."""
    if max_attempts <= 2:
        return 1
    return max(2, min(_MAX_GROUP, math.isqrt(max(window, 1))))


class Walk:
    """A careful owner's way through an episode's window, record by record in shard order.

    For each record it says whether the record is dead-lettered, goes to the handler under a
    new marker (alone, or opening a group of the records in hand), or goes under the current
    marker; with each new marker, the episode to store (with the checkpoint before the record).
    A record already blamed once always goes alone, and no group reaches it. :meth:`leave` is
    the episode to store when the owner stops handling the shard for now (nothing in a handler);
    :attr:`done` once the window is over.
    """

    def __init__(self, episode: Episode, max_attempts: int) -> None:
        self.episode = attrs.evolve(episode, marked=None)
        self._max_attempts = max_attempts
        self._group = group_size(episode.extra, max_attempts)
        self._past_until = episode.until is None  # records count against ``extra`` once past ``until``
        self._left = episode.extra  # records of the window after ``until`` not seen yet
        self._single_left = episode.single  # records (from the next one) that go one at a time
        self._in_group = 0  # records of the current marker still to come

    @property
    def done(self) -> bool:
        """The window is over: normal mode from the next record on."""
        return self._past_until and self._left <= 0 and self._single_left <= 0 and self._in_group <= 0

    def next(self, position: Position, following: Sequence[Position] = ()) -> tuple[str, Episode | None]:
        """What to do with the record at ``position``, the shard's next one (``following``: the
        records of the shard right after it that are already in hand, for a group).

        ("dead-letter", None): its deaths reached ``max_attempts``; ("mark", episode): store this
        episode (its ``marked`` covers the record, and maybe the next ones) before handing it out;
        ("handle", None): the current marker covers it.
        """
        in_extra, at_until = self._count(position)
        single_here = self._single_left
        if self._single_left > 0:
            self._single_left -= 1
        if self.episode.blamed(position, self._max_attempts) is not None:
            self._in_group = 0
            return "dead-letter", None
        if self._in_group > 0:
            self._in_group -= 1
            return "handle", None
        size = 1
        if single_here <= 0 and key(position) not in self.episode.blame:
            size = min(self._group, 1 + len(following))
            if self._past_until:
                size = min(size, self._left + 1)
            for i, later in enumerate(following[: size - 1]):
                if key(later) in self.episode.blame:  # a blamed record goes alone: the group stops before it
                    size = i + 1
                    break
            size = max(1, size)
        self._in_group = size - 1
        here = self._here(in_extra, single_here)
        if at_until:  # stored with the checkpoint before it: the next owner sees ``until`` again
            here = attrs.evolve(here, until=position)
        self.episode = attrs.evolve(here, marked=Range(position, size))
        return "mark", self.episode

    def leave(self) -> Episode:
        """The episode to store when no record of the shard is in a handler (from the next record on)."""
        self._in_group = 0
        self.episode = self._here(False, self._single_left)
        return self.episode

    def _here(self, in_extra: bool, single: int) -> Episode:
        """The episode from the current record on (``in_extra``: it is one of the extra records)."""
        return attrs.evolve(
            self.episode,
            until=None if self._past_until else self.episode.until,
            extra=self._left + (1 if in_extra else 0),
            marked=None,
            single=max(0, single),
            single_deaths=self.episode.single_deaths if single > 0 else 0,
        )

    def _count(self, position: Position) -> tuple[bool, bool]:
        """Note the record: (it is one of the ``extra`` records after ``until``, it is ``until``)."""
        if self._past_until:
            self._left -= 1
            return True, False
        until = self.episode.until
        assert until is not None
        order, limit = position_order(position), position_order(until)
        if order < limit:
            return False, False
        self._past_until = True
        if order == limit:  # ``until`` itself: handed out by the dead owner, before the extra ones
            return False, True
        self._left -= 1
        return True, False
