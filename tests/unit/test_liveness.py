"""This client's heartbeat chain, and when another client's shard may be taken. Pure."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kinsumer.coordination.clients_table import ClientRow
from kinsumer.coordination.liveness import Liveness
from kinsumer.coordination.membership import Membership


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_heartbeats_on_time_keep_one_epoch_and_a_late_one_starts_another() -> None:
    clock = Clock()
    liveness = Liveness(max_age=8.0, clock=clock)
    told: list[tuple[int, float]] = []
    liveness.subscribe(lambda epoch, until: told.append((epoch, until)))
    assert not liveness.fresh()
    liveness.heartbeat_done(clock.now)
    assert liveness.epoch == 1 and liveness.fresh() and liveness.fresh_until == 104.0
    for _ in range(3):  # every 2 s, each vouching for 4 s from when it started
        started = clock.now = clock.now + 2.0
        clock.now += 0.5  # the call took 0.5 s
        liveness.heartbeat_done(started)
    assert liveness.epoch == 1 and liveness.fresh_until == 107.0 + 4.0
    clock.now = 112.0  # paused: no heartbeat for a while
    assert not liveness.fresh()
    liveness.heartbeat_done(111.5)  # it landed after the last one stopped vouching
    assert liveness.epoch == 2 and liveness.fresh()
    assert [epoch for epoch, _ in told] == [1, 1, 1, 1, 2]


def test_a_heartbeat_that_started_in_time_but_landed_late_starts_another_epoch() -> None:
    clock = Clock()
    liveness = Liveness(max_age=8.0, clock=clock)
    liveness.heartbeat_done(clock.now)
    started = clock.now + 3.0
    clock.now += 4.5  # a slow call, retried: it landed after the last heartbeat stopped vouching
    liveness.heartbeat_done(started)
    assert liveness.epoch == 2


def membership(now_ms: int, rows: dict[str, int], max_age: float = 8.0) -> Membership:
    return Membership.from_rows([ClientRow(cid, cid, last) for cid, last in rows.items()], now_ms, max_age)


def test_a_live_owner_keeps_its_shards_however_old_their_rows() -> None:
    now = 1_000_000
    seen = membership(now, {"a": now - 1_000})
    assert seen.live == {"a"}
    assert not seen.may_take("a", row_last_update=0, now_ms=now)


def test_a_dead_owners_rows_are_taken_unless_it_wrote_them_after_its_last_seen_heartbeat() -> None:
    now = 1_000_000
    seen = membership(now, {"dead": now - 9_000})
    assert seen.may_take("dead", row_last_update=now - 9_000 + 4_000, now_ms=now)  # written while it was live
    assert not seen.may_take("dead", row_last_update=now - 500, now_ms=now)  # it came back and confirmed
    assert seen.may_take("dead", row_last_update=now - 16_000, now_ms=now)  # long untouched


def test_an_owner_without_a_client_row_left_and_its_rows_are_taken_once_they_are_old() -> None:
    now = 1_000_000
    seen = membership(now, {})
    assert not seen.may_take("gone", row_last_update=now - 2_000, now_ms=now)  # its releases may still come
    assert seen.may_take("gone", row_last_update=now - 8_000, now_ms=now)


@given(
    heartbeat_age=st.integers(min_value=0, max_value=60_000),
    written_after_heartbeat=st.integers(min_value=-60_000, max_value=60_000),
)
def test_a_row_its_owner_wrote_while_its_heartbeat_vouched_for_it_is_never_taken_from_a_live_owner(
    heartbeat_age: int, written_after_heartbeat: int
) -> None:
    now = 10_000_000
    heartbeat = now - heartbeat_age
    seen = membership(now, {"owner": heartbeat})
    taken = seen.may_take("owner", heartbeat + written_after_heartbeat, now)
    if heartbeat_age < 8_000:  # live
        assert not taken
    elif 0 <= written_after_heartbeat <= 4_000:  # dead, and the row is what it wrote while live
        assert taken


def test_a_live_owner_started_again_under_its_client_id_has_its_earlier_processs_rows_taken() -> None:
    """Its new process never releases a row it did not capture; others take it as a dead owner's."""
    from kinsumer.coordination.clients_table import ClientRow
    from kinsumer.coordination.membership import Membership

    now = 1_000_000
    members = Membership.from_rows([ClientRow("a", "a", now - 100, instance="second")], now, max_age=8.0)
    assert members.may_take("a", now - 50, now, row_instance="first")  # captured by a's earlier process
    assert not members.may_take("a", now - 50, now, row_instance="second")  # a's own: it releases it
    assert not members.may_take("a", now - 50, now)  # a row of a version before instances were recorded
