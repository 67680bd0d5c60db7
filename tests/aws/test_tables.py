"""Each table operation against moto's in-process DynamoDB, including conditional failures."""

from __future__ import annotations

from typing import Any

import boto3
import botocore.exceptions
import pytest

from kinsumer.aws.tables import Tables, create_tables, delete_tables, ensure_tables_ready, now_ms
from kinsumer.coordination import checkpoints_table, clients_table, metadata_table
from kinsumer.errors import KinsumerError, TableConflict, TableNotFound, WrongTableSchema


def table_names(db: Any) -> set[str]:
    return set(db.list_tables()["TableNames"])


def test_create_is_idempotent_and_makes_string_hash_keys(db: Any) -> None:
    tables = Tables.for_application("billing")
    create_tables(db, tables)
    create_tables(db, tables)
    assert table_names(db) == {"billing_clients", "billing_checkpoints", "billing_metadata"}
    keys = {n: db.describe_table(TableName=n)["Table"]["KeySchema"][0]["AttributeName"] for n in table_names(db)}
    assert keys == {"billing_clients": "ID", "billing_checkpoints": "Shard", "billing_metadata": "Key"}
    assert (
        db.describe_table(TableName="billing_clients")["Table"]["BillingModeSummary"]["BillingMode"]
        == "PAY_PER_REQUEST"
    )
    ensure_tables_ready(db, tables)


def test_provisioned_billing(db: Any) -> None:
    tables = Tables.for_application("prov")
    create_tables(db, tables, billing_mode="PROVISIONED", read_capacity=3, write_capacity=4)
    throughput = db.describe_table(TableName="prov_metadata")["Table"]["ProvisionedThroughput"]
    assert (throughput["ReadCapacityUnits"], throughput["WriteCapacityUnits"]) == (3, 4)


def test_delete_is_idempotent(db: Any, tables: Tables) -> None:
    delete_tables(db, tables)
    delete_tables(db, tables)
    assert table_names(db) == set()


def test_a_missing_table_is_named(db: Any, tables: Tables) -> None:
    db.delete_table(TableName=tables.metadata)
    with pytest.raises(TableNotFound) as info:
        ensure_tables_ready(db, tables)
    assert info.value.table_name == "app_metadata"
    assert "create_required_tables()" in str(info.value)


@pytest.mark.parametrize(
    ("key_schema", "types", "found"),
    [
        ([("Name", "HASH")], {"Name": "S"}, "Name (hash key, type S)"),  # another key
        ([("ID", "HASH")], {"ID": "N"}, "ID (hash key, type N)"),  # the key as a number
        ([("ID", "HASH"), ("At", "RANGE")], {"ID": "S", "At": "N"}, "ID (hash key, type S), At (range key, type N)"),
    ],
)
def test_a_table_keyed_otherwise_is_named_with_its_key_and_the_expected_one(
    db: Any, key_schema: list[tuple[str, str]], types: dict[str, str], found: str
) -> None:
    """A clients table made by something else: create_required_tables() and run() say so, not a later write."""
    tables = Tables.for_application("other")
    db.create_table(
        TableName=tables.clients,
        KeySchema=[{"AttributeName": a, "KeyType": k} for a, k in key_schema],
        AttributeDefinitions=[{"AttributeName": a, "AttributeType": t} for a, t in types.items()],
        BillingMode="PAY_PER_REQUEST",
    )
    for check in (lambda: create_tables(db, tables), lambda: ensure_tables_ready(db, tables)):
        with pytest.raises(WrongTableSchema) as info:
            check()
        assert (info.value.table_name, info.value.found, info.value.expected) == (
            "other_clients",
            found,
            "ID (string hash key)",
        )
        assert "kinsumer delete-tables other" in str(info.value)


# ---------------------------------------------------------------- clients


def test_heartbeat_live_clients_sorted_and_deregister(db: Any, tables: Tables) -> None:
    for cid in ("c", "a", "b"):
        clients_table.heartbeat(db, tables.clients, cid, f"name-{cid}", f"instance-{cid}")
    live = clients_table.live_clients(db, tables.clients, max_age=10)
    assert [c.id for c in live] == ["a", "b", "c"]
    assert live[0].name == "name-a"
    clients_table.deregister(db, tables.clients, "b", "instance-b")
    assert [c.id for c in clients_table.live_clients(db, tables.clients, max_age=10)] == ["a", "c"]


