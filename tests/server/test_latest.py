"""LATEST starts leave no hole: a shard's first start is recorded, and every later start begins there.

On kinesalite (polling; the first test also on kinesis-mock, with enhanced fan-out). A shard
that got nothing while its consumer ran has no checkpoint; starting it from LATEST again (a
restart, or its next owner after a rebalance) would skip everything written in between.
kinesalite answers AT_TIMESTAMP only when a record lies at or after the timestamp, so each test
writes the records before the start that uses it.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import attrs
import pytest

from demo.servers import LocalServer
from kinsumer import Config, Kinsumer, Record
from tests.conftest import unique
from tests.helpers import shard_hash_keys, wait_until
from tests.reshard import new_stream
from tests.server.conftest import SERVER_CONFIG

pytestmark = pytest.mark.server

LATEST = attrs.evolve(SERVER_CONFIG, initial_position="LATEST")


def put(kinesis: Any, stream: str, hash_key: str, ids: range) -> list[int]:
    records = [{"Data": json.dumps({"id": i}).encode(), "PartitionKey": "k", "ExplicitHashKey": hash_key} for i in ids]
    kinesis.put_records(StreamName=stream, Records=records)
    return list(ids)


def rows(moto_server: LocalServer, app: str) -> dict[str, dict[str, Any]]:
    items = moto_server.client("dynamodb").scan(TableName=f"{app}_checkpoints", ConsistentRead=True)["Items"]
    return {item["Shard"]["S"]: item for item in items}


def both_started(moto_server: LocalServer, app: str) -> bool:
    """Both shards captured and their first start recorded."""
    found = rows(moto_server, app)
    return len(found) == 2 and all("StartAt" in r for r in found.values())


def released(moto_server: LocalServer, app: str) -> list[str]:
    return [shard for shard, row in rows(moto_server, app).items() if "OwnerID" not in row]


def take(k: Kinsumer, count: int) -> list[Record]:
    return [r for r in (k.next_record(timeout=30) for _ in range(count)) if r is not None]


def ids(records: list[Record]) -> list[int]:
    return [json.loads(r.data)["id"] for r in records]


@pytest.mark.parametrize(
    ("server", "config"),
    [
        pytest.param("kinesalite", LATEST, id="polling"),
        pytest.param("kinesis_mock", attrs.evolve(LATEST, efo_consumer_name="latest"), id="fan-out"),
    ],
)
def test_a_restart_reads_what_an_idle_shard_got_while_no_client_ran(
    request: pytest.FixtureRequest, moto_server: LocalServer, server: str, config: Config
) -> None:
    source: LocalServer = request.getfixturevalue(server)
    kinesis = source.client("kinesis")
    stream, app = new_stream(kinesis, 2), unique("app")
    (_, busy_key), (idle, idle_key) = sorted(shard_hash_keys(kinesis, stream).items())

    def consumer() -> Kinsumer:
        return Kinsumer(
            stream, app, "c", config, kinesis=source.client("kinesis"), dynamodb=moto_server.client("dynamodb")
        )

    first = consumer()
    first.create_required_tables()
    first.run()
    wait_until(lambda: both_started(moto_server, app), 30, "both starts recorded")
    busy_ids = put(kinesis, stream, busy_key, range(5))
    assert ids(take(first, 5)) == busy_ids
    first.stop()
    assert "SequenceNumber" not in rows(moto_server, app)[idle]  # the idle shard has no checkpoint

    written = put(kinesis, stream, idle_key, range(100, 110))  # while no client runs
    second = consumer()
    second.run()
    try:
        got = take(second, 10)
    finally:
        second.stop()
    assert ids(got) == written and {r.shard_id for r in got} == {idle}


def test_an_idle_shard_moved_by_a_rebalance_is_read_from_where_it_first_started(
    kinesalite: LocalServer, moto_server: LocalServer
) -> None:
    """Records written after the old owner released the shard and before the new one read it."""
    kinesis = kinesalite.client("kinesis")
    stream, app = new_stream(kinesis, 2), unique("app")
    keys = shard_hash_keys(kinesis, stream)
    gate = threading.Event()  # holds the joining client's captures until the test opens it

    def hold_captures(params: dict[str, Any], **_: Any) -> None:
        if "#owner = :me, #oname = :name" in params.get("UpdateExpression", ""):
            gate.wait(60)

    def consumer(dynamodb: Any) -> Kinsumer:
        return Kinsumer(stream, app, "c", LATEST, kinesis=kinesalite.client("kinesis"), dynamodb=dynamodb)

    alone = consumer(moto_server.client("dynamodb"))
    alone.create_required_tables()
    alone.run()
    joining_db = moto_server.client("dynamodb")
    joining_db.meta.events.register("before-parameter-build.dynamodb.UpdateItem", hold_captures)
    joining: Kinsumer | None = None
    try:
        wait_until(lambda: both_started(moto_server, app), 30, "both shards started by the first client")
        joining = consumer(joining_db)
        joining.run()
        wait_until(lambda: bool(released(moto_server, app)), 30, "the first client releasing a shard")
        (moved,) = released(moto_server, app)
        written = put(kinesis, stream, keys[moved], range(200, 210))  # between the release and the new owner's read
        gate.set()
        got = take(joining, 10)
        assert ids(got) == written and {r.shard_id for r in got} == {moved}
    finally:
        gate.set()
        if joining is not None:
            joining.stop()
        alone.stop()
