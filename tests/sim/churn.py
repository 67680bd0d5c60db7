"""Churn with records flowing: clients join, leave, crash and pause, and shards split, for a stretch of virtual
time, while records are put and handled (issue 52: the rebalance stall of issue 35 took a 20-minute soak to
find; an hour of churn here takes seconds).

:func:`churn` drives a :class:`~.cluster.Cluster` made with ``records=`` and returns :class:`Churn`: what
happened, the ledger's :class:`~kinsumer.testing.Report` (nothing lost, duplicates and their reasons, order per
shard and per key) and how long records waited, put to first handled, in virtual seconds.
"""

from __future__ import annotations

import collections
import math
import threading
from typing import Any

import attrs

from kinsumer.record import Record
from kinsumer.stats import StatReceiver
from kinsumer.testing import Report
from tests.sim.cluster import Cluster

__all__ = ["Churn", "Handoffs", "churn", "first_handled"]

#: The events of the churn and how often each is drawn.
_WEIGHTS = {"join": 4, "leave": 3, "crash": 3, "pause": 2, "split": 1}


class Handoffs(StatReceiver):
    """Counts the clients' handoffs, clean and timed out (the inner receiver of every client's stats)."""

    def __init__(self) -> None:
        self.clean = self.timed_out = 0
        self.longest = 0.0
        self._lock = threading.Lock()

    def handoff(self, shard_id: str, seconds: float, clean: bool) -> None:
        with self._lock:
            if clean:
                self.clean += 1
            else:
                self.timed_out += 1
            self.longest = max(self.longest, seconds)


def first_handled(cluster_clock: Any, into: dict[bytes, float]) -> Any:
    """A handler that notes, by record data (the flow numbers each record), the virtual time of its first
    handling (epoch seconds, as the stream's arrival times)."""

    def handle(record: Record) -> None:
        into.setdefault(record.data, cluster_clock.epoch + cluster_clock.now)

    return handle


@attrs.frozen
class Churn:
    """What a churn did and found."""

    seconds: float
    events: collections.Counter[str]
    put: int
    report: Report
    clean_handoffs: int
    timed_out_handoffs: int
    #: Put to first handled (virtual seconds): the median, the 99th percentile and the longest.
    wait_median: float
    wait_p99: float
    wait_longest: float
    wall_seconds: float = 0.0

    def __str__(self) -> str:
        events = ", ".join(f"{n} {kind}{'es' if kind == 'crash' else 's'}" for kind, n in sorted(self.events.items()))
        return (
            f"{self.seconds:g} virtual s of churn ({events}): {self.report}; handoffs {self.clean_handoffs} clean, "
            f"{self.timed_out_handoffs} timed out; put to first handled {self.wait_median:.2f} s median, "
            f"{self.wait_p99:.2f} s p99, {self.wait_longest:.2f} s longest"
        )


def churn(
    cluster: Cluster,
    seconds: float,
    *,
    handoffs: Handoffs,
    first: dict[bytes, float],
    rate: float = 20.0,
    clients: int = 4,
    gap: tuple[float, float] = (20.0, 90.0),
    most: int = 8,
    splits: int = 3,
    pause: tuple[float, float] = (5.0, 40.0),
) -> Churn:
    """``clients`` clients start and records flow at ``rate`` a second; for ``seconds`` an event every ``gap``
    seconds (drawn): a join, a clean leave, a crash, a pause (for ``pause`` seconds), or a split (``splits`` at
    most), never fewer than two clients nor more than ``most``; then the records stop, two clients join if
    fewer run, and everything put is handled. ``cluster`` was made with ``records=...`` and
    ``handler=first_handled(cluster.clock, first)``; its config's stats receiver is ``handoffs``."""
    rng = cluster.rng
    if not cluster.start(clients, limit=60.0):
        raise AssertionError("the clients did not settle at the start")
    cluster.produce(rate)
    events: collections.Counter[str] = collections.Counter()
    end = cluster.clock.now + seconds
    while cluster.clock.now < end:
        cluster.run(min(rng.uniform(*gap), end - cluster.clock.now))
        live = cluster.live()
        kinds = [k for k in _WEIGHTS if _possible(k, live, most, events["split"] < splits)]
        kind = rng.choices(kinds, weights=[_WEIGHTS[k] for k in kinds])[0]
        events[kind] += 1
        if kind == "join":
            cluster.join()
        elif kind == "leave":
            cluster.leave(rng.choice(live))
        elif kind == "crash":
            cluster.crash(rng.choice(live))
        elif kind == "pause":
            cluster.pause(rng.choice(live), rng.uniform(*pause))
        else:
            cluster.split(rng.choice(cluster.shards))
    cluster.stop_producing()
    while len(cluster.live()) < 2:
        cluster.join()
    if not cluster.run(600.0, cluster.drained):
        raise AssertionError(f"not every record was handled 600 s after the churn: {cluster.report()}")
    cluster.run(60.0, cluster.settled)
    waits = sorted(first[r.data] - r.arrival for r in cluster.flow.kinesis.records(cluster.stream))  # type: ignore[union-attr]
    return Churn(
        seconds, events, cluster.flow.put_count, cluster.report(), handoffs.clean, handoffs.timed_out,  # type: ignore[union-attr]
        waits[len(waits) // 2], waits[math.ceil(len(waits) * 0.99) - 1], waits[-1],
    )  # fmt: skip


def _possible(kind: str, live: list[str], most: int, may_split: bool) -> bool:
    if kind == "join":
        return len(live) < most
    if kind == "split":
        return may_split
    return len(live) > 2