def test_a_client_row_that_keeps_changing_under_a_heartbeat_is_a_kinsumer_error_naming_the_client(
    db: Any, tables: Tables
) -> None:
    """Another process writes the row before each put (refused), then deletes it before it is read: thrice."""
    other = boto3.client("dynamodb", region_name="us-east-1")  # the other process: its calls are not hooked
    key = {"ID": {"S": "c1"}}
    rival = {**key, "Instance": {"S": "theirs"}, "LastUpdate": {"N": str(now_ms())}}
    puts = []

    def write_before_our_put(**_: Any) -> None:
        other.put_item(TableName=tables.clients, Item=rival)

    def delete_before_our_read(**_: Any) -> None:
        puts.append(1)
        other.delete_item(TableName=tables.clients, Key=key)

    db.meta.events.register("before-call.dynamodb.PutItem", write_before_our_put)
    db.meta.events.register("after-call.dynamodb.PutItem", delete_before_our_read)
    with pytest.raises(TableConflict, match=r"client c1 .* kept changing .* share a client_id") as info:
        clients_table.heartbeat(db, tables.clients, "c1", "n", "mine")
    assert isinstance(info.value, KinsumerError) and len(puts) == 3


def test_silent_clients_are_not_live_and_get_reaped(db: Any, tables: Tables) -> None:
    clients_table.heartbeat(db, tables.clients, "alive", "n", "instance-alive")
    old = str(now_ms() - 60_000)
    db.put_item(TableName=tables.clients, Item={"ID": {"S": "dead"}, "Name": {"S": "n"}, "LastUpdate": {"N": old}})
    assert [c.id for c in clients_table.live_clients(db, tables.clients, max_age=10)] == ["alive"]
    assert clients_table.reap_clients(db, tables.clients, older_than=30) == 1
    assert {i["ID"]["S"] for i in db.scan(TableName=tables.clients)["Items"]} == {"alive"}


# ---------------------------------------------------------------- checkpoints


def capture(
    db: Any, tables: Tables, owner: str, shard: str = "s1", taking: checkpoints_table.CheckpointRow | None = None
) -> checkpoints_table.CheckpointRow | None:
    return checkpoints_table.capture(db, tables.checkpoints, shard, owner_id=owner, owner_name=owner, taking=taking)


def test_capture_a_new_shard_then_refuse_a_second_owner(db: Any, tables: Tables) -> None:
    row = capture(db, tables, "A")
    assert row is not None and row.owner_id == "A" and row.sequence_number is None
    assert capture(db, tables, "B") is None
    again = capture(db, tables, "A")
    assert again is not None and again.owner_id == "A"


def test_a_shard_is_taken_from_a_dead_owner_only_as_read_and_keeps_its_checkpoint(db: Any, tables: Tables) -> None:
    assert capture(db, tables, "A") is not None
    assert checkpoints_table.commit(db, tables.checkpoints, "s1", owner_id="A", checkpoint=("42", None))
    seen = checkpoints_table.read_row(db, tables.checkpoints, "s1")
    assert seen is not None
    assert capture(db, tables, "B") is None  # owned: only as read, once the owner was found dead
    assert checkpoints_table.commit(db, tables.checkpoints, "s1", owner_id="A", checkpoint=("43", None))
    assert capture(db, tables, "B", taking=seen) is None  # A wrote since B read: A came back
    seen = checkpoints_table.read_row(db, tables.checkpoints, "s1")
    row = capture(db, tables, "B", taking=seen)
    assert row is not None and row.owner_id == "B" and row.sequence_number == "43"
    assert not checkpoints_table.commit(db, tables.checkpoints, "s1", owner_id="A", checkpoint=("44", None))


def test_commit_only_by_the_owner(db: Any, tables: Tables) -> None:
    capture(db, tables, "A")
    assert checkpoints_table.commit(db, tables.checkpoints, "s1", owner_id="A", checkpoint=("7", None))
    assert not checkpoints_table.commit(db, tables.checkpoints, "s1", owner_id="B", checkpoint=("9", None))
    row = checkpoints_table.read_row(db, tables.checkpoints, "s1")
    assert row is not None and row.sequence_number == "7"


