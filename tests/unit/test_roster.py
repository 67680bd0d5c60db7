"""The roster the leader publishes, and when a follower may take it instead of scanning. Pure."""

from __future__ import annotations

import attrs
from hypothesis import given
from hypothesis import strategies as st

from kinsumer.coordination.clients_table import ClientRow, Headline
from kinsumer.coordination.membership import Membership
from kinsumer.coordination.roster import Roster, headline_to_trust, silent_until

NOW = 1_700_000_000_000
MAX_AGE = 8.0
PERIOD = 2.0

ids = st.text("abcdefgh-0123", min_size=1, max_size=12)
rows = st.dictionaries(
    ids,
    st.tuples(
        st.integers(0, 60_000),  # ms since the last heartbeat
        st.text("0123456789abcdef", min_size=1, max_size=8),  # instance
        st.integers(0, 50),  # cache version
        st.booleans(),  # leaving
        st.lists(st.sampled_from(["s1", "s2", "s3/x"]), max_size=3, unique=True).map(tuple),
    ),
    max_size=12,
).map(lambda found: [row(cid, *fields) for cid, fields in found.items()])


def row(cid: str, age: int, instance: str, version: int, leaving: bool, streams: tuple[str, ...]) -> ClientRow:
    return ClientRow(cid, f"name-{cid}", NOW - age, "h", 7, version, leaving, instance, streams=streams)


@given(rows)
def test_the_roster_reads_back_as_written_and_its_digest_names_its_content(found: list[ClientRow]) -> None:
    membership = Membership.from_rows(found, NOW, MAX_AGE)
    roster = Roster.of(found, membership)
    again = Roster.decode(roster.encode())
    assert again == roster and again.digest() == roster.digest()
    assert Roster.of(reversed(found), membership).digest() == roster.digest()  # the rows' order does not matter
    for row in found:
        if row.id in membership.live:  # what the assignment reads of a live client changes the digest
            for change in ({"cache_version": row.cache_version + 1}, {"leaving": not row.leaving},
                           {"instance": row.instance + "x"}, {"streams": (*row.streams, "new")}):  # fmt: skip
                changed = [attrs.evolve(r, **change) if r is row else r for r in found]
                assert Roster.of(changed, membership).digest() != roster.digest(), change
            # a heartbeat (a newer time) does not: the roster is published again only when it changes
            beat = [attrs.evolve(r, last_update=NOW) if r is row else r for r in found]
            assert Roster.of(beat, Membership.from_rows(beat, NOW, MAX_AGE)).digest() == roster.digest()


@given(rows, st.data())
def test_the_roster_gives_a_follower_the_membership_a_scan_would(found: list[ClientRow], data: st.DataObject) -> None:
    scanned = Membership.from_rows(found, NOW, MAX_AGE)
    published = Roster.of(found, scanned)
    read = published.membership(MAX_AGE)
    assert read.live == scanned.live
    assert {c: read.instances[c] for c in read.live} == {c: scanned.instances[c] for c in scanned.live}
    assert [r.id for r in published.live] == sorted(scanned.live)
    # every decision on taking a shard is the same, for every owner and row a follower may meet
    owner = data.draw(st.sampled_from([r.id for r in found] + ["never-seen"]))
    written = NOW - data.draw(st.integers(0, 40_000))
    instance = data.draw(st.sampled_from([None, "other", *(r.instance for r in found)]))
    assert read.may_take(owner, written, NOW, instance) == scanned.may_take(owner, written, NOW, instance)


def test_the_leader_is_the_first_live_client_that_is_not_leaving() -> None:
    found = [ClientRow("a", "a", NOW, leaving=True, instance="1"), ClientRow("b", "b", NOW, instance="2"),
             ClientRow("c", "c", NOW, instance="3"), ClientRow("0", "0", NOW - 60_000, instance="4")]  # fmt: skip
    roster = Roster.of(found, Membership.from_rows(found, NOW, MAX_AGE))
    assert roster.leader() == "b"
    assert roster.lists("c", "3") and not roster.lists("c", "4") and not roster.lists("0", "4")  # "0" is dead
    assert roster.gone == (("0", NOW - 60_000),)


def leader_row(heartbeat_age: int = 0, made_age: int = 0, silent: int = 0, leaving: bool = False) -> ClientRow:
    headline = Headline("d1", NOW - made_age, silent)
    return ClientRow("a", "a", NOW - heartbeat_age, instance="1", leaving=leaving, headline=headline)


def test_a_follower_trusts_a_fresh_headline_of_a_leader_that_keeps_its_heartbeat() -> None:
    assert headline_to_trust(leader_row(heartbeat_age=1_900, made_age=4_000), NOW, PERIOD) == Headline(
        "d1", NOW - 4_000
    )


def test_a_follower_scans_when_the_leader_or_its_headline_cannot_be_trusted() -> None:
    assert headline_to_trust(None, NOW, PERIOD) is None  # the leader's row is gone
    assert headline_to_trust(attrs.evolve(leader_row(), headline=None), NOW, PERIOD) is None  # it does not publish
    assert headline_to_trust(leader_row(heartbeat_age=3_100), NOW, PERIOD) is None  # it missed a heartbeat
    assert headline_to_trust(leader_row(made_age=5_100), NOW, PERIOD) is None  # its rounds stalled
    assert headline_to_trust(leader_row(leaving=True), NOW, PERIOD) is None  # it hands its shards off
    assert headline_to_trust(leader_row(silent=NOW + 3_000), NOW, PERIOD) is None  # a client went silent


def test_a_client_one_heartbeat_late_is_silent_until_it_counts_as_dead() -> None:
    found = [ClientRow("me", "me", NOW - 10_000), ClientRow("a", "a", NOW - 2_900), ClientRow("b", "b", NOW - 3_100),
             ClientRow("c", "c", NOW - 5_000)]  # fmt: skip
    # "me" is never silent to itself; "a" is not late yet; "b" and "c" are: "c" counts as dead first
    assert silent_until(found, "me", NOW, PERIOD, MAX_AGE) == NOW - 5_000 + 8_000
    assert silent_until(found[:2], "me", NOW, PERIOD, MAX_AGE) == 0
