"""process(ordering="key") over HTTP on moto's server: a shard's keys side by side, each key in order."""

from __future__ import annotations

import json
import threading
import time
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable

import pytest

from demo.servers import LocalServer
from kinsumer import Failure, Kinsumer, Record
from kinsumer.coordination import checkpoints_table
from tests.helpers import wait_until
from tests.server.conftest import SERVER_CONFIG

pytestmark = pytest.mark.server

KEYS = 16
ALWAYS_FAILS = {41}
FAILS_TWICE = {70, 333}


def rid(record: Record) -> int:
    return int(json.loads(record.data)["id"])


def key_of(i: int) -> str:
    return f"key-{i % KEYS}"


def put(kinesis: object, stream: str, ids: range) -> None:
    for start in range(ids.start, ids.stop, 100):
        chunk = range(start, min(start + 100, ids.stop))
        records = [{"Data": json.dumps({"id": i}).encode(), "PartitionKey": key_of(i)} for i in chunk]
        kinesis.put_records(StreamName=stream, Records=records)  # type: ignore[attr-defined]


class Application:
    """What every client's handler saw: calls under way per shard and per key, and the order of what was done."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: Counter[int] = Counter()
        self.done: list[tuple[str, int, int]] = []  # (shard, id, sequence number), in the order they were done
        self.dead: list[Failure] = []
        self.busy_shard: Counter[str] = Counter()
        self.busy_key: Counter[str] = Counter()
        self.most_in_a_shard = 0
        self.key_overlap = False
        self.by_client: list[tuple[str, int]] = []  # (client, id) of every call
        self.joined = threading.Event()

    def handler(self, client: str) -> Callable[[Record], None]:
        return lambda record: self.handle(client, record)

    def handle(self, client: str, record: Record) -> None:
        """Slow until a second client joins (so that its shards are handed off with records in handlers)."""
        i = rid(record)
        with self.lock:
            self.by_client.append((client, i))
            self.calls[i] += 1
            attempt = self.calls[i]
            self.busy_shard[record.shard_id] += 1
            self.busy_key[record.partition_key] += 1
            self.most_in_a_shard = max(self.most_in_a_shard, self.busy_shard[record.shard_id])
            self.key_overlap |= self.busy_key[record.partition_key] > 1
        try:
            time.sleep(0.003 if self.joined.is_set() else 0.02)  # a handler waiting on I/O
            if i in ALWAYS_FAILS or (i in FAILS_TWICE and attempt <= 2):
                raise ValueError(f"record {i} cannot be handled")
            with self.lock:
                self.done.append((record.shard_id, i, int(record.sequence_number)))
        finally:
            with self.lock:
                self.busy_shard[record.shard_id] -= 1
                self.busy_key[record.partition_key] -= 1

    def sink(self, failure: Failure) -> None:
        with self.lock:
            self.dead.append(failure)

    def finished(self, ids: range) -> bool:
        with self.lock:
            return {i for _, i, _ in self.done} | {rid(f.record) for f in self.dead} >= set(ids)


def test_a_shards_keys_go_side_by_side_each_in_order_a_failing_record_holds_back_only_its_key_and_handoffs_stay_clean(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(2)
    kinesis = moto_server.client("kinesis")
    application = Application()
    errors: list[BaseException] = []
    clients: list[tuple[Kinsumer, threading.Thread]] = []

    def start(name: str) -> Kinsumer:
        k = Kinsumer(stream, app, name, SERVER_CONFIG, kinesis=moto_server.client("kinesis"),
                     dynamodb=moto_server.client("dynamodb"))  # fmt: skip

        def run() -> None:
            try:
                with k:
                    k.process(application.handler(name), max_attempts=3, dead_letter=application.sink, backoff=0.1,
                              max_backoff=0.1, concurrency=6, ordering="key")  # fmt: skip
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        clients.append((k, thread))
        return k

    captured = lambda k: sum(1 for shard in k.status().shards if shard.captured)  # noqa: E731
    first = start("client-a")
    wait_until(lambda: captured(first) == 2, 60, "client-a to take both shards")
    put(kinesis, stream, range(0, 2000))  # more than client-a handles before client-b has joined
    wait_until(lambda: len(application.done) >= 100, 60, "client-a to handle records")
    second = start("client-b")  # a clean rebalance while records of both shards are in handlers
    wait_until(lambda: captured(second) == 1, 60, "client-b to take a shard")
    application.joined.set()
    put(kinesis, stream, range(2000, 2400))
    ids = range(2400)
    wait_until(lambda: application.finished(ids), 120, "every record handled or dead-lettered")
    for k, thread in clients:
        k.stop()
        thread.join(30)
    assert not errors
    handled = Counter(i for _, i, _ in application.done)
    assert set(handled) == set(ids) - ALWAYS_FAILS and set(handled.values()) == {1}  # none twice: clean handoffs
    assert [(rid(f.record), f.attempts, f.reason) for f in application.dead] == [(41, 3, "raised")]
    before_the_join = {i for client, i in application.by_client if client == "client-b" and i < 2000}
    assert before_the_join, "client-b handled none of the records written before it joined"
    assert application.most_in_a_shard > 1, "records of one shard were never in handlers at once"
    assert not application.key_overlap, "two records of one key were in handlers at once"
    by_key: dict[int, list[int]] = defaultdict(list)
    for _, i, seq in application.done:
        by_key[i % KEYS].append(seq)
    assert all(seqs == sorted(seqs) for seqs in by_key.values()), "a key's records were handled out of order"
    # a record retried (its key's later records waited) did not hold back the other keys of its shard
    order = {i: n for n, (_, i, _) in enumerate(application.done)}
    shard_of = {i: shard for shard, i, _ in application.done}
    for slow in FAILS_TWICE:
        later_of_other_keys = [
            i for i in order if shard_of[i] == shard_of[slow] and i > slow and i % KEYS != slow % KEYS
        ]
        assert any(order[i] < order[slow] for i in later_of_other_keys), f"{slow} held back its whole shard"
    # every record done: each shard's checkpoint is its last record
    db = moto_server.client("dynamodb")
    for shard in {shard for shard, _, _ in application.done}:
        row = checkpoints_table.read_row(db, f"{app}_checkpoints", shard)
        last = max(seq for s, _, seq in application.done if s == shard)
        assert row is not None and row.sequence_number is not None and int(row.sequence_number) == last


def test_batches_by_key_hold_one_group_of_keys_each_run_side_by_side_and_keep_each_key_in_order(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(1)
    kinesis = moto_server.client("kinesis")
    put(kinesis, stream, range(300))
    lock = threading.Lock()
    done: list[tuple[int, int]] = []  # (id, sequence number), in the order they were done
    groups: list[set[int]] = []
    running, most = [0], [0]
    k = Kinsumer(stream, app, "batches", SERVER_CONFIG, kinesis=kinesis, dynamodb=moto_server.client("dynamodb"))

    def handler(batch: list[Record]) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            groups.append({zlib.crc32(r.partition_key.encode()) % 4 for r in batch})
        time.sleep(0.02)
        with lock:
            running[0] -= 1
            done.extend((rid(r), int(r.sequence_number)) for r in batch)
            if len(done) >= 300:
                threading.Thread(target=k.stop, daemon=True).start()

    with k:
        k.process_batches(handler, max_records=10, max_wait=0.05, concurrency=4, ordering="key")
    assert sorted(i for i, _ in done) == list(range(300))
    assert all(len(group) == 1 for group in groups), "a batch mixed groups of keys"
    assert most[0] > 1, "batches of the shard never ran side by side"
    by_key: dict[int, list[int]] = defaultdict(list)
    for i, seq in done:
        by_key[i % KEYS].append(seq)
    assert all(seqs == sorted(seqs) for seqs in by_key.values())


def test_a_clean_stop_handles_the_records_before_one_handed_out_so_the_next_run_repeats_none(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    """Records of a key wait while later records of other keys are done: at a stop, the checkpoint could
    only stop at the first waiting one, so those are handled before the shard is released."""
    stream = new_stream(1)
    kinesis = moto_server.client("kinesis")
    put(kinesis, stream, range(1000))
    lock = threading.Lock()
    handled: Counter[int] = Counter()
    runs = []
    for name in ("first", "second"):
        k = Kinsumer(stream, app, name, SERVER_CONFIG, kinesis=kinesis, dynamodb=moto_server.client("dynamodb"))
        target = 200 if name == "first" else 1000

        def handler(record: Record, k: Kinsumer = k, target: int = target) -> None:
            time.sleep(0.005 if rid(record) % KEYS else 0.1)  # one key slower: its records wait, others go on
            with lock:
                handled[rid(record)] += 1
                if len(handled) == target:
                    threading.Thread(target=k.stop, daemon=True).start()

        with k:
            k.process(handler, concurrency=6, ordering="key")
        with lock:
            runs.append(len(handled))
    assert runs[0] >= 200 and runs[1] == 1000
    assert set(handled) == set(range(1000)) and set(handled.values()) == {1}, "a record was handled twice"
