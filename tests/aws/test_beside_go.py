"""A kinsumer client never reads beside a live client of the Go library (twitchscience/kinsumer): ``run()``
refuses, or waits (``beside_go="wait"``); a Go client that joins makes running clients hand their shards over.
moto in-process; the Go client is its row in the clients table as the Go library writes it (clients.go:
``ID``, ``Name``, ``LastUpdate`` in ns, ``LastUpdateRFC``), and its ``Stop()`` deletes it."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import attrs
import pytest

from kinsumer import Config, GoClientsLive, Kinsumer, Record
from kinsumer.coordination import checkpoints_table
from tests.aws.conftest import FAST
from tests.helpers import wait_until

GO_ID = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
SHARDS = ["shardId-000000000000", "shardId-000000000001"]


def go_heartbeat(db: Any) -> None:
    """The Go client's registerWithClientsTable: a PutItem of its clientRecord."""
    item = {"ID": {"S": GO_ID}, "Name": {"S": "go-worker"}, "LastUpdate": {"N": str(time.time_ns())},
            "LastUpdateRFC": {"S": "Sat, 28 Nov 2026 23:00:00 +0000"}}  # fmt: skip
    db.put_item(TableName="app_clients", Item=item)


def go_stop(db: Any) -> None:
    """The Go client's deregisterFromClientsTable at Stop()."""
    db.delete_item(TableName="app_clients", Key={"ID": {"S": GO_ID}})


@pytest.fixture
def stream(kinesis: Any) -> str:
    kinesis.create_stream(StreamName="clicks", ShardCount=2)
    return "clicks"


def put(kinesis: Any, ids: range) -> None:
    for i in ids:
        kinesis.put_record(StreamName="clicks", Data=json.dumps({"id": i}).encode(), PartitionKey=str(i))


def owned_by(db: Any, client_id: str) -> list[str]:
    rows = checkpoints_table.load_rows(db, "app_checkpoints")
    return sorted(shard for shard, row in rows.items() if row.owner_id == client_id)


def make(kinesis: Any, db: Any, config: Config = FAST) -> Kinsumer:
    k = Kinsumer("clicks", "app", "worker", attrs.evolve(config, go_client_max_age=60), kinesis=kinesis, dynamodb=db)
    k.create_required_tables()
    return k


def read(k: Kinsumer, count: int) -> list[int]:
    got: list[int] = []
    while len(got) < count:
        record: Record | None = k.next_record(timeout=20)
        assert record is not None
        got.append(json.loads(record.data)["id"])
    return got


def test_run_refuses_while_a_go_client_is_live(kinesis: Any, db: Any, stream: str) -> None:
    k = make(kinesis, db)
    go_heartbeat(db)
    with pytest.raises(GoClientsLive) as info:
        k.run()
    assert GO_ID in str(info.value) and "'go-worker'" in str(info.value) and "beside_go='wait'" in str(info.value)
    assert info.value.field == "Config.beside_go"
    assert [item["ID"]["S"] for item in db.scan(TableName="app_clients")["Items"]] == [GO_ID]  # ours is gone
    k.stop()


def test_a_dead_go_client_does_not_stop_run(kinesis: Any, db: Any, stream: str) -> None:
    """A Go client killed without Stop() leaves its row: it counts as gone go_client_max_age after it."""
    k = Kinsumer("clicks", "app", "worker", attrs.evolve(FAST, go_client_max_age=1), kinesis=kinesis, dynamodb=db)
    k.create_required_tables()
    go_heartbeat(db)
    wait_until(lambda: time.time_ns() - int(go_row(db)["LastUpdate"]["N"]) > 1.2e9, 5, "the Go row to age")
    put(kinesis, range(4))
    with k:
        assert sorted(read(k, 4)) == [0, 1, 2, 3]


def go_row(db: Any) -> dict[str, Any]:
    return dict(db.get_item(TableName="app_clients", Key={"ID": {"S": GO_ID}})["Item"])


def test_wait_reads_nothing_while_a_go_client_is_live_then_everything(kinesis: Any, db: Any, stream: str) -> None:
    k = make(kinesis, db, attrs.evolve(FAST, beside_go="wait"))
    go_heartbeat(db)
    put(kinesis, range(20))
    with k:
        reasons = {r.code: r.message for r in k.health().reasons}
        assert GO_ID in reasons["beside_go"] and "no_shard_owned" not in reasons
        assert owned_by(db, k.client_id) == []  # it took nothing: the first round saw the Go client
        go_stop(db)
        assert sorted(read(k, 20)) == list(range(20))
        wait_until(lambda: k.health().ready, 10, "the client to be ready")


def test_a_go_client_joining_makes_the_client_hand_its_shards_over(kinesis: Any, db: Any, stream: str) -> None:
    k = make(kinesis, db)
    got: list[int] = []

    def consume() -> None:  # as an application does: it asks for the next record at once
        while (record := k.next_record()) is not None:
            got.append(json.loads(record.data)["id"])

    put(kinesis, range(20))
    with k:
        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        wait_until(lambda: len(got) == 20 and owned_by(db, k.client_id) == SHARDS, 10, "both shards read")
        go_heartbeat(db)  # a Go client joins (a rollback)
        wait_until(lambda: owned_by(db, k.client_id) == [], 10, "every shard handed over")
        rows = checkpoints_table.load_rows(db, "app_checkpoints")
        assert all(row.checkpoint is not None for row in rows.values())  # released with their checkpoints
        assert {r.code for r in k.health().reasons} == {"beside_go"}
        put(kinesis, range(20, 40))
        go_stop(db)  # the Go client leaves: the shards come back where they were
        wait_until(lambda: len(got) >= 40, 20, "the records written meanwhile")
    reader.join(10)
    assert sorted(got) == list(range(40))  # nothing lost, nothing twice
