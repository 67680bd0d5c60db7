#!/usr/bin/env python3
"""Simulate N kinsumer clients over S shards on virtual time (issue 40) and print what the coordination costs.

Kinsumer's own coordinator, heartbeat, leader, shard pool and workers (lease captures, handoffs, commits) run
for each client, against the in-memory DynamoDB and Kinesis of ``tests/sim`` (see ``tests/sim/cluster.py``),
on an idle stream. The scenario: the clients start at once; ``--seconds`` of steady state; then a join, a clean
leave of a follower, a crash of a follower and a crash of the leader, each run until converged.

    python scripts/simulate.py --clients 10 --shards 1000 --assignment balanced

With ``--churn SECONDS``, records flow instead (kinsumer's polling readers, delivery and ``process()`` or
``next()``) through that long of joins, leaves, crashes, pauses and splits (tests/sim/churn.py), and the testing
kit's ledger checks them: nothing lost, duplicates and their reasons, order per shard and per key.

    python scripts/simulate.py --churn 3600 --clients 4 --shards 4
"""

from __future__ import annotations

import argparse
import logging
import math
import pathlib
import sys
import time

import attrs

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from kinsumer.config import Config
from kinsumer.coordination.metadata_table import SHARD_CACHE_KEY
from tests.sim.churn import Handoffs, churn, first_handled
from tests.sim.cluster import Cluster
from tests.sim.figures import Change, Steady, item_bytes, largest_item, scenario, throttled


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--shards", type=int, default=1000)
    parser.add_argument("--assignment", choices=["modulo", "balanced"], default="modulo")
    parser.add_argument("--seconds", type=float, default=60.0, help="virtual seconds of steady state measured")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--staleness", type=float, default=0.0, help="how old an eventually consistent read may be")
    parser.add_argument("--skew", type=float, default=0.0, help="each client's wall clock off by up to this (s)")
    parser.add_argument("--validate", action="store_true", help="validate every call's parameters (slower)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds each call of a shard worker takes")
    parser.add_argument("--churn", type=float, metavar="SECONDS",
                        help="instead: records flowing through SECONDS of churn (joins, leaves, crashes, pauses, "
                             "splits) over --shards shards from --clients clients; the ledger's checks")  # fmt: skip
    parser.add_argument("--call", choices=["next", "process"], default="process",
                        help="with --churn: how clients take records")  # fmt: skip
    parser.add_argument("--rate", type=float, default=20.0, help="with --churn: records put a second")
    args = parser.parse_args(argv)
    if args.churn is not None:
        _churn(args)
        return
    config = attrs.evolve(Config(), assignment=args.assignment)
    started = time.perf_counter()
    with Cluster(args.shards, config, seed=args.seed, staleness=args.staleness, validate=args.validate,
                 skew=args.skew, latency=args.latency) as cluster:
        changes, figures = scenario(cluster, args.clients, args.seconds)
        size, table, key = largest_item(cluster)
        cache_size = item_bytes(cluster, cluster.tables.metadata, SHARD_CACHE_KEY) or 0
        slept = cluster.clock.slept
        throttles = throttled(cluster)
        errors = [(c.id, e) for c in [*cluster.clients.values(), *cluster.gone.values()] for e in c.errors]
    took = time.perf_counter() - started
    print(f"{args.clients} clients, {args.shards} shards, assignment={args.assignment}, default Config "
          f"(round {config.shard_check_frequency:g} s, leader {config.leader_action_frequency:g} s, "
          f"max age {config.effective_client_record_max_age:g} s); a shard worker's call takes "
          f"{args.latency * 1000:g} ms")  # fmt: skip
    _print_steady(figures)
    print(f"largest item: {size:,} bytes ({size / 1024:.1f} KB of 400 KB), {table} {key!r}")
    print(f"shard cache item: {cache_size:,} bytes ({math.ceil(cache_size / 4096)} read units a consistent read)")
    _print_changes(changes)
    print("throttled calls over the run: " + ", ".join(f"{table} {count}" for table, count in throttles.items()))
    if slept:
        print(f"backoffs (throttled calls) advanced the clock by {slept:.2f} s")
    for client, error in errors:
        print(f"client {client} failed: {error}")
    print(f"ran in {took:.1f} s of wall time ({cluster.clock.now:.0f} s simulated)")


def _churn(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.ERROR)  # not each paused client's "owned by another client now" warning
    handoffs, first = Handoffs(), dict[bytes, float]()
    config = attrs.evolve(Config(), assignment=args.assignment, stats=handoffs)
    started = time.perf_counter()
    cluster = Cluster(args.shards, config, seed=args.seed, staleness=args.staleness, validate=args.validate,
                      skew=args.skew, latency=args.latency, records=args.call, handle_time=0.001)  # fmt: skip
    cluster.handler = first_handled(cluster.clock, first)
    with cluster:
        result = churn(cluster, args.churn, handoffs=handoffs, first=first, rate=args.rate, clients=args.clients)
    print(result)
    print(f"ran in {time.perf_counter() - started:.1f} s of wall time ({cluster.clock.now:.0f} s simulated)")
    if not result.report.ok:
        sys.exit(1)


def _print_steady(figures: Steady) -> None:
    print(f"steady state over {figures.seconds:g} s:")
    for t in figures.tables:
        print(f"  {t.table:<18} {t.calls:8.2f} calls/s {t.read_units:8.2f} RCU/s {t.write_units:8.2f} WCU/s")
    for h in figures.hottest:
        print(f"  hot item {h.table} {h.key!r}: {h.calls:.2f} calls/s, {h.read_units:.2f} RCU/s, "
              f"{h.write_units:.2f} WCU/s (peak second of the run: {h.peak_read:g} RCU, "
              f"{h.peak_write:g} WCU)")  # fmt: skip
    if (c := figures.cache) is not None:
        print(f"  shard cache item {c.key!r}: {c.calls:.2f} calls/s, {c.read_units:.2f} RCU/s, {c.write_units:.2f} "
              f"WCU/s (peak second of the run: {c.peak_read:g} RCU, {c.peak_write:g} WCU)")  # fmt: skip
    print(f"  DynamoDB calls per client per minute: {figures.calls_per_client_minute:.1f}")
    print(f"  Kinesis: ListShards {figures.list_shards:.3f}/s (busiest second: {figures.peak_list_shards}), "
          f"GetRecords {figures.get_records:.1f}/s")  # fmt: skip


def _print_changes(changes: list[Change]) -> None:
    print("changes (converged = every shard wanted by one live client, as the assignment gives it):")
    for c in changes:
        took = "not converged" if c.seconds is None else f"{c.seconds:6.2f} s ({c.rounds:.1f} rounds)"
        print(f"  {c.what:<13} {c.client:<13} {took}; {c.moved} shards moved; wanted by two at once: "
              f"{c.most_doubled} at most ({c.ever_doubled} shards in all); "
              f"unwanted at most {c.most_uncovered}")  # fmt: skip
        held = "not settled" if c.settled is None else f"{c.settled:6.2f} s"
        print(f"  {'':<13} {'':<13} every lease with its client after {held}; "
              f"held by two clients at once: {c.double_held} shards; "
              f"false silent verdicts: {c.false_silent}")  # fmt: skip


if __name__ == "__main__":
    main()
