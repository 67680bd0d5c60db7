"""The simulator's side of its check against reality (issue 40): the scenario ``tests/server/test_sim_agreement.py``
also runs with real clients on moto's server, and the figures both sides give.

The scenario: client ``first`` starts alone (it leads); after ``settle`` seconds, client ``second`` joins
``phase`` of a round after one of the first's rounds end; once converged and ``settle`` seconds later, a steady
window with both, from the end of one of the first's rounds. The figures (:class:`JoinFigures`): the join time
in *rounds of the joining client*: how many rounds it had made (its first, in ``run()``, included) when the
cluster converged, a count of discrete events that a slow machine cannot stretch as it stretches seconds; and
each client's DynamoDB calls a minute in the window (and by operation, to tell where two sides differ).

What the simulator lacks and this module adds: the time a call takes (:func:`with_latency`). On virtual time
every call takes none, and that was not neutral: the leader's next shard cache refresh was due
``leader_action_frequency`` after the clock read *after* the refresh's calls, so with a frequency that is a
whole number of rounds, a refresh that took any time at all missed the round it fell on and slipped to the
next one, in reality and not in the simulator. Found here; kinsumer now does the refresh (and a follower's
periodic cache read) by the round nearest its time, and the latency stays so that the two sides time their
calls alike.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import attrs

from kinsumer.config import Config
from tests.sim.cluster import Cluster

__all__ = ["LATENCY", "JoinFigures", "OperationCounts", "simulate_join", "with_latency"]

#: Seconds a DynamoDB call takes on the simulator's clock: what moto's server on 127.0.0.1 takes, about.
#: Any latency that is not zero and keeps a round well under a period gives the same figures here.
LATENCY = 0.005


def with_latency(cluster: Cluster, seconds: float = LATENCY) -> None:
    """Each DynamoDB call of ``cluster``'s clients takes ``seconds`` of its virtual time from now on: the
    caller reads the clock that much later (the call's effect is at its start)."""

    def took(**_: Any) -> None:
        cluster.clock.now += seconds

    cluster.db.meta.events.register("after-call.dynamodb", took)


class OperationCounts:
    """The DynamoDB calls of each client of ``cluster`` by operation, from now on (as ``calls_by_client``
    counts them: the cluster's own count, which runs first, says whose call it was)."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster
        self._seen = dict(cluster.calls_by_client)
        self.counts: Counter[tuple[str, str]] = Counter()
        cluster.db.meta.events.register("after-call.dynamodb", self._count)

    def _count(self, model: Any, **_: Any) -> None:
        now = self._cluster.calls_by_client
        for client, calls in now.items():
            if calls != self._seen.get(client, 0):
                self.counts[(client, model.name)] += 1
                self._seen[client] = calls

    def of(self, client: str) -> Counter[str]:
        """``client``'s calls by operation."""
        return Counter({op: n for (c, op), n in self.counts.items() if c == client})


@attrs.frozen
class Window:
    """The DynamoDB calls of each client over a steady window."""

    seconds: float
    calls: dict[str, Counter[str]]  # client -> operation -> calls

    def per_minute(self, client: str) -> float:
        return sum(self.calls[client].values()) / self.seconds * 60


@attrs.frozen
class JoinFigures:
    """What :func:`simulate_join` measures (and the server test measures on real clients)."""

    #: The rounds the join took (None: it did not converge), by the phase the second client joined at: the
    #: most rounds either client made until it wanted its final share, counting the joining client's from its
    #: first, and the first client's from its first round that began after the join.
    join_rounds: dict[float, int | None]
    window: Window  # both clients, steady, after the join


def next_round(cluster: Cluster, client: str) -> None:
    """Run until ``client``'s next round has ended."""
    rounds = cluster.clients[client].rounds
    period = cluster.config.shard_check_frequency
    if not cluster.run(2 * period, until=lambda: cluster.clients[client].rounds > rounds):
        raise AssertionError(f"{client} made no round in {2 * period:g} s")


def simulate_join(
    shards: int,
    config: Config,
    first: str,
    second: str,
    *,
    window: float,
    settle: float,
    phases: tuple[float, ...],
    latency: float = LATENCY,
    limit: float = 60.0,
) -> JoinFigures:
    """The scenario of this module's docstring on the simulator, once for each of ``phases`` (in [0, 1): where
    in the first client's round period the second joins; 0: as that round ends); the window is measured in
    the run of the first phase."""
    runs = [
        _join(shards, config, (first, second), window if i == 0 else None, settle, phase, latency, limit)
        for i, phase in enumerate(phases)
    ]
    measured = runs[0][1]
    assert measured is not None
    return JoinFigures({phase: rounds for phase, (rounds, _) in zip(phases, runs, strict=True)}, measured)


def _join(
    shards: int,
    config: Config,
    clients: tuple[str, str],
    window: float | None,
    settle: float,
    phase: float,
    latency: float,
    limit: float,
) -> tuple[int | None, Window | None]:
    """One run of the scenario: the joining client's rounds when converged (None: not within ``limit``), and
    with ``window``, the window."""
    first, second = clients
    with Cluster(shards, config) as cluster:
        with_latency(cluster, latency)
        counts = OperationCounts(cluster)
        cluster.join(first)
        cluster.run(settle)
        next_round(cluster, first)
        cluster.run(phase * config.shard_check_frequency)
        already = cluster.clients[first].rounds
        cluster.join(second)
        seen: list[tuple[str, int, frozenset[str]]] = []  # (client, its rounds, what it wants) after each event

        def converged() -> bool:
            seen.extend((c, cluster.clients[c].rounds, cluster.clients[c].wanted) for c in clients)
            return cluster.converged()

        rounds = None
        if converged() or cluster.run(limit, converged):
            final = {c: cluster.clients[c].wanted for c in clients}
            needed = {c: next(n for client, n, wanted in seen if client == c and wanted == final[c]) for c in clients}
            rounds = max(needed[second], needed[first] - already)
        if window is None:
            return rounds, None
        cluster.run(settle)
        next_round(cluster, first)
        before = {client: counts.of(client) for client in clients}
        cluster.run(window)
        return rounds, Window(window, {client: counts.of(client) - before[client] for client in clients})