def test_a_commit_without_a_checkpoint_confirms_the_lease_without_touching_the_checkpoint(
    db: Any, tables: Tables
) -> None:
    capture(db, tables, "A")
    checkpoints_table.commit(db, tables.checkpoints, "s1", owner_id="A", checkpoint=("7", None))
    before = checkpoints_table.read_row(db, tables.checkpoints, "s1")
    db.update_item(
        TableName=tables.checkpoints,
        Key={"Shard": {"S": "s1"}},
        UpdateExpression="SET LastUpdate = :old",
        ExpressionAttributeValues={":old": {"N": "1"}},
    )
    assert checkpoints_table.commit(db, tables.checkpoints, "s1", owner_id="A", checkpoint=None)
    after = checkpoints_table.read_row(db, tables.checkpoints, "s1")
    assert before is not None and after is not None
    assert after.sequence_number == "7" and after.last_update > 1


def test_release_frees_the_shard_and_only_the_owner_may(db: Any, tables: Tables) -> None:
    capture(db, tables, "A")
    assert not checkpoints_table.release(db, tables.checkpoints, "s1", owner_id="B", checkpoint=("5", None))
    assert checkpoints_table.release(db, tables.checkpoints, "s1", owner_id="A", checkpoint=("8", None))
    row = checkpoints_table.read_row(db, tables.checkpoints, "s1")
    assert row is not None and row.owner_id is None and row.sequence_number == "8" and not row.finished
    taken = capture(db, tables, "B")
    assert taken is not None and taken.sequence_number == "8"
    assert not checkpoints_table.commit(db, tables.checkpoints, "s1", owner_id="A", checkpoint=("9", None))


def test_a_finished_shard_cannot_be_captured_and_gets_reaped(db: Any, tables: Tables) -> None:
    capture(db, tables, "A")
    assert checkpoints_table.release(db, tables.checkpoints, "s1", owner_id="A", checkpoint=("8", None), finished=True)
    assert capture(db, tables, "B") is None
    row = checkpoints_table.read_row(db, tables.checkpoints, "s1")
    assert row is not None and row.finished
    capture(db, tables, "A", shard="s2")
    assert set(checkpoints_table.load_rows(db, tables.checkpoints)) == {"s1", "s2"}
    checkpoints_table.delete_rows(db, tables.checkpoints, ["s1", "s2"])  # s2 is not finished: kept
    assert set(checkpoints_table.load_rows(db, tables.checkpoints)) == {"s2"}


def test_rows_of_another_incarnation_of_the_stream_are_told_apart_and_reset(db: Any, tables: Tables) -> None:
    old, new = "arn:aws:kinesis:us-east-1:1:stream/s@1000", "arn:aws:kinesis:us-east-1:1:stream/s@2000"
    table = tables.checkpoints
    # a row of a version before the identity: stamped with the current stream at capture, and applied
    db.put_item(TableName=table, Item={"Shard": {"S": "s0"}, "SequenceNumber": {"S": "5"}})
    legacy = checkpoints_table.capture(db, table, "s0", owner_id="A", owner_name="a", stream=new)
    assert legacy is not None and legacy.checkpoint == ("5", None) and legacy.stream == new and not legacy.foreign(new)
    # a finished row of the old incarnation: captured (finished there only), seen as foreign, then reset
    db.put_item(TableName=table, Item={"Shard": {"S": "s1"}, "SequenceNumber": {"S": "9"}, "Finished": {"N": "1"},
                                       "Stream": {"S": old}, "StartAt": {"N": "1"}})  # fmt: skip
    row = checkpoints_table.capture(db, table, "s1", owner_id="A", owner_name="a", stream=new)
    assert row is not None and row.foreign(new) and row.finished and row.stream == old
    assert row.without_progress().checkpoint is None and not row.without_progress().finished
    assert not checkpoints_table.reset(db, table, "s1", owner_id="B", stream=new, parents=())  # only the owner
    assert checkpoints_table.reset(db, table, "s1", owner_id="A", stream=new, parents=("s0",))
    stored = checkpoints_table.read_row(db, table, "s1")
    assert stored is not None and (stored.checkpoint, stored.finished, stored.start_at, stored.stream) == (
        None, False, None, new
    )  # fmt: skip
    assert stored.parent_shard_ids == ("s0",) and stored.owner_id == "A"
    # a finished row of the current incarnation stays finished
    assert checkpoints_table.release(db, table, "s1", owner_id="A", checkpoint=("3", None), finished=True)
    assert checkpoints_table.capture(db, table, "s1", owner_id="A", owner_name="a", stream=new) is None


