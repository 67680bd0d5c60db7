"""What a simulated cluster measures: DynamoDB's load at steady state, and what a membership change takes.

- :func:`steady`: calls and units a second per table and for the hottest items, over a window of virtual time,
  with the Kinesis calls and each client's DynamoDB calls a minute;
- :func:`change`: after a join, a clean leave or a crash, the seconds (and rounds of ``shard_check_frequency``)
  until :meth:`Cluster.converged`, the shards whose owner changed, and on the way the most shards two live
  clients wanted at once (the assignment's overlap; the lease is what excludes them), and the most shards no
  live client wanted; then the seconds until :meth:`Cluster.settled` (every lease with the client that wants
  it), the shards whose lease two clients held at once (none, if the leases work) and the false "silent"
  verdicts (a running client found not live);
- :func:`largest_item`: the largest item of the tables, against DynamoDB's 400 KB; :func:`item_bytes`: one item's;
- :func:`throttled`: the calls each table throttled over the whole run.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import attrs

from kinsumer.coordination.metadata_table import SHARD_CACHE_KEY
from kinsumer.testing._dynamodb.values import item_size
from tests.sim.cluster import Cluster

__all__ = [
    "Change", "HotItem", "Steady", "TableRate", "change", "item_bytes", "largest_item", "scenario", "steady",
    "throttled",
]  # fmt: skip


@attrs.frozen
class Change:
    what: str
    client: str
    seconds: float | None  # None: not converged within the limit
    rounds: float | None
    moved: int
    most_doubled: int
    ever_doubled: int
    most_uncovered: int
    settled: float | None  # seconds until every lease is with the client that wants it (None: not within the limit)
    double_held: int  # shards whose lease two clients held at once (never, if the leases work)
    false_silent: int  # rounds in which a client found a running client silent (not live), summed over clients


@attrs.frozen
class TableRate:
    table: str
    calls: float  # a second
    read_units: float
    write_units: float


@attrs.frozen
class HotItem:
    table: str
    key: str
    calls: float  # a second, over the window
    read_units: float
    write_units: float
    peak_read: float  # the most in one second, over the whole run
    peak_write: float


@attrs.frozen
class Steady:
    seconds: float
    tables: list[TableRate]
    hottest: list[HotItem]
    calls_per_client_minute: float
    list_shards: float  # a second
    get_records: float  # a second (the idle shards' reads)
    peak_list_shards: int  # ListShards calls in the busiest second of the run
    cache: HotItem | None = None  # the home stream's shard cache item ("ShardCache"), hot or not


Counts = dict[tuple[str, Hashable], tuple[int, float, float]]


def _snapshot(cluster: Cluster) -> tuple[Counts, Counts, dict[str, int], int]:
    tables: Counts = {}
    items: Counts = {}
    for name, meter in cluster.db.meter.tables.items():
        tables[(name, "")] = (meter.total.calls, meter.total.read_units, meter.total.write_units)
        for key, usage in meter.items.items():
            items[(name, key)] = (usage.calls, usage.read_units, usage.write_units)
    return tables, items, dict(cluster.kinesis.calls), sum(cluster.calls_by_client.values())


def _rates(after: Counts, before: Counts, seconds: float) -> dict[tuple[str, Hashable], tuple[float, float, float]]:
    zero = (0, 0.0, 0.0)
    return {
        k: tuple((a - b) / seconds for a, b in zip(v, before.get(k, zero), strict=True))  # type: ignore[misc]
        for k, v in after.items()
    }


def steady(cluster: Cluster, seconds: float, hottest: int = 3) -> Steady:
    """Run ``seconds`` with no change and measure."""
    before = _snapshot(cluster)
    cluster.run(seconds)
    after = _snapshot(cluster)
    tables = [TableRate(name, *rate) for (name, _), rate in sorted(_rates(after[0], before[0], seconds).items())]
    items = _rates(after[1], before[1], seconds)
    hot = sorted(items.items(), key=lambda kv: -(kv[1][1] + kv[1][2]))[:hottest]
    hot_items = [_hot_item(cluster, name, key, rates) for (name, key), rates in hot]
    cache = next(
        (_hot_item(cluster, name, key, rates) for (name, key), rates in items.items()
         if name == cluster.tables.metadata and _key(key) == SHARD_CACHE_KEY),
        None,
    )  # fmt: skip
    clients = max(1, len(cluster.clients))
    per_minute = (after[3] - before[3]) / clients / seconds * 60
    list_shards, get_records = (
        (after[2].get(op, 0) - before[2].get(op, 0)) / seconds for op in ("ListShards", "GetRecords")
    )
    return Steady(
        seconds, tables, hot_items, per_minute, list_shards, get_records, cluster.kinesis.peak_list_rate(), cache
    )


def _hot_item(cluster: Cluster, table: str, key: Hashable, rates: tuple[float, float, float]) -> HotItem:
    peak_read, peak_write = cluster.db.meter.tables[table].peak(key)
    return HotItem(table, _key(key), *rates, peak_read, peak_write)


def throttled(cluster: Cluster) -> dict[str, int]:
    """The calls each table throttled (answered a throughput error) since the cluster began."""
    return {name: meter.total.throttled for name, meter in sorted(cluster.db.meter.tables.items())}


def _key(key: Hashable) -> str:
    if isinstance(key, tuple) and len(key) == 1:
        key = key[0]
    if isinstance(key, tuple) and len(key) == 2 and isinstance(key[1], str):
        return key[1]  # (type, value)
    return str(key)


def change(cluster: Cluster, what: str, operation: Callable[[], str], limit: float = 120.0) -> Change:
    """Do ``operation`` (it returns the client it joined, stopped or crashed) and run until converged."""
    before = cluster.owners()
    cluster.tracking.reset()
    doubled, silent = len(cluster.ownership.doubled), cluster.false_silent
    started = cluster.clock.now
    client = operation()
    done = cluster.run(limit, cluster.converged)
    seconds = cluster.clock.now - started if done else None
    settled = cluster.clock.now - started if done and cluster.run(limit, cluster.settled) else None
    after = cluster.owners()
    moved = sum(1 for shard in cluster.shards if before.get(shard) != after.get(shard))
    tracking = cluster.tracking
    period = cluster.config.shard_check_frequency
    return Change(
        what, client, seconds, None if seconds is None else seconds / period, moved, tracking.most_doubled,
        len(tracking.ever_doubled), tracking.most_uncovered, settled, len(cluster.ownership.doubled) - doubled,
        cluster.false_silent - silent,
    )  # fmt: skip


def largest_item(cluster: Cluster) -> tuple[int, str, str]:
    """(size in bytes, table, key) of the largest item stored now."""
    found = (0, "", "")
    for name, key in cluster.tables.with_keys():
        for item in cluster.db.items(name):
            size = item_size(item)
            if size > found[0]:
                found = (size, name, str(next(iter(item[key].values()))))
    return found


def item_bytes(cluster: Cluster, table: str, key: str) -> int | None:
    """The size of the item of ``table`` whose (string) key is ``key``, stored now; None if there is none."""
    name = dict(cluster.tables.with_keys())[table]
    found = (item for item in cluster.db.items(table) if item[name] == {"S": key})
    return next((item_size(item) for item in found), None)


def scenario(cluster: Cluster, clients: int, seconds: float, limit: float = 300.0) -> tuple[list[Change], Steady]:
    """``clients`` start at once; a steady window of ``seconds``; then a join, a clean leave of a follower, a
    crash of a follower and a crash of the leader, each run until converged."""

    def start() -> str:
        for _ in range(clients):
            cluster.join()
        return f"{clients} clients"

    def follower() -> str:
        live = cluster.live()
        return cluster.rng.choice(live[1:]) if len(live) > 1 else live[0]

    def leave() -> str:
        client = follower()
        cluster.leave(client)
        return client

    def crash(leader: bool) -> Callable[[], str]:
        def crash_one() -> str:
            client = cluster.live()[0] if leader else follower()
            cluster.crash(client)
            return client

        return crash_one

    changes = [change(cluster, "start", start, limit)]
    figures = steady(cluster, seconds)
    changes.append(change(cluster, "join", lambda: cluster.join().id, limit))
    changes.append(change(cluster, "clean leave", leave, limit))
    changes.append(change(cluster, "crash", crash(False), limit))
    changes.append(change(cluster, "leader crash", crash(True), limit))
    return changes, figures
