"""A caller slower than the stream: readers block on the full queue, yet keep their shards
(their client's heartbeat keeps them, whatever the age of their rows)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import attrs
import pytest

from demo.servers import LocalServer
from kinsumer import Kinsumer
from tests.helpers import Audit, produce_per_shard, wait_until
from tests.server.conftest import SERVER_CONFIG

pytestmark = pytest.mark.server


def test_readers_blocked_on_a_full_queue_keep_their_shards(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(2)
    produced = produce_per_shard(moto_server.client("kinesis"), stream, 300)
    config = attrs.evolve(SERVER_CONFIG, buffer_size=5, max_records_per_call=50)  # max age 2 s
    db = moto_server.client("dynamodb")
    slow = Kinsumer(stream, app, "slow", config, kinesis=moto_server.client("kinesis"), dynamodb=db)
    audit = Audit()
    owners: dict[str, list[str]] = {}  # shard -> its owners in turn
    done = threading.Event()

    def consume_slowly() -> None:  # 20 records a second: a 2 s client_record_max_age passes many times
        while not done.is_set() and (record := slow.next_record()) is not None:
            audit.add("slow", record)
            done.wait(0.05)

    slow.run()
    consumer = threading.Thread(target=consume_slowly, daemon=True)
    consumer.start()
    rival = Kinsumer(stream, app, "rival", config, kinesis=moto_server.client("kinesis"), dynamodb=db)

    def look() -> int:
        """Notes each shard's owner if it changed; returns how many shards have had one."""
        for row in db.scan(TableName=f"{app}_checkpoints", ConsistentRead=True)["Items"]:
            owner, seen = row.get("OwnerID", {}).get("S"), owners.setdefault(row["Shard"]["S"], [])
            if owner is not None and (not seen or seen[-1] != owner):
                seen.append(owner)
        return sum(1 for seen in owners.values() if seen)

    try:
        wait_until(lambda: audit.count() >= 20, 30, "slow deliveries")
        # the owners are seen before the rival starts: a handoff quicker than the first look is still seen
        wait_until(lambda: look() == 2, 30, "the slow client owning both shards")
        rival.run()  # the rival gets one shard by rebalancing, never by stealing a stale lease
        for _ in range(100):  # 5 s of blocked readers, sampled every 50 ms
            look()
            done.wait(0.05)
        wait_until(lambda: audit.count() >= 120, 60, "more slow deliveries")
    finally:
        done.set()
        consumer.join(10)
        slow.stop()
        rival.stop()
    # each shard stayed with the slow client, or went to the rival once by rebalancing: never taken back
    assert all(seen in ([slow.client_id], [slow.client_id, rival.client_id]) for seen in owners.values()), owners
    assert sum(1 for seen in owners.values() if seen[-1] == rival.client_id) == 1, owners
    assert not audit.duplicates()
    assert len(produced) == 600
