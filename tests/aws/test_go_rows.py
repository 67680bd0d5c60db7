"""The Go library's rows (twitchscience/kinsumer), as it writes them, read and conditioned on by each table
operation (moto in-process).

The items are the Go library's as aws-sdk-go's ``dynamodbattribute`` marshals its structs (checkpoints.go
``checkpointRecord``, clients.go ``clientRecord``, leader.go's leader item and ``shardCacheRecord``): nil
pointers as NULL attributes, ``LastUpdate`` as ``time.Now().UnixNano()``.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from kinsumer.aws.tables import Tables, now_ms
from kinsumer.coordination import checkpoints_table, clients_table, metadata_table, rewind
from kinsumer.errors import KinsumerError
from tests.support import go_library

GO_OWNER = "0f8fad5b-d9cb-469f-a165-70867728950e"


def ns_ago(seconds: float) -> str:
    return str(time.time_ns() - int(seconds * 1e9))


def go_checkpoint(
    shard: str, *, seq: str | None, owner: str | None, finished: bool = False, age: float = 0
) -> dict[str, Any]:
    """A row as the Go library's capture/commit (a PutItem of the whole struct) leaves it; a released one has
    no OwnerID and OwnerName (its release REMOVEs them)."""
    item: dict[str, Any] = {
        "Shard": {"S": shard},
        "SequenceNumber": {"S": seq} if seq is not None else {"NULL": True},
        "LastUpdate": {"N": ns_ago(age)},
        "Finished": {"N": ns_ago(age)} if finished else {"NULL": True},
        "LastUpdateRFC": {"S": "Sat, 28 Nov 2026 23:00:00 +0000"},
        "FinishedRFC": {"S": "Sat, 28 Nov 2026 23:00:00 +0000"} if finished else {"NULL": True},
    }
    if owner is not None:
        item |= {"OwnerID": {"S": owner}, "OwnerName": {"S": "go-worker"}}
    return item


def test_a_go_row_with_null_finished_is_unfinished_and_captured_at_its_position(db: Any, tables: Tables) -> None:
    db.put_item(TableName=tables.checkpoints, Item=go_checkpoint("s1", seq="4963", owner=None))
    db.put_item(TableName=tables.checkpoints, Item=go_checkpoint("s2", seq=None, owner=None))
    row = checkpoints_table.read_row(db, tables.checkpoints, "s1")
    assert row is not None and not row.finished and row.checkpoint == ("4963", None)
    taken = checkpoints_table.capture(db, tables.checkpoints, "s1", owner_id="k", owner_name="n", stream="arn@1")
    assert taken is not None and taken.checkpoint == ("4963", None) and taken.owner_id == "k"
    never_read = checkpoints_table.capture(db, tables.checkpoints, "s2", owner_id="k", owner_name="n")
    assert never_read is not None and never_read.checkpoint is None and never_read.resume_at is None


def test_a_go_release_of_a_shard_never_read_stores_an_empty_sequence_number(db: Any, tables: Tables) -> None:
    item = go_checkpoint("s1", seq=None, owner=None) | {"SequenceNumber": {"S": ""}}
    db.put_item(TableName=tables.checkpoints, Item=item)
    row = checkpoints_table.read_row(db, tables.checkpoints, "s1")
    assert row is not None and row.checkpoint is None


def test_a_shard_go_finished_stays_finished(db: Any, tables: Tables) -> None:
    db.put_item(TableName=tables.checkpoints, Item=go_checkpoint("done", seq="77", owner=None, finished=True))
    db.put_item(TableName=tables.checkpoints, Item=go_checkpoint("open", seq="12", owner=None))
    assert checkpoints_table.capture(db, tables.checkpoints, "done", owner_id="k", owner_name="n") is None
    assert checkpoints_table.finished_shards(db, tables.checkpoints, "arn@1") == {"done"}
    assert checkpoints_table.finished_among(db, tables.checkpoints, ["done", "open"], "arn@1") == {"done"}
    checkpoints_table.delete_rows(db, tables.checkpoints, ["done", "open"])  # the trimmed shards' rows: finished only
    assert checkpoints_table.read_row(db, tables.checkpoints, "done") is None
    assert checkpoints_table.read_row(db, tables.checkpoints, "open") is not None


def test_a_go_owners_row_reads_in_milliseconds_and_is_taken_exactly_as_read(db: Any, tables: Tables) -> None:
    db.put_item(TableName=tables.checkpoints, Item=go_checkpoint("s1", seq="9", owner=GO_OWNER, age=30))
    row = checkpoints_table.read_row(db, tables.checkpoints, "s1")
    assert row is not None and row.owner_id == GO_OWNER
    assert abs(now_ms() - 30_000 - row.last_update) < 5_000  # its nanoseconds, read as ms
    assert checkpoints_table.capture(db, tables.checkpoints, "s1", owner_id="k", owner_name="n") is None  # owned
    taken = checkpoints_table.capture(db, tables.checkpoints, "s1", owner_id="k", owner_name="n", taking=row)
    assert taken is not None and taken.checkpoint == ("9", None) and taken.previous_owner == GO_OWNER


def test_kinsumer_writes_nanoseconds_in_checkpoint_rows_and_milliseconds_elsewhere(db: Any, tables: Tables) -> None:
    """A Go client judges a checkpoint row's owner live by its LastUpdate in ns; a kinsumer client row, in ms,
    it finds stale (it never counts one in its modulo)."""
    before_ns = time.time_ns()
    checkpoints_table.capture(db, tables.checkpoints, "s1", owner_id="k", owner_name="n")
    checkpoints_table.commit(db, tables.checkpoints, "s1", owner_id="k", checkpoint=("5", None))
    stored = db.get_item(TableName=tables.checkpoints, Key={"Shard": {"S": "s1"}})["Item"]["LastUpdate"]["N"]
    assert int(stored) >= before_ns // 1_000_000 * 1_000_000
    clients_table.heartbeat(db, tables.clients, "k", "n", "instance-1")
    beat = db.get_item(TableName=tables.clients, Key={"ID": {"S": "k"}})["Item"]["LastUpdate"]["N"]
    assert int(beat) <= time.time_ns() // 1_000_000
    assert metadata_table.take_leadership(db, tables.metadata, "k", "n", max_age=10)
    lease = db.get_item(TableName=tables.metadata, Key={"Key": {"S": "Leader"}})["Item"]["LastUpdate"]["N"]
    assert int(lease) <= time.time_ns() // 1_000_000


def test_go_client_rows_are_told_apart_read_in_milliseconds_and_reaped(db: Any, tables: Tables) -> None:
    def go_client(client_id: str, age: float) -> dict[str, Any]:
        return {"ID": {"S": client_id}, "Name": {"S": "go"}, "LastUpdate": {"N": ns_ago(age)},
                "LastUpdateRFC": {"S": "Sat, 28 Nov 2026 23:00:00 +0000"}}  # fmt: skip

    db.put_item(TableName=tables.clients, Item=go_client("go-live", 1))
    db.put_item(TableName=tables.clients, Item=go_client("go-dead", 900))
    clients_table.heartbeat(db, tables.clients, "ours", "n", "instance-1")
    rows = {r.id: r for r in clients_table.all_clients(db, tables.clients)}
    assert rows["go-live"].go and rows["go-dead"].go and not rows["ours"].go
    assert abs(now_ms() - 900_000 - rows["go-dead"].last_update) < 5_000
    assert [r.id for r in clients_table.live_clients(db, tables.clients, max_age=10)] == ["go-live", "ours"]
    assert [r.id for r in clients_table.live_clients(db, tables.clients, max_age=10, go_max_age=0.5)] == ["ours"]
    assert clients_table.reap_clients(db, tables.clients, older_than=600) == 1
    assert sorted(r.id for r in clients_table.all_clients(db, tables.clients)) == ["go-live", "ours"]


def test_a_go_leader_lease_is_taken_once_stale_in_its_own_unit(db: Any, tables: Tables) -> None:
    def go_leader(age: float) -> dict[str, Any]:
        return {"Key": {"S": "Leader"}, "ID": {"S": GO_OWNER}, "Name": {"S": "go"}, "LastUpdate": {"N": ns_ago(age)},
                "LastUpdateRFC": {"S": "Sat, 28 Nov 2026 23:00:00 +0000"}}  # fmt: skip

    db.put_item(TableName=tables.metadata, Item=go_leader(1))
    assert not metadata_table.take_leadership(db, tables.metadata, "k", "n", max_age=10)
    assert metadata_table.read_leader_item(db, tables.metadata)[0] == GO_OWNER
    db.put_item(TableName=tables.metadata, Item=go_leader(60))
    assert metadata_table.take_leadership(db, tables.metadata, "k", "n", max_age=10)
    assert metadata_table.read_leader(db, tables.metadata) == "k"


def test_a_go_shard_cache_reads_as_one_to_write_again(db: Any, tables: Tables) -> None:
    go_cache = {"Key": {"S": "ShardCache"}, "ShardIDs": {"L": [{"S": "s1"}, {"S": "s2"}]},
                "LastUpdate": {"N": ns_ago(5)}, "LastUpdateRFC": {"S": "Sat, 28 Nov 2026 23:00:00 +0000"}}  # fmt: skip
    db.put_item(TableName=tables.metadata, Item=go_cache)
    cache = metadata_table.read_shard_cache(db, tables.metadata)
    assert cache is not None and cache.shard_ids == ("s1", "s2") and cache.version == 0 and cache.stream == ""
    assert abs(now_ms() - 5_000 - cache.last_update) < 5_000
    written = metadata_table.write_shard_cache(db, tables.metadata, ["s1"], {}, expected_version=0, stream="arn@1")
    assert written is not None and written.version == 1


def test_a_reset_is_refused_while_a_go_client_is_live(kinesis: Any, db: Any, tables: Tables) -> None:
    kinesis.create_stream(StreamName="clicks", ShardCount=1)
    item = {"ID": {"S": GO_OWNER}, "Name": {"S": "go-worker"}, "LastUpdate": {"N": ns_ago(2)}}
    db.put_item(TableName=tables.clients, Item=item)
    with pytest.raises(KinsumerError, match=f"go-worker \\({GO_OWNER}, a client of the Go library\\)"):
        rewind.plan_reset(kinesis, db, "clicks", "app", "TRIM_HORIZON", max_age=10)


def test_every_row_kinsumer_writes_is_one_the_go_library_reads(db: Any, tables: Tables) -> None:
    """Back to Go: the Go library unmarshals each row into its structs (UnmarshalMap fails on a type it does not
    expect); a kinsumer client row (ms) it finds stale, a kinsumer checkpoint row (ns) live."""
    t = tables.checkpoints
    checkpoints_table.capture(db, t, "s1", owner_id="k", owner_name="n", parents=("s0",), stream="arn@1", instance="i")
    checkpoints_table.record_start(db, t, "s1", owner_id="k", start_at=now_ms())
    checkpoints_table.commit(db, t, "s1", owner_id="k", checkpoint=("42", 3), millis_behind_latest=5, handed="r",
                             busy_since=now_ms(), expired=2, oldest_arrival=now_ms())  # fmt: skip
    checkpoints_table.note_paused(db, t, "s1", owner_id="k", paused=True)
    checkpoints_table.note_retrying(db, t, "s1", owner_id="k", retrying="attempt 2: ValueError")
    checkpoints_table.guard(db, t, "s1", owner_id="k", checkpoint=("43", None), careful='{"n": 1}')
    checkpoints_table.capture(db, t, "s2", owner_id="k", owner_name="n")
    checkpoints_table.release(db, t, "s2", owner_id="k", checkpoint=("7", None), finished=True, expired=1)
    held = go_library.read_checkpoint(db.get_item(TableName=t, Key={"Shard": {"S": "s1"}})["Item"])
    assert (held.sequence_number, held.owner_id, held.finished) == ("43", "k", None)
    assert held.last_update > time.time_ns() - 10**10  # live to a Go client: it waits for the release
    done = go_library.read_checkpoint(db.get_item(TableName=t, Key={"Shard": {"S": "s2"}})["Item"])
    assert done.finished is not None and done.owner_id is None
    clients_table.heartbeat(db, tables.clients, "k", "n", "i", 3, streams=("a", "b"))
    (client,) = [go_library.read_client(item) for item in db.scan(TableName=tables.clients)["Items"]]
    assert client.last_update < time.time_ns() - 48 * 3600 * 10**9  # a Go client counts no kinsumer client
    for shards in (["s1", "s2"], [f"shardId-{i:012d}" for i in range(300)]):  # plain, and packed past 3 KB
        version = (metadata_table.read_shard_cache(db, tables.metadata) or metadata_table.ShardCache(())).version
        metadata_table.write_shard_cache(db, tables.metadata, shards, {}, version, {s: "k" for s in shards})
        cache = go_library.read_shard_cache(
            db.get_item(TableName=tables.metadata, Key={"Key": {"S": "ShardCache"}})["Item"]
        )
        assert cache.shard_ids in (tuple(shards), None)  # packed: no ShardIDs, so a Go client lists the shards
