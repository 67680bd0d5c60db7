"""A fleet under churn: N clients of one application through joins, clean leaves and crashes, and a split, with
records flowing all along; the figures of the run. ``tests/kit/test_churn.py`` checks it (10 clients, 50 events),
``scripts/kit_churn.py`` prints it.

Records are put by a thread of their own at a steady pace, and each event waits for ``between`` more records to
be handled since the one before (a condition with a deadline, not a sleep), so records flow through every
event. The events are drawn from ``seed``: joins, leaves and crashes, the fleet kept within half and one and a
half times its size; the split comes halfway. The handler keeps counts per shard in memory and writes them out in
``on_revoked`` (the docs' worked example), so the run checks a handler's state too.
"""

from __future__ import annotations

import collections
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import attrs

from kinsumer import Record
from kinsumer.testing import Fleet, LocalAWS, PerClient, Report

__all__ = ["ChurnFigures", "ShardCounts", "churn"]


class ShardCounts:
    """Counts per key, kept per shard in memory, written out to ``store`` in on_revoked, dropped in on_lost."""

    def __init__(self, store: collections.Counter[str], lock: threading.Lock) -> None:
        self.store, self.lock = store, lock
        self.counts: dict[str, collections.Counter[str]] = {}

    def on_assigned(self, shard_id: str) -> None:
        self.counts[shard_id] = collections.Counter()

    def handle(self, record: Record) -> None:
        self.counts.setdefault(record.shard_id, collections.Counter())[record.partition_key] += 1

    def on_revoked(self, shard_id: str) -> None:
        with self.lock:
            self.store.update(self.counts.pop(shard_id, collections.Counter()))

    def on_lost(self, shard_id: str) -> None:
        self.counts.pop(shard_id, None)


@attrs.frozen
class ChurnFigures:
    """What a run did and measured."""

    clients: int
    shards: int
    events: dict[str, int]  # join, leave, crash, split
    running: int  # clients running when the events ended
    seconds: float  # wall time, from the first client's join to the report
    report: Report
    store: dict[str, int]  # what the handlers wrote out

    def lines(self) -> list[str]:
        r = self.report
        reasons = ", ".join(f"{n} {why}" for why, n in sorted(r.duplicates_by_reason.items())) or "none"
        ends = ", ".join(f"{n} {how}" for how, n in sorted(r.captures_by_end.items()))
        plural = {"join": "joins", "leave": "leaves", "crash": "crashes", "split": "split"}
        events = ", ".join(f"{self.events.get(kind, 0)} {word}" for kind, word in plural.items())
        return [
            f"{self.clients} clients, {self.shards} shards: {events}; {self.running} clients running at the end",
            f"{r.put:,} records put, {r.handled:,} handlings: {len(r.lost)} lost, {len(r.duplicates)} handled again "
            f"({reasons}), {len(r.stranded)} stranded",
            f"captures: {ends}; order kept per shard and key: {not (r.shards_out_of_order or r.keys_out_of_order)}, "
            f"hook violations: {len(r.hook_violations)}",
            f"handler's counts written out: {sum(self.store.values()):,} (on_revoked's due: "
            f"{sum(r.revoked_by_key.values()):,})",
            f"wall time: {self.seconds:.1f} s",
        ]


def churn(
    clients: int = 10, events: int = 50, shards: int = 8, seed: int = 53, rate: float = 1000.0, between: int = 100,
    **options: Any,
) -> ChurnFigures:  # fmt: skip
    """Run the scenario (see the module's description); ``rate``: records put a second; ``options`` go to the
    Fleet (``config=``, ``process()``'s options)."""
    draw = random.Random(seed)
    aws = LocalAWS()
    stream = aws.stream("churn", shards)
    store: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()
    done = threading.Event()
    counts = collections.Counter[str]()
    started = time.monotonic()
    with Fleet(aws, stream.name, "churn", PerClient(lambda client: ShardCounts(store, lock)), **options) as fleet:
        producer = threading.Thread(target=_produce, args=(stream.put, rate, done), name="churn-producer")
        fleet.start(clients)
        producer.start()
        try:
            for n in range(events):
                fleet.ledger.wait_for(fleet.ledger.distinct + between, timeout=30, check=fleet.check)
                if n == events // 2:
                    stream.split()
                    counts["split"] += 1
                kind = _event(draw, len(fleet.members), clients)
                counts[kind] += 1
                if kind == "join":
                    fleet.join()
                elif kind == "leave":
                    fleet.leave(draw.choice(fleet.members))
                else:
                    fleet.crash(draw.choice(fleet.members))
        finally:
            done.set()
            producer.join()
        running = len(fleet.members)
        fleet.wait_handled(timeout=60)
    report = fleet.report()
    return ChurnFigures(clients, shards, dict(counts), running, time.monotonic() - started, report, dict(store))


def _event(draw: random.Random, running: int, size: int) -> str:
    """A join, a leave or a crash, keeping the fleet within half and one and a half times ``size``."""
    if running <= size // 2:
        return "join"
    if running >= size + size // 2:
        return draw.choice(["leave", "crash"])
    return draw.choices(["join", "leave", "crash"], weights=[4, 3, 3])[0]


def _produce(put: Any, rate: float, done: threading.Event) -> None:
    """Put records at ``rate`` a second (in batches every 20 ms) until ``done``; keys cycle over 31."""
    numbers: Iterator[int] = iter(range(10**9))
    batch = max(1, round(rate / 50))
    while not done.wait(0.02):
        for _ in range(batch):
            n = next(numbers)
            put(str(n), f"key-{n % 31}")
