"""A client paused past client_record_max_age cannot overwrite the new owner's checkpoint."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable

import pytest

from demo import servers
from demo.servers import LocalServer
from tests.helpers import Producer, wait_until
from tests.procs.harness import TUNED, ClientProcess, Deployment, ProcessAudit

pytestmark = pytest.mark.server


class CheckpointWatch(threading.Thread):
    """Reads the checkpoints table every 50 ms; records any checkpoint that moved backwards."""

    def __init__(self, deployment: Deployment) -> None:
        super().__init__(daemon=True)
        self.db = servers.client(deployment.dynamodb, "dynamodb")
        self.table = f"{deployment.app}_checkpoints"
        self.highest: dict[str, int] = {}
        self.owners: dict[str, str | None] = {}
        self.backwards: list[tuple[str, int, int]] = []
        self.reads = 0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.05):
            for row in self.db.scan(TableName=self.table, ConsistentRead=True)["Items"]:
                shard = row["Shard"]["S"]
                self.owners[shard] = row.get("OwnerID", {}).get("S")
                if "SequenceNumber" not in row:
                    continue
                seq = int(row["SequenceNumber"]["S"])
                if seq < self.highest.get(shard, 0):
                    self.backwards.append((shard, self.highest[shard], seq))
                self.highest[shard] = max(seq, self.highest.get(shard, 0))
            self.reads += 1

    def stop(self) -> None:
        self._done.set()
        self.join(10)


def test_a_paused_client_is_fenced_off_and_rejoins_cleanly(
    deploy: Callable[..., Deployment], moto_server: LocalServer, processes: list[ClientProcess]
) -> None:
    deployment = deploy(2)
    producer = Producer(moto_server.client("kinesis"), deployment.stream, total=None, batch=20, pause=0.05)
    producer.start()
    watch = CheckpointWatch(deployment)
    watch.start()
    # "a" sorts first: it owns shard 0, checkpointing by hand from a pool, some callbacks late
    paused = ClientProcess(deployment, "client-a", TUNED, manual=True, ack_delay=0.3).start()
    other = ClientProcess(deployment, "client-b", TUNED).start()
    processes.extend([paused, other])
    shard = "shardId-000000000000"
    wait_until(lambda: watch.owners.get(shard) == "client-a" and len(paused.deliveries()) >= 100, 30, "a reading")

    paused.signal(signal.SIGSTOP)
    paused_at = time.time()
    wait_until(lambda: watch.owners.get(shard) == "client-b", 30, "b to take shard 0 over")
    taken_at = watch.highest.get(shard, 0)
    wait_until(lambda: watch.highest.get(shard, 0) > taken_at, 30, "b to move shard 0's checkpoint on")
    paused.signal(signal.SIGCONT)
    resumed_at = time.time()

    # a learns it lost the shard (its late commits fail), then rejoins and gets it back cleanly
    wait_until(lambda: any(e.at > resumed_at for e in paused.events("lost")), 30, "a to notice the loss")
    wait_until(lambda: any(e.at > resumed_at for e in paused.events("gained")), 30, "a to rejoin")
    wait_until(
        lambda: any(d.at > resumed_at and d.shard_id == shard for d in paused.deliveries()), 30, "a reading again"
    )
    produced = producer.stop()
    wait_until(lambda: not ProcessAudit([paused, other]).lost(produced), 60, "every record delivered")
    paused.stop()
    other.stop()
    watch.stop()

    assert watch.reads > 20
    assert not watch.backwards, watch.backwards  # no late commit or callback moved a checkpoint back
    audit = ProcessAudit([paused, other])
    assert not audit.lost(produced)
    assert not audit.shard_order_violations()
    print(f"fencing: {len(produced)} records, 0 lost, {len(audit.duplicates())} duplicated")
    # duplicates only of what the paused client had received before it was fenced off: a record it wrote
    # before SIGCONT (it was stopped in between), or the one its consumer thread had in hand, not yet
    # written, when SIGSTOP came. That one is written right after SIGCONT: the first line after the pause,
    # which may come after the other client's delivery of the same record (it re-read the shard from the
    # last checkpoint meanwhile)
    after_pause = sorted((d for d in paused.deliveries() if d.at >= paused_at), key=lambda d: d.at)
    in_hand = after_pause[0] if after_pause else None
    for rid, ds in audit.duplicates().items():
        assert any(d.client == "client-a" and (d.at < resumed_at or d == in_hand) for d in ds), (rid, ds)
        assert sum(1 for d in ds if d.client == "client-b") <= 1, (rid, ds)  # the other client once
    assert paused_at < resumed_at
