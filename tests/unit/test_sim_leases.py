"""The shard workers in the simulation (tests/sim: kinsumer's ShardPool, ShardWorker, lease and commit clock on
virtual time): captures, handoffs on a clean leave, takeovers after a crash, finished splits; never two holders."""

from __future__ import annotations

import attrs
import pytest

from kinsumer.config import Config
from kinsumer.coordination import checkpoints_table
from tests.sim.cluster import Cluster
from tests.sim.figures import change
from tests.sim.shard_loop import SimShardLoop

PERIOD = Config().shard_check_frequency
MAX_AGE = Config().effective_client_record_max_age


def _rows(cluster: Cluster) -> dict[str, checkpoints_table.CheckpointRow]:
    db, table = cluster.db, cluster.tables.checkpoints
    return {s: row for s in cluster.kinesis.shard_ids() if (row := checkpoints_table.read_row(db, table, s))}


@pytest.mark.parametrize("assignment", ["modulo", "balanced"])
def test_every_lease_goes_to_the_client_that_wants_it_and_the_rows_say_so(assignment: str) -> None:
    with Cluster(12, attrs.evolve(Config(), assignment=assignment), seed=2) as cluster:
        assert cluster.start(3)
        rows = _rows(cluster)
        held = cluster.ownership.held
        assert {s: r.owner_id for s, r in rows.items()} == {s: c for c in cluster.live() for s in held[c]}
        assert len(rows) == 12 and not cluster.ownership.doubled


def test_a_clean_leave_hands_its_shards_off_before_its_row_ages() -> None:
    with Cluster(12, seed=4) as cluster:
        assert cluster.start(3)
        follower = cluster.live()[-1]
        left = change(cluster, "clean leave", lambda: (cluster.leave(follower), follower)[1])
        assert follower in cluster.gone and left.settled is not None
        # released, then taken: sooner than a crashed owner's row could age
        assert left.settled < MAX_AGE and left.double_held == 0
        assert not [r for r in _rows(cluster).values() if r.owner_id == follower]


def test_a_crashed_clients_shards_are_taken_only_once_its_heartbeat_aged() -> None:
    with Cluster(12, seed=6) as cluster:
        assert cluster.start(3)
        victim = cluster.live()[-1]
        held = set(cluster.ownership.held[victim])
        crashed_at = cluster.clock.now
        last_beat = cluster.clients[victim].coordinator.heartbeat
        crash = change(cluster, "crash", lambda: (cluster.crash(victim), victim)[1])
        assert crash.settled is not None and crash.double_held == 0
        rows = _rows(cluster)
        assert held and all(rows[s].owner_id != victim for s in held)
        # nobody took them while the victim's last heartbeat was younger than the max age
        assert crash.settled >= MAX_AGE - PERIOD, (crash, crashed_at, last_beat)


def test_a_split_parent_is_finished_and_its_children_are_taken() -> None:
    with Cluster(4, seed=1) as cluster:
        assert cluster.start(2)
        parent = cluster.shards[1]
        children = cluster.split(parent)
        assert cluster.run(4 * Config().leader_action_frequency, cluster.settled), cluster.ownership.held
        rows = _rows(cluster)
        assert rows[parent].finished
        assert all(rows[c].owner_id in cluster.live() for c in children)
        assert not cluster.ownership.doubled


@pytest.mark.parametrize(("apart", "taken"), [(4.0, False), (8.0, True)])
def test_clocks_further_apart_than_the_max_age_make_a_live_owner_look_silent(apart: float, taken: bool) -> None:
    """What the leases rest on: the clients' clocks agree well within the max age (a heartbeat's LastUpdate is
    its writer's clock, read against the reader's). The check of two holders is not vacuous: clocks 8 s apart
    (max age 7 s) make one client find the other silent and take its shards while it runs."""
    with Cluster(8, seed=3) as cluster:
        first = cluster.join(offset=0.0).id
        assert cluster.run(10, cluster.settled)
        cluster.join(offset=apart)
        cluster.run(30)
        assert first in cluster.clients  # it never stopped
        assert bool(cluster.ownership.doubled) is taken
        assert (cluster.false_silent > 0) is taken


