"""The ledger: what a fleet's handlers did with the records put, checked against kinsumer's promises.

:meth:`Ledger.wrap` wraps a user's handler for one client; each call that returns is one handling, recorded
in the order they ended. :meth:`Ledger.report` holds it against the records put (the stream's records as
:class:`~kinsumer.testing.LocalKinesis` stores them, KPL aggregates as their user records) and says:

- which records were never handled (lost: kinsumer promises none, ever);
- which were handled more than once, and whether a crash allows it: a record handled again after the client
  that handled it before crashed is an allowed duplicate (at least once); any other (a clean handoff, a clean
  stop) is not;
- order: each record's first handling, per shard in the shard's order, and per partition key in the order the
  records were put (across splits and merges: children after their parents).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from ..reading.kpl import deaggregate
from ..record import Record
from ._stream import StoredRecord

__all__ = ["Duplicate", "Ledger", "Report", "RecordKey"]

#: A user record: its shard, its sequence number and its index in its KPL aggregate (0 for a plain record).
RecordKey = tuple[str, str, int]


@attrs.frozen
class Handling:
    key: RecordKey
    partition_key: str
    client: str


@attrs.frozen
class Duplicate:
    """A record handled more than once: by which clients, in order, and whether a crash allows it."""

    key: RecordKey
    clients: tuple[str, ...]
    #: Each handling after the first came after the client of the one before it crashed.
    allowed: bool


@attrs.frozen
class Report:
    """What the handlers did with the records put (see the module's description)."""

    put: int
    handled: int  # handlings, duplicates included
    lost: tuple[RecordKey, ...]
    duplicates: tuple[Duplicate, ...]
    #: Shards whose records were first handled out of their order.
    shards_out_of_order: tuple[str, ...]
    #: Partition keys whose records were first handled out of the order they were put.
    keys_out_of_order: tuple[str, ...]

    @property
    def unexplained_duplicates(self) -> tuple[Duplicate, ...]:
        """Duplicates no crash allows."""
        return tuple(d for d in self.duplicates if not d.allowed)

    @property
    def ok(self) -> bool:
        """Nothing lost, no duplicate but after a crash, order kept per shard and per key."""
        return not (self.lost or self.unexplained_duplicates or self.shards_out_of_order or self.keys_out_of_order)

    def __str__(self) -> str:
        allowed = len(self.duplicates) - len(self.unexplained_duplicates)
        return (
            f"{self.put} records put, {self.handled} handlings: {len(self.lost)} lost, {len(self.duplicates)} handled "
            f"more than once ({allowed} after a crash, {len(self.unexplained_duplicates)} without one), "
            f"{len(self.shards_out_of_order)} shards and {len(self.keys_out_of_order)} keys out of order"
        )


class Ledger:
    """Records each handling of a fleet's clients, and each crash (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._handlings: list[Handling] = []
        self._crashes: dict[str, int] = {}  # client -> how many handlings were recorded when it crashed
        self._distinct: set[RecordKey] = set()

    def wrap(self, client: str, handler: Callable[[Record], object]) -> Callable[[Record], object]:
        """``handler`` for ``client``, recording each call that returns (not one that raises: it will be retried).
        Once ``client`` crashed, the handler is no longer called: the process is gone."""

        def handle(record: Record) -> object:
            if self.crashed(client):
                return None
            result = handler(record)
            key = (record.shard_id, record.sequence_number, record.sub_sequence_number or 0)
            with self._lock:
                if client not in self._crashes:
                    self._handlings.append(Handling(key, record.partition_key, client))
                    self._distinct.add(key)
                    self._lock.notify_all()
            return result

        return handle

    def crash(self, client: str) -> None:
        """``client`` crashed: nothing it handles from now on counts."""
        with self._lock:
            self._crashes.setdefault(client, len(self._handlings))

    def crashed(self, client: str) -> bool:
        with self._lock:
            return client in self._crashes

    @property
    def distinct(self) -> int:
        """How many different records were handled."""
        with self._lock:
            return len(self._distinct)

    def wait_for(self, count: int, timeout: float) -> None:
        """Wait until ``count`` different records were handled; TimeoutError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self._distinct) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{len(self._distinct)} of {count} records handled after {timeout:g} s")
                self._lock.wait(left)

    def report(self, put: Iterable[StoredRecord]) -> Report:
        """The handlings against the records ``put`` (:meth:`LocalKinesis.records`)."""
        expected = _user_records(put)
        with self._lock:
            handlings, crashes = list(self._handlings), dict(self._crashes)
        seen: dict[RecordKey, list[int]] = {}
        for i, h in enumerate(handlings):
            seen.setdefault(h.key, []).append(i)
        order = {key: i for i, (key, _) in enumerate(expected)}
        duplicates = []
        for key, at in seen.items():
            if len(at) > 1:
                clients = tuple(handlings[i].client for i in at)
                allowed = all(crashes.get(handlings[a].client, len(handlings)) <= b for a, b in itertools.pairwise(at))
                duplicates.append(Duplicate(key, clients, allowed))
        firsts = sorted((at[0], key) for key, at in seen.items() if key in order)
        keys = {key: partition_key for key, partition_key in expected}
        return Report(
            put=len(expected),
            handled=len(handlings),
            lost=tuple(key for key, _ in expected if key not in seen),
            duplicates=tuple(duplicates),
            shards_out_of_order=_out_of_order([(key[0], order[key]) for _, key in firsts]),
            keys_out_of_order=_out_of_order([(keys[key], order[key]) for _, key in firsts]),
        )


def _user_records(put: Iterable[StoredRecord]) -> list[tuple[RecordKey, str]]:
    """Each user record put, (key, partition key), in the order they were put (by sequence number)."""
    found: list[tuple[RecordKey, str]] = []
    for record in sorted(put, key=lambda r: int(r.sequence_number)):
        users: Sequence[dict[str, Any]] = deaggregate([record.to_api()])[0]
        for user in users:
            key = (record.shard_id, record.sequence_number, user.get("SubSequenceNumber") or 0)
            found.append((key, user["PartitionKey"]))
    return found


def _out_of_order(groups: list[tuple[str, int]]) -> tuple[str, ...]:
    """The groups whose positions, taken in handling order, do not increase."""
    last: dict[str, int] = {}
    bad: set[str] = set()
    for group, position in groups:
        if position < last.get(group, -1):
            bad.add(group)
        last[group] = max(position, last.get(group, -1))
    return tuple(sorted(bad))
