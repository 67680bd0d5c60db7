"""Shared test tools: producing uniquely numbered records, auditing deliveries, waiting."""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from kinsumer import Record, StatReceiver
from kinsumer.delivery import delivery as delivery_module
from kinsumer.delivery.delivery import HandoffResult
from kinsumer.delivery.progress import ShardProgress
from kinsumer.reading.polling import PollingReader
from kinsumer.reading.position import StartPosition

MAX_HASH = 2**128 - 1


def wait_until(condition: Callable[[], bool], timeout: float, what: str, poll: float = 0.05) -> None:
    """Wait for ``condition`` with a deadline; fail the test naming ``what`` if it never holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(poll)


def hand_off(delivery: delivery_module.Delivery, progress: ShardProgress, timeout: float) -> HandoffResult:
    """A shard's handoff in the steps a shard worker takes (its queued records dropped, up to ``timeout`` s for
    the delivered ones to be acknowledged, then no acknowledgement counts), on the caller's thread."""
    dropped = delivery.start_hand_off(progress)
    progress.wait(progress.all_acknowledged, timeout)
    return delivery.end_hand_off(progress, dropped)


def shard_hash_keys(kinesis: Any, stream: str) -> dict[str, str]:
    """One explicit hash key inside each open shard's range, by shard ID."""
    keys = {}
    for shard in kinesis.list_shards(StreamName=stream)["Shards"]:
        if "EndingSequenceNumber" in shard["SequenceNumberRange"]:
            continue
        low = int(shard["HashKeyRange"]["StartingHashKey"])
        high = int(shard["HashKeyRange"]["EndingHashKey"])
        keys[shard["ShardId"]] = str((low + high) // 2)
    return keys


def payload(record_id: int, key: str) -> bytes:
    return json.dumps({"id": record_id, "key": key, "counter": 0}).encode()


def put_all(kinesis: Any, stream: str, entries: list[dict[str, Any]]) -> None:
    """PutRecords in batches of 500, retrying failed entries until all are in."""
    for start in range(0, len(entries), 500):
        batch = entries[start : start + 500]
        while batch:
            resp = kinesis.put_records(StreamName=stream, Records=batch)
            batch = [e for e, r in zip(batch, resp["Records"], strict=True) if "ErrorCode" in r]


def produce_per_shard(kinesis: Any, stream: str, per_shard: int, first_id: int = 0) -> list[int]:
    """Write ``per_shard`` records to each open shard (explicit hash keys); returns the ids."""
    keys = shard_hash_keys(kinesis, stream)
    ids = itertools.count(first_id)
    entries: list[dict[str, Any]] = []
    for _ in range(per_shard):
        for shard_id, hash_key in keys.items():
            rid = next(ids)
            entries.append({"Data": payload(rid, shard_id), "PartitionKey": shard_id, "ExplicitHashKey": hash_key})
    put_all(kinesis, stream, entries)
    return sorted(json.loads(e["Data"])["id"] for e in entries)


class Producer(threading.Thread):
    """Writes uniquely numbered records carrying a per-partition-key counter, in batches.

    Stops after ``total`` records, or when :meth:`stop` is called if ``total`` is None.
    ``pause`` seconds between batches sets the rate. Payload: {"id", "key", "counter"}.
    """

    def __init__(
        self,
        kinesis: Any,
        stream: str,
        total: int | None,
        batch: int = 500,
        pause: float = 0.0,
        keys: int = 50,
        first_id: int = 0,
    ) -> None:
        super().__init__(name="test-producer", daemon=True)
        self.kinesis, self.stream, self.total, self.batch, self.pause = kinesis, stream, total, batch, pause
        self.keys = [f"user-{i}" for i in range(keys)]
        self.counters: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()
        self._produced: list[int] = []
        self._stopping = threading.Event()
        self._first_id = first_id  # record ids count up from here
        self.error: BaseException | None = None

    @property
    def produced(self) -> list[int]:
        with self._lock:
            return list(self._produced)

    def count(self) -> int:
        return len(self._produced)

    def stop(self) -> list[int]:
        """Stop writing and return the ids written."""
        self._stopping.set()
        self.join(60)
        assert self.error is None, f"producer failed: {self.error!r}"
        return self.produced

    def write_batch(self, size: int) -> None:
        entries = []
        first = self._first_id + len(self._produced)
        for rid in range(first, first + size):
            key = self.keys[rid % len(self.keys)]
            body = {"id": rid, "key": key, "counter": self.counters[key]}
            self.counters[key] += 1
            entries.append({"Data": json.dumps(body).encode(), "PartitionKey": key})
        put_all(self.kinesis, self.stream, entries)
        with self._lock:
            self._produced.extend(range(first, first + size))

    def run(self) -> None:
        try:
            while not self._stopping.is_set():
                size = self.batch if self.total is None else min(self.batch, self.total - len(self._produced))
                if size <= 0:
                    return
                self.write_batch(size)
                if self.pause:
                    self._stopping.wait(self.pause)
        except BaseException as exc:  # reported by the test
            self.error = exc


@attrs.frozen
class Delivery:
    order: int  # global delivery order across every client of the test
    client: str
    record_id: int
    shard_id: str
    sequence_number: str


class Audit:
    """Thread-safe log of every delivery of a test, and the checks on it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._order = itertools.count()
        self.deliveries: list[Delivery] = []

    def add(self, client: str, record: Record) -> Delivery:
        rid = json.loads(record.data)["id"]
        with self._lock:
            d = Delivery(next(self._order), client, rid, record.shard_id, record.sequence_number)
            self.deliveries.append(d)
        return d

    def count(self) -> int:
        return len(self.deliveries)

    def ids(self) -> set[int]:
        with self._lock:
            return {d.record_id for d in self.deliveries}

    def lost(self, produced: Iterable[int]) -> set[int]:
        return set(produced) - self.ids()

    def duplicates(self) -> dict[int, int]:
        counts: dict[int, int] = defaultdict(int)
        with self._lock:
            for d in self.deliveries:
                counts[d.record_id] += 1
        return {rid: n for rid, n in counts.items() if n > 1}

    def order_violations(self) -> list[tuple[Delivery, Delivery]]:
        """First deliveries of each shard, in global order, must have increasing sequence numbers."""
        seen: set[int] = set()
        last: dict[str, Delivery] = {}
        bad = []
        with self._lock:
            deliveries = sorted(self.deliveries, key=lambda d: d.order)
        for d in deliveries:
            if d.record_id in seen:
                continue
            seen.add(d.record_id)
            prev = last.get(d.shard_id)
            if prev is not None and int(d.sequence_number) <= int(prev.sequence_number):
                bad.append((prev, d))
            last[d.shard_id] = d
        return bad


class DynamoDBCalls(StatReceiver):
    """Every DynamoDB call a client reports (``StatReceiver.dynamodb_call``): ``seen`` holds (operation, table,
    seconds, error) in order, and ``ended`` when each ended (monotonic)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, str, float, str | None]] = []
        self.ended: list[float] = []

    def dynamodb_call(self, operation: str, table: str, seconds: float, error: str | None) -> None:
        with self.lock:
            self.seen.append((operation, table, seconds, error))
            self.ended.append(time.monotonic())

    def count(self, operation: str, error: str | None = None) -> int:
        with self.lock:
            return sum(1 for op, _, _, e in self.seen if op == operation and e == error)

    def between(self, start: float, end: float) -> Counter[str]:
        """The calls that ended in [start, end), by operation and table (and error)."""
        with self.lock:
            return Counter(
                f"{op} {table}" + (f" {error}" if error else "")
                for at, (op, table, _, error) in zip(self.ended, self.seen, strict=True)
                if start <= at < end
            )


