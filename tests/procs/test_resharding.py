"""Splits and merges under load, and a leader crash, with client processes on kinesalite."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from demo import servers
from demo.servers import LocalServer
from kinsumer.coordination.metadata_table import read_shard_cache
from tests.helpers import Producer, wait_until
from tests.procs.harness import ClientProcess, Deployment, ProcessAudit
from tests.reshard import merge_adjacent, shards, split_first

pytestmark = pytest.mark.server


def finished_at(deployment: Deployment) -> dict[str, float]:
    db = servers.client(deployment.dynamodb, "dynamodb")
    rows = db.scan(TableName=f"{deployment.app}_checkpoints", ConsistentRead=True)["Items"]
    return {r["Shard"]["S"]: int(r["Finished"]["N"]) / 1000 for r in rows if "Finished" in r}


def leader_id(deployment: Deployment) -> str | None:
    db = servers.client(deployment.dynamodb, "dynamodb")
    item = db.get_item(TableName=f"{deployment.app}_metadata", Key={"Key": {"S": "Leader"}}, ConsistentRead=True)
    return item.get("Item", {}).get("ID", {}).get("S")


def delivered_from(clients: list[ClientProcess], shard_ids: set[str]) -> set[str]:
    return {d.shard_id for c in clients for d in c.deliveries() if d.shard_id in shard_ids}


def assert_children_after_parents(
    audit: ProcessAudit, listing: dict[str, dict[str, Any]], done: dict[str, float]
) -> int:
    """Each child's first record comes after its parents' last, and after they were marked Finished."""
    first_at: dict[str, float] = {}
    last_at: dict[str, float] = {}
    for d in audit.first_deliveries():
        first_at.setdefault(d.shard_id, d.at)
        last_at[d.shard_id] = d.at
    checked = 0
    for sid, shard in listing.items():
        for parent in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId")):
            if parent and sid in first_at:
                assert parent in done, f"{sid} was read but its parent {parent} is not Finished"
                # Finished is stored in whole milliseconds, rounded down: compare in milliseconds
                last_ms = int(last_at.get(parent, 0) * 1000)
                assert first_at[sid] > done[parent] and round(done[parent] * 1000) >= last_ms, (parent, sid)
                checked += 1
    return checked


def all_delivered(
    clients: list[ClientProcess], produced: list[int], producer: Producer, kinesis: Any, stream: str
) -> None:
    """Wait up to 60 s for every record to be delivered; else fail with which were not, of which keys, the
    shards, and where each client's reading stood."""
    try:
        wait_until(lambda: not ProcessAudit(clients).lost(produced), 60, "every record delivered")
    except AssertionError as exc:
        lost = ProcessAudit(clients).lost(produced)
        keys = sorted({producer.keys[rid % len(producer.keys)] for rid in lost})
        lines = [f"{exc}: {len(lost)} of {len(produced)} not delivered, ids {lost[:10]}..., keys {keys[:10]}"]
        for sid, shard in sorted(shards(kinesis, stream).items()):
            closed = "EndingSequenceNumber" in shard["SequenceNumberRange"]
            parents = (shard.get("ParentShardId"), shard.get("AdjacentParentShardId"))
            lines.append(f"  {sid}: parents {parents}, {'closed' if closed else 'open'}")
        now = time.time()
        for client in clients:
            last: dict[str, tuple[int, float]] = {}
            for d in client.deliveries():
                last[d.shard_id] = (last.get(d.shard_id, (0, 0.0))[0] + 1, d.at)
            seen = {sid: f"{n} records, the last {now - at:.1f} s ago" for sid, (n, at) in sorted(last.items())}
            lines.append(f"  {client.name}: exit code {client.exit_code}, {seen}")
        raise AssertionError("\n".join(lines)) from None


