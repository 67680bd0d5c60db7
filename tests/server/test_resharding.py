"""Splits and merges on kinesalite (moto keeps writing to closed parents, so it cannot show this)."""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from typing import Any

import pytest

from kinsumer import Kinsumer
from kinsumer.local_server import LocalServer
from tests.conftest import unique
from tests.helpers import Audit, Producer, wait_until
from tests.server.conftest import SERVER_CONFIG

pytestmark = pytest.mark.server


def open_shards(kinesis: Any, stream: str) -> list[dict[str, Any]]:
    shards = kinesis.list_shards(StreamName=stream)["Shards"]
    open_ = [s for s in shards if "EndingSequenceNumber" not in s["SequenceNumberRange"]]
    return sorted(open_, key=lambda s: int(s["HashKeyRange"]["StartingHashKey"]))


def wait_active(kinesis: Any, stream: str) -> None:
    wait_until(
        lambda: (
            kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamStatus"] == "ACTIVE"
        ),
        30,
        "the stream to be ACTIVE",
    )


def test_split_then_merge_keeps_per_key_order_and_reads_children_after_parents(
    kinesalite: LocalServer, moto_server: LocalServer
) -> None:
    kinesis = kinesalite.client("kinesis")
    stream, app = unique("stream"), unique("app")
    kinesis.create_stream(StreamName=stream, ShardCount=2)
    wait_active(kinesis, stream)
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

    threads = [threading.Thread(target=consume, args=(k, n), daemon=True) for k, n in zip(clients, "ab", strict=True)]
    for k in clients:
        k.run()
    for t in threads:
        t.start()

    producer.write_batch(480)
    wait_until(lambda: audit.count() >= len(producer.produced) // 2, 60, "reading before the split")
    first = open_shards(kinesis, stream)[0]
    middle = (int(first["HashKeyRange"]["StartingHashKey"]) + int(first["HashKeyRange"]["EndingHashKey"])) // 2
    kinesis.split_shard(StreamName=stream, ShardToSplit=first["ShardId"], NewStartingHashKey=str(middle))
    wait_active(kinesis, stream)
    producer.write_batch(480)
    left, right = open_shards(kinesis, stream)[1:3]  # the right child of the split and the other original
    kinesis.merge_shards(StreamName=stream, ShardToMerge=left["ShardId"], AdjacentShardToMerge=right["ShardId"])
    wait_active(kinesis, stream)
    producer.write_batch(480)

    wait_until(lambda: audit.count() >= len(producer.produced), 90, "every record delivered")
    for k in clients:
        k.stop()
    for t in threads:
        t.join(10)

    assert not audit.lost(producer.produced)
    assert not audit.duplicates()
    assert not audit.order_violations()
    # per partition key, counters arrive in increasing order across parent -> child
    by_key: dict[str, list[int]] = defaultdict(list)
    for d in sorted(audit.deliveries, key=lambda d: d.order):
        key, counter = keys_seen[d.record_id]
        by_key[key].append(counter)
    for key, counters in by_key.items():
        assert counters == sorted(counters), key
    # every child is first read after its parents' last record was delivered
    shards = {s["ShardId"]: s for s in kinesis.list_shards(StreamName=stream)["Shards"]}
    first_at = {
        sid: min(d.order for d in audit.deliveries if d.shard_id == sid)
        for sid in shards
        if any(d.shard_id == sid for d in audit.deliveries)
    }
    last_at = {sid: max(d.order for d in audit.deliveries if d.shard_id == sid) for sid in first_at}
    checked = 0
    for sid, shard in shards.items():
        for parent in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId")):
            if parent and sid in first_at and parent in last_at:
                assert first_at[sid] > last_at[parent], (parent, sid)
                checked += 1
    assert checked == 4  # split: 2 children of one parent; merge: 1 child of 2 parents
    rows = {i["Shard"]["S"]: i for i in moto_server.client("dynamodb").scan(TableName=f"{app}_checkpoints")["Items"]}
    closed = [sid for sid, s in shards.items() if "EndingSequenceNumber" in s["SequenceNumberRange"]]
    assert len(closed) == 3 and all("Finished" in rows[sid] for sid in closed)
