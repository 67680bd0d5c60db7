"""kinsumer's coordination (membership, roster, leadership, shard cache, assignment, heartbeats) for N clients
on virtual time, without threads (tests/sim/cluster.py): convergence after joins, leaves and crashes."""

from __future__ import annotations

import threading

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kinsumer.config import Config
from kinsumer.coordination import metadata_table
from tests.sim.cluster import Cluster
from tests.sim.figures import change, largest_item, scenario, steady

PERIOD = Config().shard_check_frequency
MAX_AGE = Config().effective_client_record_max_age
LEADER = Config().leader_action_frequency
PAUSE = 4.0


@pytest.mark.parametrize("assignment", ["modulo", "balanced"])
def test_three_clients_over_twelve_shards_converge_after_joins_a_clean_leave_and_a_crash(
    assignment: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the threads started from this test's thread (the simulation's): a count of live threads would also see
    # a thread an earlier test of this worker left ending meanwhile (CI saw 7 before, 6 after)
    started, here, start = [], threading.get_ident(), threading.Thread.start

    def recording_start(thread: threading.Thread) -> None:
        if threading.get_ident() == here:
            started.append(thread.name)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", recording_start)
    config = attrs.evolve(Config(), assignment=assignment)
    with Cluster(12, config, seed=3) as cluster:
        changes, _ = scenario(cluster, 3, seconds=30)
        # the coordination started no thread: only run()'s check of the three tables did, in a pool it joins at once
        assert {name.rsplit("_", 1)[0] for name in started} <= {"kinsumer-tables"}, started
        assert not [e for c in [*cluster.clients.values(), *cluster.gone.values()] for e in c.errors]
    rounds = {c.what: c.rounds for c in changes}
    assert all(r is not None for r in rounds.values()), changes
    assert rounds["start"] <= 2  # the first rounds, then one each to see the others
    assert rounds["join"] <= 3  # the leader's scan, its roster in its heartbeat, the followers' next round
    assert rounds["clean leave"] <= 3
    assert rounds["crash"] <= MAX_AGE / PERIOD + 2  # its heartbeat ages, then a round (the recheck: at once)
    assert rounds["leader crash"] <= MAX_AGE / PERIOD + 2
    by_what = {c.what: c for c in changes}
    if assignment == "balanced":  # only what balance requires moves
        assert by_what["join"].moved == 3 and by_what["clean leave"].moved == 3
        assert by_what["crash"].moved == 4 and by_what["leader crash"].moved == 6


def test_modulo_makes_two_live_clients_want_a_shard_during_a_join() -> None:
    with Cluster(12, seed=3) as cluster:
        for _ in range(3):
            cluster.join()
        assert cluster.run(10, cluster.converged)
        joined = change(cluster, "join", lambda: cluster.join().id)
    # the newcomer takes its share at once while the others still read with three: the lease excludes them
    assert joined.seconds is not None and joined.ever_doubled > 0 and joined.moved >= 6


def test_steady_state_costs_and_the_largest_item() -> None:
    with Cluster(12, seed=5) as cluster:
        for _ in range(3):
            cluster.join()
        assert cluster.run(10, cluster.settled)  # every lease taken
        figures = steady(cluster, 60)
        size, table, key = largest_item(cluster)
    assert 30 <= figures.calls_per_client_minute <= 100  # SPEC §10: idle DynamoDB at most 100 calls/min/client
    tables = {t.table: t for t in figures.tables}
    assert tables["sim_clients"].write_units == pytest.approx(3 / PERIOD, rel=0.1)  # one heartbeat a round each
    assert figures.list_shards == pytest.approx(1 / Config().leader_action_frequency, rel=0.2)  # the leader lists
    assert figures.get_records == pytest.approx(12 / Config().idle_poll_interval, rel=0.1)  # each idle shard
    assert tables["sim_checkpoints"].write_units == 0  # an idle shard's lease lives on the heartbeat: no commit
    assert (table, key) == ("sim_metadata", "ShardCache") and size < 2_000


def test_thousands_of_shards_are_listed_in_pages_and_shared() -> None:
    with Cluster(2500, seed=1, validate=False) as cluster:
        cluster.join()
        cluster.join()
        assert cluster.run(10, cluster.converged)
        assert cluster.kinesis.calls["ListShards"] == 3  # one listing: pages of 1,000
        assert sorted(len(cluster.clients[c].wanted) for c in cluster.live()) == [1250, 1250]


Op = tuple[str, int, float]
ops = st.lists(
    st.tuples(
        st.sampled_from(["join", "leave", "crash", "split", "pause"]), st.integers(0, 10), st.floats(0, 2 * PERIOD)
    ),
    max_size=8,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    clients=st.integers(1, 4),
    shards=st.integers(1, 9),
    assignment=st.sampled_from(["modulo", "balanced"]),
    staleness=st.sampled_from([0.0, 1.0]),
    skew=st.sampled_from([0.0, 1.0]),
    changes=ops,
    seed=st.integers(0, 2**16),
)
def test_any_interleaving_of_joins_leaves_crashes_and_splits_converges_never_with_two_holders_of_a_lease(
    clients: int, shards: int, assignment: str, staleness: float, skew: float, changes: list[Op], seed: int
) -> None:
    config = attrs.evolve(Config(), assignment=assignment)
    with Cluster(shards, config, seed=seed, staleness=staleness, validate=False, skew=skew) as cluster:
        for _ in range(clients):
            cluster.join()
        for kind, which, wait in changes:
            live = cluster.live()
            if kind == "join":
                cluster.join()
            elif kind == "split":
                cluster.split(cluster.shards[which % len(cluster.shards)])
            elif kind == "pause" and live:  # up to 12 s: past the max age (its shards are taken) or short of it
                cluster.pause(live[which % len(live)], PAUSE * (which % 4))
            elif len(live) > 1:  # one client stays
                client = live[which % len(live)]
                cluster.leave(client) if kind == "leave" else cluster.crash(client)
            cluster.run(wait)
        # a crash takes its heartbeat's age, then a round; the roster up to two rounds more; a split, once its
        # parent is assigned, up to three: the owner reads it to its end and finishes it, the leader publishes
        # the children, the others read the new cache at their next round
        split = any(kind == "split" for kind, _, _ in changes)
        limit = MAX_AGE + (7 if split else 4) * PERIOD + 3 * PAUSE  # a pause may still run at the last change
        assert cluster.run(limit, cluster.converged), (cluster.live(), cluster.owners())
        # then each lease comes to the client that wants it: a crashed owner's row ages first; a split parent's
        # owner reads it to its end, finishes it, and its children are taken
        assert cluster.run(MAX_AGE + 4 * PERIOD + LEADER, cluster.settled), cluster.ownership.held
        assert not cluster.ownership.doubled  # no shard's lease was ever held by two clients at once
        live = cluster.live()
        assert cluster.leader_ok()  # the first live client leads, no other does
        lease = cluster.db.get_item(TableName=cluster.tables.metadata, Key={"Key": {"S": metadata_table.LEADER_KEY}},
                                     ConsistentRead=True)
        assert lease["Item"]["ID"]["S"] == live[0]
        assert not [e for c in [*cluster.clients.values(), *cluster.gone.values()] for e in c.errors]
