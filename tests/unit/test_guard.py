"""The crash-loop guard of one capture (:class:`~kinsumer.handling.guard.ShardGuard`), over a row kept in memory.

What a release leaves in the row must let the next owner count every death: also when the
shard is given up (a clean release: a rebalance, a stop) before ``process()`` handed out any
of its records, right after it was captured from an owner that died.
"""

from __future__ import annotations

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from kinsumer.coordination.checkpoints_table import CheckpointRow
from kinsumer.handling.careful import NO_EPISODE, Episode, Range, Reservation
from kinsumer.handling.guard import ShardGuard
from kinsumer.reading.position import Position


def at(i: int) -> Position:
    return str(100 + i), None


@attrs.define
class MemoryRow:
    """The row's guard fields; every write goes through (the shard stays ours)."""

    checkpoint: Position | None = None
    careful: str | None = None
    handed: str | None = None
    previous_owner: str | None = None

    def write(self, careful: str, checkpoint: Position | None, handed: str | None = None) -> bool | None:
        self.careful = None if careful == NO_EPISODE else careful
        self.checkpoint = checkpoint if checkpoint is not None else self.checkpoint
        self.handed = handed if handed is not None else self.handed
        return True

    def commit_now(self) -> bool | None:
        return True

    def note(self, retrying: str | None) -> bool | None:
        return True

    def given_up(self) -> bool:
        return False

    def capture(self, dead_owner: bool) -> ShardGuard:
        """A new owner's guard: captured from a dead owner, or after a clean release."""
        row = CheckpointRow(
            "shardId-000000000000",
            sequence_number=None if self.checkpoint is None else self.checkpoint[0],
            previous_owner="dead-client" if dead_owner else None,
            handed=self.handed,
            careful=self.careful,
        )
        return ShardGuard(row, self, lambda seconds: True)

    def release(self, guard: ShardGuard) -> None:
        """A clean release: the episode to go on with (if any), the reservation removed."""
        carried = guard.release_state()
        if carried is not None:
            self.careful = carried
        self.handed = None


def test_a_death_under_a_group_survives_an_owner_that_gives_the_shard_up_before_handling_it() -> None:
    row = MemoryRow(at(5), Episode(at(5), 30, marked=Range(at(6), 5)).to_json())  # died with 6..10 in a handler
    row.release(row.capture(dead_owner=True))  # captured, then rebalanced away before process() began on it
    after = row.capture(dead_owner=False)
    assert after.begin(max_attempts=3)
    action, episode = after.plan(at(6), [at(i) for i in range(7, 11)])
    assert action == "mark" and episode is not None and episode.marked == Range(at(6), 1)  # one at a time now
    assert episode.single_deaths == 2  # the death that began the episode and the group's


def test_a_death_in_normal_mode_survives_an_owner_that_gives_the_shard_up_before_handling_it() -> None:
    row = MemoryRow(at(3), handed=Reservation(at(5), 100).to_text())  # died with at most 100 after record 5 handed
    row.release(row.capture(dead_owner=True))
    assert row.handed is None  # a clean release removes the reservation ...
    after = row.capture(dead_owner=False)
    assert after.begin(max_attempts=3) and after.careful  # ... and the episode it began goes on
    stored = Episode.from_json(row.careful or "")
    assert (stored.until, stored.extra, stored.deaths) == (at(5), 100, 1)


def test_what_a_release_passes_on_does_not_depend_on_whether_process_began() -> None:
    for careful, handed in (
        (Episode(at(5), 30, marked=Range(at(6), 5)).to_json(), None),
        (None, Reservation(at(5), 100).to_text()),
    ):
        unbegun, begun = MemoryRow(at(5), careful, handed), MemoryRow(at(5), careful, handed)
        guard = begun.capture(dead_owner=True)
        assert guard.begin(max_attempts=3)
        begun.release(guard)
        unbegun.release(unbegun.capture(dead_owner=True))
        assert unbegun.careful == begun.careful is not None


def test_a_clean_capture_given_up_before_handling_anything_leaves_the_row_as_it_was() -> None:
    episode = Episode(at(5), 30, single=4, single_deaths=2).to_json()
    row = MemoryRow(at(5), episode)
    row.release(row.capture(dead_owner=False))
    assert row.careful == episode
    empty = MemoryRow(at(5))
    empty.release(empty.capture(dead_owner=False))
    assert empty.careful is None


@attrs.define
class CommittingRow(MemoryRow):
    """A row whose commits store the guard's reservation, as the shard's committer does."""

    guard: ShardGuard | None = None
    commits: int = 0

    def commit_now(self) -> bool | None:
        assert self.guard is not None
        made = self.guard.reservation()
        if made is not None:
            self.handed, token = made
            self.guard.reserved(token)
        self.commits += 1
        return True

    def bound(self) -> int:
        """The last record (its index) the stored reservation lets the owner hand out."""
        assert self.handed is not None
        reservation = Reservation.from_text(self.handed)
        last = -1 if reservation.handed is None else int(reservation.handed[0]) - 100
        return last + reservation.window


@settings(max_examples=100, deadline=None)
@given(order=st.permutations(range(350)), window_start=st.integers(0, 5))
def test_records_handed_out_of_shard_order_stay_within_the_stored_reservation(
    order: list[int], window_start: int
) -> None:
    """ordering="key" hands a shard's records out in any order: each counts the records before it too."""
    row = CommittingRow()
    guard = row.guard = row.capture(dead_owner=False)
    assert guard.begin(max_attempts=3)
    furthest = -1
    for i in order:
        assert guard.hand_through(at(i), i + 1)
        furthest = max(furthest, i)
        assert row.bound() >= furthest  # a death now: every record in a handler is within the window
    assert row.commits <= 4  # a write per window used up, not per record


def test_handing_through_goes_on_from_a_careful_window_at_the_record_after_it() -> None:
    row = CommittingRow(at(-1), handed=Reservation(at(2), 5).to_text())  # died with up to record 7 handed
    guard = row.guard = row.capture(dead_owner=True)
    assert guard.begin(max_attempts=3) and guard.careful
    i = 0
    while guard.careful:
        action, episode = guard.plan(at(i), [at(j) for j in range(i + 1, 20)])
        if action == "mark":
            assert episode is not None and guard.mark(episode, at(i - 1) if i else None)
        assert guard.finish(at(i), at(i), i + 1)
        i += 1
    assert i == 8  # the window: records 0 to 7
    for j in (12, 9, 8, 10):
        assert guard.hand_through(at(j), j + 1)
        assert row.bound() >= 12