def test_split_and_merge_under_load_keep_per_key_order(
    kinesalite: LocalServer,
    deploy: Callable[..., Deployment],
    processes: list[ClientProcess],
) -> None:
    deployment = deploy(3, kinesis=kinesalite)
    kinesis = kinesalite.client("kinesis")
    producer = Producer(kinesalite.client("kinesis"), deployment.stream, total=None, batch=60, pause=0.05, keys=30)
    producer.start()
    clients = [ClientProcess(deployment, f"client-{i}").start() for i in range(3)]
    processes.extend(clients)
    wait_until(lambda: ProcessAudit(clients).count() >= 1_000, 60, "reading before the split")
    parent = split_first(kinesis, deployment.stream)
    children = {sid for sid, s in shards(kinesis, deployment.stream).items() if s.get("ParentShardId") == parent}
    wait_until(lambda: delivered_from(clients, children) == children, 60, "both children read")
    left, right = merge_adjacent(kinesis, deployment.stream, 1)
    merged = {sid for sid, s in shards(kinesis, deployment.stream).items() if s.get("AdjacentParentShardId") == right}
    wait_until(lambda: delivered_from(clients, merged) == merged, 60, "the merged shard read")
    produced = producer.stop()
    all_delivered(clients, produced, producer, kinesis, deployment.stream)
    for proc in clients:
        proc.stop()

    audit = ProcessAudit(clients)
    assert not audit.lost(produced)
    assert not audit.duplicates()  # no crash, no expired handoff: none allowed
    print(f"split and merge under load: {len(produced)} records, 0 lost, 0 duplicated")
    assert not audit.shard_order_violations()
    assert not audit.key_order_violations()
    listing = shards(kinesis, deployment.stream)
    done = finished_at(deployment)
    assert {parent, left, right} <= set(done)
    assert assert_children_after_parents(audit, listing, done) == 4
    # a finished shard is never fetched again
    for proc in clients:
        for event in proc.events("fetched"):
            shard_id = event.fields[0]
            if shard_id in done:
                assert event.at <= done[shard_id] + 0.001, (proc.name, event)


def test_after_a_leader_crash_a_new_leader_takes_over_and_reshards_are_picked_up(
    kinesalite: LocalServer,
    deploy: Callable[..., Deployment],
    processes: list[ClientProcess],
) -> None:
    deployment = deploy(2, kinesis=kinesalite)
    kinesis = kinesalite.client("kinesis")
    producer = Producer(kinesalite.client("kinesis"), deployment.stream, total=None, batch=40, pause=0.05, keys=20)
    producer.start()
    clients = [ClientProcess(deployment, f"client-{i}").start() for i in range(3)]  # client-0 sorts first
    processes.extend(clients)
    wait_until(lambda: leader_id(deployment) == "client-0", 30, "client-0 to lead")
    wait_until(lambda: ProcessAudit(clients).count() >= 300, 60, "reading")
    killed_at = time.time()
    clients[0].kill()
    wait_until(lambda: leader_id(deployment) == "client-1", 30, "client-1 to take the lead")
    parent = split_first(kinesis, deployment.stream)
    children = {sid for sid, s in shards(kinesis, deployment.stream).items() if s.get("ParentShardId") == parent}
    wait_until(lambda: delivered_from(clients[1:], children) == children, 60, "the children read after the crash")
    produced = producer.stop()
    all_delivered(clients, produced, producer, kinesis, deployment.stream)
    for proc in clients[1:]:
        proc.stop()
    audit = ProcessAudit(clients)
    assert not audit.lost(produced)
    assert all(ds[0].client == "client-0" and ds[1].at > killed_at for ds in audit.duplicates().values())
    print(f"leader crash: {len(produced)} records, 0 lost, {len(audit.duplicates())} duplicated")
    assert not audit.key_order_violations()
    # the shard cache was rewritten after the crash and now lists the children
    db = servers.client(deployment.dynamodb, "dynamodb")
    cache = read_shard_cache(db, f"{deployment.app}_metadata")  # in whichever form it is stored (plain or packed)
    assert cache is not None and cache.last_update / 1000 > killed_at
    assert children <= set(cache.shard_ids)
