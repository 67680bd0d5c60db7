"""Splits and merges on kinesalite (moto keeps writing to closed parents, so it cannot show this)."""

from __future__ import annotations

import contextlib
import json
import string
import threading
from collections.abc import Callable, Iterator

import pytest

from demo.servers import LocalServer
from kinsumer import Kinsumer
from tests.conftest import unique
from tests.helpers import Audit, Producer, StreamAudits, wait_until
from tests.reshard import assert_reshard_delivery, merge_adjacent, new_stream, split_first
from tests.server.conftest import SERVER_CONFIG

pytestmark = pytest.mark.server


@contextlib.contextmanager
def consuming(clients: list[Kinsumer], consume: Callable[[Kinsumer, str], None]) -> Iterator[None]:
    """Each client runs, with a thread calling ``consume(client, name)`` (names a, b, ...); all stopped after."""
    names = string.ascii_lowercase[: len(clients)]
    threads = [threading.Thread(target=consume, args=(k, n), daemon=True) for k, n in zip(clients, names, strict=True)]
    for k in clients:
        k.run()
    for t in threads:
        t.start()
    try:
        yield
    finally:
        for k in clients:
            k.stop()
        for t in threads:
            t.join(10)


def test_split_then_merge_keeps_per_key_order_and_reads_children_after_parents(
    kinesalite: LocalServer, moto_server: LocalServer
) -> None:
    kinesis = kinesalite.client("kinesis")
    stream, app = new_stream(kinesis, 2), unique("app")
    producer = Producer(kinesis, stream, total=None, keys=24)
    audit = Audit()
    keys_seen: dict[int, tuple[str, int]] = {}
    lock = threading.Lock()

    def make(name: str) -> Kinsumer:
        return Kinsumer(
            stream,
            app,
            name,
            SERVER_CONFIG,
            kinesis=kinesalite.client("kinesis"),
            dynamodb=moto_server.client("dynamodb"),
        )

    clients = [make("a"), make("b")]
    clients[0].create_required_tables()

    def consume(k: Kinsumer, name: str) -> None:
        while (record := k.next_record()) is not None:
            body = json.loads(record.data)
            with lock:
                keys_seen[body["id"]] = (body["key"], body["counter"])
            audit.add(name, record)

    with consuming(clients, consume):
        producer.write_batch(480)
        wait_until(lambda: audit.count() >= len(producer.produced) // 2, 60, "reading before the split")
        split_first(kinesis, stream)
        producer.write_batch(480)
        merge_adjacent(kinesis, stream, 1)  # the right child of the split and the other original
        producer.write_batch(480)

        wait_until(lambda: audit.count() >= len(producer.produced), 90, "every record delivered")

    assert not audit.lost(producer.produced)
    assert not audit.duplicates()
    assert not audit.order_violations()
    shards = {s["ShardId"]: s for s in kinesis.list_shards(StreamName=stream)["Shards"]}
    checked = assert_reshard_delivery(audit, list(shards.values()), lambda rid: keys_seen[rid][0])
    assert checked == 4  # split: 2 children of one parent; merge: 1 child of 2 parents
    rows = {i["Shard"]["S"]: i for i in moto_server.client("dynamodb").scan(TableName=f"{app}_checkpoints")["Items"]}
    closed = [sid for sid, s in shards.items() if "EndingSequenceNumber" in s["SequenceNumberRange"]]
    assert len(closed) == 3 and all("Finished" in rows[sid] for sid in closed)


def test_a_split_in_the_second_stream_of_an_application_reads_children_after_their_parent(
    kinesalite: LocalServer, moto_server: LocalServer
) -> None:
    """Two streams, two clients listing both; the second stream (rows ``<stream>/<shard>``) splits."""
    kinesis = kinesalite.client("kinesis")
    home, second, app = new_stream(kinesis, 1), new_stream(kinesis, 2), unique("app")
    producers = {home: Producer(kinesis, home, total=None, keys=8), second: Producer(kinesis, second, total=None)}
    audits = StreamAudits([home, second])
    keys_seen: dict[tuple[str, int], str] = {}
    lock = threading.Lock()

    def make(name: str) -> Kinsumer:
        aws = {"kinesis": kinesalite.client("kinesis"), "dynamodb": moto_server.client("dynamodb")}
        return Kinsumer([home, second], app, name, SERVER_CONFIG, **aws)

    clients = [make("a"), make("b")]
    clients[0].create_required_tables()

    def consume(k: Kinsumer, name: str) -> None:
        while (record := k.next_record()) is not None:
            with lock:
                keys_seen[(record.stream, json.loads(record.data)["id"])] = json.loads(record.data)["key"]
            audits.add(name, record)

    with consuming(clients, consume):
        for producer in producers.values():
            producer.write_batch(240)
        wait_until(lambda: audits.of[second].count() >= 120, 60, "reading before the split")
        parent = split_first(kinesis, second)
        for producer in producers.values():
            producer.write_batch(240)
        produced = {stream: producer.produced for stream, producer in producers.items()}
        wait_until(lambda: audits.count() >= sum(map(len, produced.values())), 90, "every record of both streams")
    audits.assert_clean(produced)
    listing = kinesis.list_shards(StreamName=second)["Shards"]
    checked = assert_reshard_delivery(audits.of[second], listing, lambda rid: keys_seen[(second, rid)])
    assert checked == 2  # both children read after their parent
    rows = {i["Shard"]["S"]: i for i in moto_server.client("dynamodb").scan(TableName=f"{app}_checkpoints")["Items"]}
    assert "Finished" in rows[f"{second}/{parent}"]
    assert sorted(k for k in rows if "/" not in k) == ["shardId-000000000000"]  # the home stream's one shard