def test_capture_records_the_parents(db: Any, tables: Tables) -> None:
    row = checkpoints_table.capture(db, tables.checkpoints, "child", owner_id="A", owner_name="a", parents=("p1", "p2"))
    assert row is not None and row.parent_shard_ids == ("p1", "p2")


# ---------------------------------------------------------------- metadata


def test_leadership_is_exclusive_until_released_or_stale(db: Any, tables: Tables) -> None:
    assert metadata_table.take_leadership(db, tables.metadata, "A", "a", max_age=10)
    assert metadata_table.take_leadership(db, tables.metadata, "A", "a", max_age=10)  # renewal
    assert not metadata_table.take_leadership(db, tables.metadata, "B", "b", max_age=10)
    assert metadata_table.read_leader(db, tables.metadata) == "A"
    metadata_table.release_leadership(db, tables.metadata, "B")  # not the leader: no effect
    assert metadata_table.read_leader(db, tables.metadata) == "A"
    metadata_table.release_leadership(db, tables.metadata, "A")
    assert metadata_table.read_leader(db, tables.metadata) is None
    assert metadata_table.take_leadership(db, tables.metadata, "B", "b", max_age=10)


def test_a_stale_leader_is_replaced(db: Any, tables: Tables) -> None:
    db.put_item(
        TableName=tables.metadata,
        Item={"Key": {"S": "Leader"}, "ID": {"S": "A"}, "LastUpdate": {"N": str(now_ms() - 30_000)}},
    )
    assert metadata_table.take_leadership(db, tables.metadata, "B", "b", max_age=10)


def test_shard_cache_round_trip_and_version_conflict(db: Any, tables: Tables) -> None:
    assert metadata_table.read_shard_cache(db, tables.metadata) is None
    first = metadata_table.write_shard_cache(db, tables.metadata, ["s1", "s2"], {"s2": ("s0",)}, expected_version=0)
    assert first is not None and first.version == 1
    read = metadata_table.read_shard_cache(db, tables.metadata)
    assert read is not None
    assert read.shard_ids == ("s1", "s2") and read.parents == {"s2": ("s0",)} and read.version == 1
    assert metadata_table.write_shard_cache(db, tables.metadata, ["s3"], {}, expected_version=0) is None
    second = metadata_table.write_shard_cache(db, tables.metadata, [], {}, expected_version=1)
    assert second is not None and second.shard_ids == ()


def test_a_shard_cache_of_10000_shards_and_its_assignment_is_stored_and_read_back(db: Any, tables: Tables) -> None:
    shards = [f"shardId-{20_000 + i:012d}" for i in range(10_000)]
    parents = {s: (f"shardId-{2 * i:012d}", f"shardId-{2 * i + 1:012d}") for i, s in enumerate(shards)}
    assignment = {s: f"client-{i % 50:02d}-{'x' * 30}" for i, s in enumerate(shards)}
    with pytest.raises(botocore.exceptions.ClientError, match="size"):  # spelled out, the item is too large
        db.put_item(TableName=tables.metadata, Item={
            "Key": {"S": "TooLarge"}, "ShardIDs": {"L": [{"S": s} for s in shards]},
            "Assignment": {"M": {s: {"S": owner} for s, owner in assignment.items()}},
        })  # fmt: skip
    written = metadata_table.write_shard_cache(db, tables.metadata, shards, parents, 0, assignment, stream="s@1")
    assert written is not None
    read = metadata_table.read_shard_cache(db, tables.metadata)
    assert read is not None and read.version == 1 and read.stream == "s@1"
    assert (list(read.shard_ids), read.parents, read.assignment) == (shards, parents, assignment)
