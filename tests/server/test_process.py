"""process() over HTTP on moto's server: two clients sharing a stream, with failing and flaky records."""

from __future__ import annotations

import json
import threading
from collections import Counter, defaultdict
from collections.abc import Callable

import pytest

from demo.servers import LocalServer
from kinsumer import Failure, Kinsumer, Record, RecordFailed
from tests.helpers import wait_until
from tests.server.conftest import SERVER_CONFIG

pytestmark = pytest.mark.server

ALWAYS_FAILS = {13, 77, 140}  # a bad record: every call raises
FAILS_TWICE = {5, 60, 199}  # a record whose handler fails twice, then succeeds


def rid(record: Record) -> int:
    return int(json.loads(record.data)["id"])


class Application:
    """What the handlers and the sink of every client saw."""

    def __init__(self, always_fails: set[int] = ALWAYS_FAILS, fails_twice: set[int] = FAILS_TWICE) -> None:
        self.always_fails, self.fails_twice = always_fails, fails_twice
        self.lock = threading.Lock()
        self.calls: Counter[int] = Counter()
        self.handled: list[tuple[str, int, int]] = []  # (client, id, sequence number), as handled
        self.dead: list[Failure] = []
        self.busy: Counter[str] = Counter()  # handler calls under way per shard
        self.overlap = False

    def handler(self, client: str) -> Callable[[Record], None]:
        def handle(record: Record) -> None:
            i = rid(record)
            with self.lock:
                self.calls[i] += 1
                attempt = self.calls[i]
                self.busy[record.shard_id] += 1
                self.overlap |= self.busy[record.shard_id] > 1
            try:
                threading.Event().wait(0.001)  # long enough for the calls of a client to overlap
                if i in self.always_fails or (i in self.fails_twice and attempt <= 2):
                    raise ValueError(f"record {i} cannot be handled")
                with self.lock:
                    self.handled.append((client, i, int(record.sequence_number)))
            finally:
                with self.lock:
                    self.busy[record.shard_id] -= 1

        return handle

    def sink(self, failure: Failure) -> None:
        with self.lock:
            self.dead.append(failure)

    def finished(self, ids: list[int]) -> bool:
        with self.lock:
            return {i for _, i, _ in self.handled} | {rid(f.record) for f in self.dead} >= set(ids)


