"""kinsumer's own table code, run against tests/sim's DynamoDB and against moto's mock: the same results.

This proves the sim covers what the code calls (every operation, parameter and expression of the
clients, metadata and checkpoints tables, the table admin, the Spark batch ledger): a call the sim does not
model fails loudly (NotImplementedError, a parse error), and a rule it keeps differently shows as a diff.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from kinsumer.aws import tables as aws_tables
from kinsumer.aws.tables import Tables, create_tables, delete_tables, ensure_tables_ready
from kinsumer.coordination import checkpoints_table as cp
from kinsumer.coordination import clients_table as clients
from kinsumer.coordination import metadata_table as meta
from kinsumer.coordination.membership import Membership
from kinsumer.coordination.roster import Roster
from tests.sim import SimDynamoDB

START_MS = 1_700_000_000_000
TABLES = Tables.for_application("app")


@pytest.fixture
def fake_now(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """kinsumer's ``now_ms`` (and ``now_ns``) on a fake clock, one second a call; the returned function starts it
    over."""
    ticks: list[Iterator[int]] = []

    def restart() -> None:
        ticks[:] = [itertools.count(START_MS, 1000)]

    restart()
    for module in (aws_tables, cp, clients, meta):
        monkeypatch.setattr(module, "now_ms", lambda: next(ticks[0]))
    monkeypatch.setattr(cp, "now_ns", lambda: next(ticks[0]) * 1_000_000)  # the checkpoints' LastUpdate
    return restart


def on_moto(scenario: Callable[[Any], Any]) -> Any:
    with mock_aws():
        return scenario(boto3.client("dynamodb", region_name="us-east-1"))


def on_sim(scenario: Callable[[Any], Any]) -> Any:
    return scenario(SimDynamoDB(lambda: START_MS / 1000))


def every_item(db: Any) -> dict[str, list[Any]]:
    found = {}
    for name, key in TABLES.with_keys():
        pages = db.get_paginator("scan").paginate(TableName=name, ConsistentRead=True)
        found[name] = sorted((i for page in pages for i in page["Items"]), key=lambda i: i[key]["S"])
    return found


def coordination(db: Any) -> list[Any]:
    """Membership, leadership, the shard cache and the roster, leases and checkpoints, as clients use them."""
    create_tables(db, TABLES)
    ensure_tables_ready(db, TABLES)
    c, m, k = TABLES.clients, TABLES.metadata, TABLES.checkpoints
    seen: list[Any] = [
        clients.claim(db, c, "a", "worker-a", "i1", stale_ms=START_MS - 60_000),
        clients.claim(db, c, "b", "worker-b", "i2", stale_ms=START_MS - 60_000, streams=("s1", "s2")),
        clients.claim(db, c, "a", "worker-a", "other", stale_ms=START_MS - 60_000),  # held: the row that holds it
        clients.heartbeat(db, c, "a", "worker-a", "i1", 3, headline=clients.Headline("digest", START_MS, 0)),
        clients.heartbeat(db, c, "b", "worker-b", "wrong-instance"),
        clients.live_clients(db, c, 30.0),
        clients.read_client(db, c, "b", consistent=True),
        meta.claim_home_stream(db, m, "clicks"),
        meta.claim_home_stream(db, m, "other"),
        meta.read_home_stream(db, m),
        meta.take_leadership(db, m, "a", "worker-a", 10.0),
        meta.take_leadership(db, m, "b", "worker-b", 10.0),
        meta.read_leader(db, m),
    ]
    meta.release_leadership(db, m, "b")  # not its lease: nothing
    meta.release_leadership(db, m, "a")
    seen += [meta.read_leader(db, m), meta.take_leadership(db, m, "b", "worker-b", 10.0)]
    shards = [f"shardId-{i:012d}" for i in range(1000)]  # packed: past cache_item.PLAIN_LIMIT
    parents: dict[str, tuple[str, ...]] = {
        s: (f"shardId-{i + 5000:012d}", f"shardId-{i + 9000:012d}") for i, s in enumerate(shards)
    }
    seen += [
        meta.write_shard_cache(db, m, ["s-0", "s-1"], {"s-1": ("s-p",)}, 0, {"s-0": "a", "s-1": "b"}, stream="arn@1"),
        meta.write_shard_cache(db, m, ["s-9"], {}, 0),  # a stale version: refused
        meta.read_shard_cache(db, m),
        meta.write_shard_cache(db, m, shards, parents, 1, {s: "ab"[i % 2] for i, s in enumerate(shards)}),
        meta.read_shard_cache(db, m),
        sorted(db.get_item(TableName=m, Key={"Key": {"S": "ShardCache"}}, ConsistentRead=True)["Item"]),
    ]
    rows = clients.all_clients(db, c)
    roster = Roster.of(rows, Membership.from_rows(rows, START_MS + 60_000, 120.0))
    meta.write_roster(db, m, roster, roster.digest())
    seen += [meta.read_roster(db, m), clients.all_clients(db, c)]
    meta.delete_shard_cache(db, m)
    seen.append(meta.read_shard_cache(db, m))
    seen += [
        cp.capture(db, k, "s-0", owner_id="a", owner_name="worker-a", parents=("s-p",), stream="arn@1", instance="i1"),
        cp.capture(db, k, "s-0", owner_id="b", owner_name="worker-b", stream="arn@1"),  # owned: refused
        cp.record_start(db, k, "s-0", owner_id="a", start_at=START_MS),
        cp.commit(db, k, "s-0", owner_id="a", checkpoint=("4960", 3), millis_behind_latest=12, busy_since=START_MS),
        cp.commit(db, k, "s-0", owner_id="b", checkpoint=("4999", None)),  # not its shard
        cp.note_paused(db, k, "s-0", owner_id="a", paused=True),
        cp.note_retrying(db, k, "s-0", owner_id="a", retrying="attempt 2: ValueError"),
        cp.guard(db, k, "s-0", owner_id="a", checkpoint=("4961", None), careful='{"n": 1}', handed="r1"),
        cp.read_row(db, k, "s-0"),
        cp.capture(db, k, "s-0", owner_id="b", owner_name="worker-b", taking=cp.read_row(db, k, "s-0"), stream="arn@1"),
        cp.release(db, k, "s-0", owner_id="b", checkpoint=("4970", None), finished=True, careful="{}", expired=2),
        cp.capture(db, k, "s-0", owner_id="a", owner_name="worker-a", stream="arn@1"),  # finished: refused
        cp.capture(db, k, "s-0", owner_id="a", owner_name="worker-a", stream="arn@2"),  # another incarnation
        cp.reset(db, k, "s-0", owner_id="a", stream="arn@2", parents=()),
        cp.capture(db, k, "s-1", owner_id="a", owner_name="worker-a", stream="arn@2"),
        cp.release(db, k, "s-1", owner_id="a", checkpoint=None, finished=True),
        cp.rewind(db, k, "s-2", start_at=0, stream="arn@2", parents=("s-1",), seen_owner=None),
        cp.rewind(db, k, "s-0", start_at=START_MS, stream="arn@2", parents=(), seen_owner="b"),
        cp.finished_shards(db, k, "arn@2"),
        cp.recorded_stream_name(db, k),
        cp.load_rows(db, k),
    ]
    cp.delete_rows(db, k, ["s-0", "s-1", "s-2"])  # only the finished one goes
    seen.append(cp.load_rows(db, k))
    clients.deregister(db, c, "b", "wrong-instance")
    clients.deregister(db, c, "a", "i1")
    seen += [clients.reap_clients(db, c, 1.0), every_item(db)]
    delete_tables(db, TABLES)
    return seen


def test_kinsumers_table_functions_get_the_same_results_on_the_sim_as_on_moto(fake_now: Callable[[], None]) -> None:
    on_the_sim = on_sim(coordination)
    fake_now()
    on_moto_ = on_moto(coordination)
    for step, (sim, moto) in enumerate(zip(on_the_sim, on_moto_, strict=True)):
        assert sim == moto, f"step {step}"
    assert ["Key", "LastUpdate", "Packed", "Version"] in on_the_sim  # the large cache went packed (a binary value)


def test_the_spark_batch_ledger_gets_the_same_results_on_the_sim_as_on_moto(fake_now: Callable[[], None]) -> None:
    pytest.importorskip("pyspark")
    from kinsumer.spark import batch_ends
    from kinsumer.spark.offsets import ShardEnd, Stop

    def ledger(db: Any) -> list[Any]:
        aws_tables.create_table(db, "app_metadata", "Key")
        ends = batch_ends.BatchEnds(db, "app_metadata", "run-1")
        seen = [ends.plan(0), ends.plan(0), ends.record(0, "s-0", ShardEnd("49", Stop.TIP, 5), 3),
                ends.record(0, "s-0", ShardEnd("50"), 1), ends.record(0, "s-1", ShardEnd("7", Stop.MORE), 2),
                ends.record(1, "s-0", ShardEnd("1"), 1), ends.ends(0), ends.counts(0)]  # fmt: skip
        ends.forget(0)
        return [*seen, ends.ends(0)]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(batch_ends, "now_ms", lambda: START_MS)
        assert on_sim(ledger) == on_moto(ledger)