def _checkpoint_writes(cluster: Cluster, client_id: str) -> list[str]:
    """Start counting the writes ``client_id`` makes to the checkpoints table."""
    writes: list[str] = []

    def note(params: dict[str, object], **_: object) -> None:
        if cluster._current == client_id and params["TableName"] == cluster.tables.checkpoints:
            writes.append(str(params["Key"]))

    cluster.db.meta.events.register("provide-client-params.dynamodb.UpdateItem", note)
    return writes


def test_a_late_heartbeat_makes_no_idle_shard_write() -> None:
    """A pause past half the max age breaks the client's heartbeat chain, not its membership: each lease then
    waits for a write to confirm it, which an idle shard makes only once records come (it used to make one per
    owned shard at once: 1,024 writes at 1,024 shards, which slowed a loaded machine into the next late beat)."""
    with Cluster(16, seed=5) as cluster:
        assert cluster.start(2)
        paused = cluster.live()[1]
        held = cluster.ownership.held[paused]
        writes = _checkpoint_writes(cluster, paused)
        cluster.pause(paused, MAX_AGE * 0.7)  # past max_age / 2 (its chain), short of max_age (its membership)
        cluster.run(MAX_AGE + 3 * Config().commit_frequency)
        assert cluster.ownership.held[paused] == held and cluster.settled()
        assert writes == [] and not cluster.ownership.doubled
        workers = cluster.clients[paused].pool.every_worker()
        assert all(w.lease.needs_confirming() for w in workers)  # confirmed once records come


def test_a_paused_clients_shards_are_taken_only_once_its_lease_is_stale_and_it_lets_them_go_on_resuming() -> None:
    with Cluster(12, seed=9) as cluster:
        assert cluster.start(3)
        paused = cluster.live()[2]
        held = set(cluster.ownership.held[paused])
        cluster.pause(paused, MAX_AGE + 3 * PERIOD)  # its rows age: the others take its shards
        others = lambda: set().union(*(cluster.ownership.held.get(c, ()) for c in cluster.clients if c != paused))  # noqa: E731
        assert cluster.run(MAX_AGE + 3 * PERIOD, lambda: held <= others())  # taken while it is paused
        assert cluster.run(4 * PERIOD + MAX_AGE, cluster.settled), cluster.ownership.held
        assert not cluster.ownership.doubled  # taken only once its lease was stale: it delivered nothing meanwhile
        assert paused in cluster.clients  # it resumed, and runs on with its share again


def test_a_workers_call_takes_the_latency_and_the_others_go_on_meanwhile() -> None:
    now = [10.0]
    loop = SimShardLoop(lambda: now[0], latency=0.05)
    ran: list[tuple[str, float]] = []

    async def call(name: str) -> None:
        await loop.io(lambda: ran.append((name, now[0])))

    loop.spawn(call("a"))
    loop.spawn(call("b"))
    loop.run_due()
    assert ran == [] and loop.next_at() == pytest.approx(10.05)
    now[0] = loop.next_at() or 0.0
    loop.run_due()
    assert ran == [("a", now[0]), ("b", now[0])]  # both after one latency: side by side, not one after the other
    loop.stop(0.0)


@pytest.mark.parametrize("latency", [0.01, 0.05])
def test_with_a_call_latency_joins_leaves_and_crashes_settle_and_never_two_hold_a_lease(latency: float) -> None:
    with Cluster(24, attrs.evolve(Config(), assignment="balanced"), seed=7, latency=latency) as cluster:
        assert cluster.start(3)
        joined = change(cluster, "join", lambda: cluster.join().id)
        follower = cluster.live()[-1]
        left = change(cluster, "clean leave", lambda: (cluster.leave(follower), follower)[1])
        victim = cluster.live()[-1]
        crashed = change(cluster, "crash", lambda: (cluster.crash(victim), victim)[1])
        for c in (joined, left, crashed):
            assert c.settled is not None and c.double_held == 0 and c.moved > 0, c
        assert not cluster.ownership.doubled
        assert left.settled < MAX_AGE  # released and taken, not aged out