class CountingStats(StatReceiver):
    """A StatReceiver that counts every call, by method and key."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: dict[str, int] = defaultdict(int)
        self.retried: dict[tuple[str, str], int] = defaultdict(int)
        self.abandoned: list[tuple[str, str]] = []
        self.handoffs: list[tuple[str, float, bool]] = []
        self.expired_ages: list[float] = []
        self.hooks_failed: list[tuple[str, str, str]] = []

    def _count(self, name: str) -> None:
        with self._lock:
            self.calls[name] += 1

    def records_fetched(self, shard_id: str, count: int, millis_behind_latest: int | None) -> None:
        self._count("records_fetched")

    def record_delivered(self, shard_id: str, latency_seconds: float) -> None:
        self._count("record_delivered")

    def checkpoint_written(self, shard_id: str) -> None:
        self._count("checkpoint_written")

    def shard_gained(self, shard_id: str) -> None:
        self._count("shard_gained")

    def shard_lost(self, shard_id: str) -> None:
        self._count("shard_lost")

    def handoff(self, shard_id: str, seconds: float, clean: bool) -> None:
        with self._lock:
            self.handoffs.append((shard_id, seconds, clean))

    def error_retried(self, operation: str, error: str) -> None:
        with self._lock:
            self.retried[(operation, error)] += 1

    def error_abandoned(self, operation: str, error: str) -> None:
        with self._lock:
            self.abandoned.append((operation, error))

    def malformed_aggregates(self, shard_id: str, count: int) -> None:
        with self._lock:
            self.calls["malformed_aggregates"] += count

    def handler_failed(self, shard_id: str, error: str) -> None:
        self._count("handler_failed")

    def handler_retried(self, shard_id: str) -> None:
        self._count("handler_retried")

    def dead_lettered(self, shard_id: str, reason: str) -> None:
        self._count("dead_lettered")

    def handler_timed_out(self, shard_id: str, timeout: float) -> None:
        self._count("handler_timed_out")

    def hook_failed(self, shard_id: str, hook: str, error: str) -> None:
        with self._lock:
            self.calls["hook_failed"] += 1
            self.hooks_failed.append((shard_id, hook, error))

    def record_expired(self, shard_id: str, age_seconds: float) -> None:
        with self._lock:
            self.calls["record_expired"] += 1
            self.expired_ages.append(age_seconds)


class StreamAudits(Audit):
    """An Audit per stream (shard IDs repeat across streams), fed through one ``add``."""

    def __init__(self, streams: list[str]) -> None:
        super().__init__()
        self.of = {stream: Audit() for stream in streams}
        self.misnamed: list[Record] = []

    def add(self, client: str, record: Record) -> Delivery:
        audit = self.of.get(record.stream)
        if audit is None:
            self.misnamed.append(record)
            return super().add(client, record)
        super().add(client, record)
        return audit.add(client, record)

    def assert_clean(self, produced: dict[str, list[int]]) -> None:
        assert not self.misnamed, self.misnamed[:3]
        for stream, ids in produced.items():
            audit = self.of[stream]
            assert not audit.lost(ids), f"{stream}: lost {len(audit.lost(ids))}"
            assert not audit.duplicates(), f"{stream}: duplicated {sorted(audit.duplicates())[:10]}"
            assert not audit.order_violations(), f"{stream}: order broken {audit.order_violations()[:3]}"
            assert set(audit.ids()) == set(ids), f"{stream}: records of another stream"


def plain_python_env() -> dict[str, str]:
    """This process's environment without what a session fixture set for the processes Spark starts: the Spark
    fixture's PYTHONPATH loads a sitecustomize that imports botocore and kinsumer before a ``python -c`` test
    script's first line (which may mean to block an import). Run such scripts with ``cwd`` the repository."""
    return {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", "KINSUMER_TEST_CALL_LOG")}


def read_back(kinesis: Any, stream: str) -> dict[str, list[dict[str, Any]]]:
    """Every user record of every shard, in shard order (KPL aggregates unpacked)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for shard in kinesis.list_shards(StreamName=stream)["Shards"]:
        reader = PollingReader(kinesis, stream, shard["ShardId"], StartPosition.trim_horizon())
        records: list[dict[str, Any]] = []
        while (page := reader.next_page()).raw or not page.at_tip:
            records.extend(page.raw)
        out[shard["ShardId"]] = records
    return out
