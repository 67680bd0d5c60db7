"""The kit catches a handler's bugs: state kept per shard but not written out in on_revoked (a rebalance loses
it), and a side effect that is not idempotent (a crash repeats it); the fixed handlers pass the same checks.

One scenario for all: a client reads alone, a second joins (a clean rebalance: a shard is handed over), then the
client handling a marked record dies in its handler, after the handler's effect and before it returns (as a
process killed there): the record is delivered again where its shard goes, so the repeat is certain, not a
matter of timing. The fleet then stops cleanly.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from kinsumer import Record
from kinsumer.testing import LocalStream, PerClient, Report
from kinsumer.testing.pytest_plugin import FleetFactory

MARK = b"dies here"


class Store:
    """Stands for a database: totals per key, and the records whose effect it holds (for the idempotent one)."""

    def __init__(self) -> None:
        self.totals: Counter[str] = Counter()
        self.seen: set[tuple[str, str, int]] = set()
        self._lock = threading.Lock()

    def add(self, counts: Counter[str]) -> None:
        with self._lock:
            self.totals.update(counts)

    def add_once(self, record: Record) -> None:
        with self._lock:
            key = (record.shard_id, record.sequence_number, record.sub_sequence_number or 0)
            if key not in self.seen:
                self.seen.add(key)
                self.totals[record.partition_key] += 1


class BufferedCounts:
    """Planted bug: counts per shard written out only when 1,000 are buffered, never in on_revoked."""

    def __init__(self, store: Store) -> None:
        self.store, self.counts = store, dict[str, Counter[str]]()

    def on_assigned(self, shard_id: str) -> None:
        self.counts[shard_id] = Counter()

    def handle(self, record: Record) -> None:
        counts = self.counts.setdefault(record.shard_id, Counter())
        counts[record.partition_key] += 1
        if counts.total() >= 1000:
            self.store.add(self.counts.pop(record.shard_id))

    def on_lost(self, shard_id: str) -> None:
        self.counts.pop(shard_id, None)


class FlushedCounts(BufferedCounts):
    """Fixed: the shard's counts are written out in on_revoked too."""

    def on_revoked(self, shard_id: str) -> None:
        self.store.add(self.counts.pop(shard_id, Counter()))


class CountEachCall:
    """Planted bug: the store's counter goes up at every handler call."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def handle(self, record: Record) -> None:
        self.store.add(Counter({record.partition_key: 1}))


class CountEachRecord(CountEachCall):
    """Fixed: the effect is keyed by the record (shard, sequence number), so doing it again changes nothing."""

    def handle(self, record: Record) -> None:
        self.store.add_once(record)


class DiesMidCall:
    """The user's handler object, in a process that dies in the handler of the marked record, the first time:
    after the handler's own work, before it returns. ``where`` is told the client's name and waits for the end."""

    def __init__(self, inner: Any, client: str, where: Callable[[str], None]) -> None:
        self.inner, self.client, self.where = inner, client, where
        for hook in ("on_assigned", "on_revoked", "on_lost"):
            if hasattr(inner, hook):
                setattr(self, hook, getattr(inner, hook))

    def handle(self, record: Record) -> None:
        self.inner.handle(record)
        if record.data == MARK:
            self.where(self.client)


def run(stream: LocalStream, fleet_of: FleetFactory, make: Callable[[Store], object]) -> tuple[Store, Report]:
    store = Store()
    reached, dead = threading.Event(), threading.Event()
    dying: list[str] = []

    def dies_here(client: str) -> None:
        if not reached.is_set():  # the first call only: the next owner's returns
            dying.append(client)
            reached.set()
            dead.wait(30)

    fleet = fleet_of(PerClient(lambda client: DiesMidCall(make(store), client, dies_here)))
    numbers = iter(range(10**6))

    def put(count: int) -> None:
        stream.put_all((str(n), f"user-{n % 13}") for n in (next(numbers) for _ in range(count)))

    fleet.start(1)
    put(100)
    fleet.wait_handled()
    fleet.join()  # a clean rebalance: the first client hands a shard over, on_revoked is called
    put(100)
    stream.put(MARK, "user-0")
    assert reached.wait(30), "the marked record never reached a handler"
    fleet.crash(dying[0])  # its process dies in the handler: the marked record goes again where its shard goes
    dead.set()
    put(100)
    fleet.wait_handled()
    fleet.close()
    return store, fleet.report()


@pytest.mark.parametrize(("make", "passes"), [(BufferedCounts, False), (FlushedCounts, True)])
def test_per_shard_state_not_written_out_in_on_revoked_fails_the_check_and_the_fixed_handler_passes(
    kinsumer_stream: LocalStream, kinsumer_fleet: FleetFactory, make: Callable[[Store], object], passes: bool
) -> None:
    store, report = run(kinsumer_stream, kinsumer_fleet, make)
    assert report.ok, str(report)  # kinsumer kept its promises either way: the handler is what differs
    assert sum(report.revoked_by_key.values()) > 0  # clean handoffs (the rebalance, the end) had records
    assert (store.totals == report.revoked_by_key) is passes, (store.totals, report.revoked_by_key)


@pytest.mark.parametrize(("make", "passes"), [(CountEachCall, False), (CountEachRecord, True)])
def test_a_side_effect_repeated_per_call_fails_the_check_and_the_idempotent_one_passes(
    kinsumer_stream: LocalStream, kinsumer_fleet: FleetFactory, make: Callable[[Store], object], passes: bool
) -> None:
    store, report = run(kinsumer_stream, kinsumer_fleet, make)
    assert report.ok, str(report)
    assert (store.totals == report.by_key()) is passes, (store.totals, report.by_key())