def test_two_clients_retry_dead_letter_once_each_and_handle_everything_else_once_in_shard_order(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(4)
    kinesis = moto_server.client("kinesis")
    ids = list(range(240))
    application = Application()
    errors: list[BaseException] = []
    clients = []
    for name in ("client-a", "client-b"):
        k = Kinsumer(stream, app, name, SERVER_CONFIG, kinesis=moto_server.client("kinesis"),
                     dynamodb=moto_server.client("dynamodb"))  # fmt: skip

        def run(k: Kinsumer = k, name: str = name) -> None:
            try:
                with k:
                    k.process(application.handler(name), max_attempts=3, dead_letter=application.sink,
                              backoff=0.01, max_backoff=0.05, concurrency=4)  # fmt: skip
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        clients.append((k, thread))
    # records come once the two clients share the shards: no shard changes hands while its records are handled
    captured = lambda k: sum(1 for shard in k.status().shards if shard.captured)  # noqa: E731
    wait_until(lambda: [captured(k) for k, _ in clients] == [2, 2], 60, "the clients to take two shards each")
    for start in range(0, len(ids), 80):
        kinesis.put_records(StreamName=stream, Records=[
            {"Data": json.dumps({"id": i}).encode(), "PartitionKey": f"key-{i % 24}"} for i in ids[start:start + 80]
        ])  # fmt: skip
    wait_until(lambda: application.finished(ids), 120, "every record handled or dead-lettered")
    for k, thread in clients:
        k.stop()
        thread.join(30)
    assert not errors
    assert sorted(rid(f.record) for f in application.dead) == sorted(ALWAYS_FAILS)  # each once, nothing else
    assert {(f.attempts, f.reason) for f in application.dead} == {(3, "raised")}
    assert all(f.error == f"ValueError: record {rid(f.record)} cannot be handled" for f in application.dead)
    handled = Counter(i for _, i, _ in application.handled)
    assert set(handled) == set(ids) - ALWAYS_FAILS and set(handled.values()) == {1}  # the flaky ones included
    assert all(application.calls[i] == 3 for i in FAILS_TWICE | ALWAYS_FAILS)
    assert not application.overlap  # never two records of one shard at once
    assert {client for client, _, _ in application.handled} == {"client-a", "client-b"}  # they shared the stream
    by_key: dict[int, list[int]] = defaultdict(list)  # a key's records are in one shard, in its order
    for _, i, seq in application.handled:
        by_key[i % 24].append(seq)
    assert all(seqs == sorted(seqs) for seqs in by_key.values())


def test_without_a_sink_the_record_fails_and_the_next_client_tries_it_again(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(1)
    kinesis = moto_server.client("kinesis")
    kinesis.put_records(StreamName=stream, Records=[
        {"Data": json.dumps({"id": i}).encode(), "PartitionKey": "k"} for i in range(10)
    ])  # fmt: skip
    application = Application(always_fails={4}, fails_twice=set())
    db = moto_server.client("dynamodb")
    first = Kinsumer(stream, app, "first", SERVER_CONFIG, kinesis=kinesis, dynamodb=db)
    with pytest.raises(RecordFailed) as info, first:
        first.process(application.handler("first"), max_attempts=2, backoff=0.01)
    assert rid(info.value.failure.record) == 4 and info.value.failure.attempts == 2
    assert [i for _, i, _ in application.handled] == [0, 1, 2, 3]  # nothing after it was handled
    application.always_fails = set()  # the next owner's handler copes with it
    second = Kinsumer(stream, app, "second", SERVER_CONFIG, kinesis=kinesis, dynamodb=db)
    stopper = threading.Thread(
        target=lambda: (wait_until(lambda: application.finished(list(range(10))), 60, "the rest"), second.stop()),
        daemon=True,
    )
    stopper.start()
    with second:
        second.process(application.handler("second"), max_attempts=2, backoff=0.01)
    stopper.join(60)
    assert [i for _, i, _ in application.handled] == list(range(10))  # 4 tried again, once, then the rest
    assert application.calls[4] == 3


@pytest.mark.parametrize("concurrency", [1, 2])
def test_status_and_kinsumer_status_show_how_long_the_oldest_handler_call_under_way_on_a_shard_has_run(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str, concurrency: int
) -> None:
    from kinsumer.status import read_status

    stream = new_stream(1)
    kinesis, db = moto_server.client("kinesis"), moto_server.client("dynamodb")
    kinesis.put_records(StreamName=stream, Records=[
        {"Data": json.dumps({"id": i}).encode(), "PartitionKey": "k"} for i in range(3)
    ])  # fmt: skip
    k = Kinsumer(stream, app, "w", SERVER_CONFIG, kinesis=kinesis, dynamodb=db)
    release, handled = threading.Event(), []
    seen: dict[str, float | None] = {}

    def handler(record: Record) -> None:
        if rid(record) == 1:
            assert release.wait(30)
        handled.append(rid(record))

    def stored() -> float | None:  # what kinsumer status shows, from the shard's row
        return read_status(kinesis, db, stream, app, max_age=10).shards[0].oldest_call_age

    def watch() -> None:
        def age() -> float | None:
            shards = k.status().shards
            return shards[0].oldest_call_age if shards else None

        try:
            wait_until(lambda: (age() or 0.0) >= 0.5, 30, "the call on record 1 to show as under way")
            seen["status"] = age()
            wait_until(lambda: stored() is not None, 30, "the long call stored in the shard's row")
            seen["row"] = stored()
            release.set()
            wait_until(lambda: len(handled) == 3 and stored() is None, 30, "the call's end stored")
        finally:
            release.set()
            k.stop()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    with k:
        k.process(handler, concurrency=concurrency)
    watcher.join(30)
    assert handled == [0, 1, 2]
    assert seen["status"] is not None and 0.5 <= seen["status"] < 30
    assert seen["row"] is not None and 2 * SERVER_CONFIG.commit_frequency <= seen["row"] + 0.1 < 30
