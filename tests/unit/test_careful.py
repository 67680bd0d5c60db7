"""The crash-loop guard's bookkeeping (pure), proven by simulating owners that die.

A shard of N records has at most one poison record, which kills every process that hands it
to its handler; other processes are killed now and then for other reasons. Owners follow the
protocol: in normal mode a reservation is written before any record past the last one is
handed out, and commits (every few records) store the checkpoint and a new reservation; after
an owner dies, the next one walks the episode's window under markers, written before a record
or group goes to the handler. Nothing innocent is ever dead-lettered, the poison is, and at
most ``max_attempts`` processes die on it (two when it is 1).
"""

from __future__ import annotations

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from kinsumer.handling.careful import (
    MIN_WINDOW,
    Episode,
    Range,
    Reservation,
    Walk,
    group_size,
    key,
    window_after,
)
from kinsumer.reading.position import Position


def position(i: int) -> Position:
    return (str(1_000_000 + i), None) if i % 3 else (str(1_000_000 + i), i % 2)  # some look like user records


@attrs.define
class Row:
    checkpoint: int = -1  # index of the last record processed
    reservation: Reservation | None = None
    reservation_end: int = -1  # the index the reservation allows handing out up to
    episode: str | None = None


@attrs.define
class World:
    records: int
    poison: int | None
    max_attempts: int
    kills: set[int]  # (owner number * 10_000 + record index): an unrelated kill while that record is in a handler
    commit_every: int
    handoffs: set[int] = attrs.field(factory=set)  # owners that give the shard up before handling anything
    row: Row = attrs.field(factory=Row)
    deaths_on_poison: int = 0
    dead_lettered: list[int] = attrs.field(factory=list)
    alone_kills: dict[int, int] = attrs.field(factory=dict)  # unrelated kills of a record alone under its marker
    owners: int = 0


def run_owner(world: World, unclean: bool) -> bool | None:
    """One owner's life: True if it died, False once every record is done, None if it gave the shard up."""
    world.owners += 1
    me = world.owners
    row = world.row
    stored = Episode.from_json(row.episode) if row.episode else None
    episode = Episode.on_capture(stored, row.reservation, unclean)
    if me in world.handoffs:  # a clean release before process() began: what the capture counted goes on
        if episode is not None:
            row.episode = episode.to_json()
        row.reservation, row.reservation_end = None, -1
        return None
    done = row.checkpoint  # index of the last record this owner processed
    if episode is not None and episode != stored:  # the capture's bookkeeping is stored before anything else
        row.episode = episode.to_json()

    def dies_on(i: int, alone: bool = False) -> bool:
        if i == world.poison:
            world.deaths_on_poison += 1
            return True
        if me * 10_000 + i in world.kills:
            if alone:
                world.alone_kills[i] = world.alone_kills.get(i, 0) + 1
            return True
        return False

    i = done + 1
    if episode is not None:
        walk = Walk(episode, world.max_attempts)
        alone = False
        while i < world.records and not walk.done:
            in_hand = min(world.records - i, 1 + (i * 7 + me) % 5)
            action, stored_episode = walk.next(position(i), [position(j) for j in range(i + 1, i + in_hand)])
            if action == "dead-letter":
                world.dead_lettered.append(i)
            else:
                if action == "mark":
                    assert stored_episode is not None and stored_episode.marked is not None
                    row.episode, row.checkpoint = stored_episode.to_json(), done  # one write: marker and checkpoint
                    alone = stored_episode.marked.count == 1
                if dies_on(i, alone):
                    return True
            done = i
            i += 1
            if (i * 13 + me) % 9 == 0 and not walk.done:  # the owner turns to another shard: the marker goes
                row.episode, row.checkpoint = walk.leave().to_json(), done
        # the window is over: the episode goes, a fresh reservation comes
        row.episode, row.checkpoint = None, done
        row.reservation = Reservation(position(done) if done >= 0 else None, MIN_WINDOW)
        row.reservation_end = done + MIN_WINDOW
    handed_since = 0
    while i < world.records:
        if i > row.reservation_end or row.reservation is None:  # write a reservation before handing it out
            last = i - 1
            window = window_after(handed_since, max(0, row.reservation_end - last))
            row.reservation = Reservation(position(last) if last >= 0 else None, window)
            row.reservation_end, row.checkpoint, handed_since = last + window, done, 0
        handed_since += 1
        if dies_on(i):
            return True
        done = i
        i += 1
        if i % world.commit_every == 0:  # the commit clock: checkpoint and a new reservation
            window = window_after(handed_since, max(0, row.reservation_end - done))
            row.reservation, row.checkpoint = Reservation(position(done), window), done
            row.reservation_end, handed_since = done + window, 0
    return False


