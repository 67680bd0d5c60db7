"""The simulator's side of its check against real clients (tests/sim/agreement.py): the calls counted by client and
operation, the latency of a call, and the join scenario's figures (the server tier compares them with moto's)."""

from __future__ import annotations

import attrs

from kinsumer.config import Config
from tests.sim.agreement import OperationCounts, simulate_join, with_latency
from tests.sim.cluster import Cluster

CONFIG = Config(shard_check_frequency=0.5, leader_action_frequency=5.0, client_record_max_age=10.0)


def _refreshes(latency: float | None, seconds: float) -> int:
    """The shard cache refreshes (a listing of the shards each) of a client alone, the leader, over ``seconds``."""
    with Cluster(4, CONFIG) as cluster:
        if latency is not None:
            with_latency(cluster, latency)
        cluster.join("leader")
        cluster.run(CONFIG.shard_check_frequency)
        before = cluster.kinesis.calls["ListShards"]
        cluster.run(seconds)
        return cluster.kinesis.calls["ListShards"] - before


def test_the_leaders_refresh_stays_every_leader_action_frequency_however_long_its_calls_take() -> None:
    """Found by the check against moto: the next refresh was due ``leader_action_frequency`` after the clock read
    once the refresh's calls were done, so on a real server (where they take time) it slipped to the round after,
    every time (every 12 s with the defaults, not 10). It is now done by the round nearest its time."""
    every = CONFIG.leader_action_frequency
    seconds = 11 * every
    assert _refreshes(None, seconds) == seconds / every  # virtual time: calls take none
    assert _refreshes(0.005, seconds) == seconds / every  # moto's server on 127.0.0.1, about
    assert _refreshes(0.02, seconds) == seconds / every  # a slower DynamoDB (a round of calls well within a round)


def test_each_call_is_counted_once_for_the_client_whose_round_or_heartbeat_made_it() -> None:
    with Cluster(6, CONFIG) as cluster:
        counts = OperationCounts(cluster)
        for client in ("a", "b", "c"):
            cluster.join(client)
        cluster.run(20)
        assert {c: sum(counts.of(c).values()) for c in "abc"} == cluster.calls_by_client
        assert counts.of("a")["Scan"] > 0 and counts.of("b")["Scan"] < counts.of("a")["Scan"]  # the leader scans


def test_the_join_takes_the_same_rounds_whatever_the_phase_and_the_window_holds_every_round() -> None:
    window = 22 * CONFIG.shard_check_frequency
    figures = simulate_join(8, CONFIG, "a", "b", window=window, settle=1.0, phases=(0.0, 0.3, 0.6, 0.9))
    assert len(set(figures.join_rounds.values())) == 1 and None not in figures.join_rounds.values()
    rounds = int(window / CONFIG.shard_check_frequency)
    assert figures.window.calls["a"]["Scan"] >= rounds  # the leader's membership scan, every round
    assert figures.window.calls["b"]["PutItem"] == rounds  # the follower's heartbeat
    # balanced: the leader publishes B's share a round after B's first, and B reads it in its next
    balanced = simulate_join(8, attrs.evolve(CONFIG, assignment="balanced"), "a", "b", window=window, settle=1.0,
                             phases=(0.0, 0.5))  # fmt: skip
    assert set(balanced.join_rounds.values()) == {next(iter(figures.join_rounds.values())) + 1}