@settings(max_examples=500, deadline=None)
@given(
    records=st.integers(1, 600),
    poison=st.one_of(st.none(), st.integers(0, 599)),
    max_attempts=st.integers(1, 5),
    kills=st.sets(st.integers(10_000, 8 * 10_000 + 599), max_size=6),
    commit_every=st.integers(1, 250),
    handoffs=st.sets(st.integers(1, 12), max_size=4),
)
def test_only_the_poison_is_dead_lettered_after_at_most_max_attempts_deaths_on_it(
    records: int, poison: int | None, max_attempts: int, kills: set[int], commit_every: int, handoffs: set[int]
) -> None:
    if poison is not None and poison >= records:
        poison = None
    world = World(records, poison, max_attempts, kills, commit_every, handoffs)
    unclean = False
    for _ in range(60):
        ended = run_owner(world, unclean)
        if ended is False:
            break
        unclean = bool(ended)
    else:
        raise AssertionError(f"no progress after 60 owners: {world}")
    for record in world.dead_lettered:  # a record is blamed only for deaths it was alone in a handler for
        assert record == poison or world.alone_kills.get(record, 0) >= 1, (record, world)
        if record != poison and max_attempts >= 3:
            assert world.alone_kills[record] + 2 >= max_attempts
    if poison is not None:
        assert world.dead_lettered.count(poison) >= 1, "the poison was never dead-lettered"
        assert world.deaths_on_poison <= max(max_attempts, 2)


def test_one_unrelated_kill_never_gets_a_record_blamed() -> None:
    """A process killed on an ordinary record: the record is handled again (under a marker) and done."""
    for max_attempts in (2, 3, 5):
        for victim in (0, 7, 150):
            world = World(300, None, max_attempts, {1 * 10_000 + victim}, commit_every=20)
            assert run_owner(world, False) and not run_owner(world, True)
            assert world.dead_lettered == []


def test_episodes_and_reservations_survive_their_text_forms() -> None:
    episode = Episode(("49", 3), 120, 2, Range(("50", None), 4), 9, 3, {"48:1": 2})
    assert Episode.from_json(episode.to_json()) == episode
    assert Episode.from_json(Episode(None, 5).to_json()) == Episode(None, 5)
    for reservation in (Reservation(("49", None), 100), Reservation(("49", 2), 7), Reservation(None, 100)):
        assert Reservation.from_text(reservation.to_text()) == reservation
    assert key(("49", None)) == "49" and key(("49", 0)) == "49:0"


def test_a_death_under_a_group_sends_its_records_one_at_a_time_and_under_a_record_blames_it() -> None:
    begun = Episode.begin(Reservation(("10", None), 30))
    assert (begun.until, begun.extra, begun.deaths) == (("10", None), 30, 1)
    group = attrs.evolve(begun, marked=Range(("11", None), 5)).after_death()
    assert (group.marked, group.single, group.single_deaths) == (None, 5, 2)
    one = attrs.evolve(group, marked=Range(("13", None), 1)).after_death()
    assert one.blame == {"13": 3} and one.blamed(("13", None), 3) == 3 and one.blamed(("13", None), 4) is None
    assert attrs.evolve(one).after_death() == one  # nothing marked: no record to count it on
    assert Episode.on_capture(one, None, unclean=False) == one
    assert Episode.on_capture(None, None, unclean=True) is None  # the owner never reserved: it did not use process()


def test_groups_are_single_records_when_no_death_may_be_spent_on_a_group() -> None:
    assert group_size(10_000, 2) == 1 and group_size(10_000, 1) == 1
    assert group_size(10_000, 3) == 100 and group_size(3, 3) == 2
