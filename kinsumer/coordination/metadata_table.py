"""The metadata table: the leader lease and the shard cache.

Items: ``Key="Leader"`` (``ID``, ``Name``, ``LastUpdate``), ``Key="ShardCache"``
(``ShardIDs``: the sorted consumable frontier, ``Parents``: each frontier shard's parents,
``Assignment``, or all three packed in ``Packed`` past a few KB, see :mod:`.cache_item`;
``Version``, ``LastUpdate``), one ``Key="ShardCache/<stream>"`` of the same shape for each stream
but the home stream (:mod:`.streams`), and ``Key="Stream"`` (``Name``: the application's home
stream, written by its first client; see :func:`claim_home_stream`), and ``Key="Roster"``
(``Digest``, ``Body``: the membership as the leader last published it, see :mod:`.roster`).

kinsumer writes ``LastUpdate`` here in epoch ms. The Go library (twitchscience/kinsumer) keeps its
``Leader`` (``ID``, ``Name``, ``LastUpdate`` in epoch ns) and ``ShardCache`` (``ShardIDs``,
``LastUpdate`` in ns) in the same items: kinsumer takes a Go leader lease once it is stale in either unit,
and reads a Go shard cache as one of another version (no ``Stream``): its next client lists the shards and
writes the cache again (see :mod:`kinsumer.aws.stored`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs
import botocore.exceptions

from ..aws.error_codes import is_condition_failure
from ..aws.stored import epoch_ms, present, stored_cutoff
from ..aws.tables import now_ms
from . import cache_item
from .roster import Roster

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = [
    "ShardCache", "claim_home_stream", "delete_shard_cache", "read_home_stream", "read_leader_item", "read_roster",
    "read_shard_cache",
    "release_leadership", "take_leadership", "write_roster", "write_shard_cache",
]  # fmt: skip

LEADER_KEY = "Leader"
SHARD_CACHE_KEY = "ShardCache"
STREAM_KEY = "Stream"
ROSTER_KEY = "Roster"


def claim_home_stream(db: DynamoDBClient, table: str, stream: str) -> str:
    """Record ``stream`` as the application's home stream unless one is recorded; the home stream.

    The home stream's checkpoints are keyed by shard ID alone (see :mod:`.streams`); every
    client of the application reads it, so two clients of one application never read two
    streams under the same keys.
    """
    try:
        db.put_item(
            TableName=table,
            Item={"Key": {"S": STREAM_KEY}, "Name": {"S": stream}, "LastUpdate": {"N": str(now_ms())}},
            ConditionExpression="attribute_not_exists(#k)",
            ExpressionAttributeNames={"#k": "Key"},
        )
    except botocore.exceptions.ClientError as exc:
        if not is_condition_failure(exc):
            raise
        return read_home_stream(db, table) or stream
    return stream


def read_home_stream(db: DynamoDBClient, table: str) -> str | None:
    """The application's home stream, if a client recorded one."""
    item = db.get_item(TableName=table, Key={"Key": {"S": STREAM_KEY}}, ConsistentRead=True).get("Item", {})
    name = item.get("Name", {}).get("S")
    return name or None


def write_roster(db: DynamoDBClient, table: str, roster: Roster, digest: str) -> None:
    """Publish ``roster`` under its ``digest`` (the leader does, before its heartbeat names it)."""
    item = {"Key": {"S": ROSTER_KEY}, "Digest": {"S": digest}, "Body": {"S": roster.encode()},
            "LastUpdate": {"N": str(now_ms())}}  # fmt: skip
    db.put_item(TableName=table, Item=item)


def read_roster(db: DynamoDBClient, table: str) -> tuple[str, Roster] | None:
    """The roster as published, and its digest; None if none was. An eventually consistent read (half the
    cost): a roster older than the leader's row says shows by its digest, and the reader scans instead."""
    item = db.get_item(TableName=table, Key={"Key": {"S": ROSTER_KEY}}, ConsistentRead=False).get("Item")
    if not item or "Body" not in item:
        return None
    return item.get("Digest", {}).get("S", ""), Roster.decode(item["Body"]["S"])


def take_leadership(db: DynamoDBClient, table: str, client_id: str, name: str, max_age: float) -> bool:
    """Take or renew the leader lease; False if another client holds a fresh one."""
    now = now_ms()
    values: dict[str, Any] = {":me": {"S": client_id}}
    stale = stored_cutoff("#lu", ":cutoff", now - int(max_age * 1000), values)  # a Go leader's is in ns
    try:
        db.put_item(
            TableName=table,
            Item={
                "Key": {"S": LEADER_KEY},
                "ID": {"S": client_id},
                "Name": {"S": name},
                "LastUpdate": {"N": str(now)},
            },
            ConditionExpression=f"#id = :me OR attribute_not_exists(#id) OR {stale}",
            ExpressionAttributeNames={"#id": "ID", "#lu": "LastUpdate"},
            ExpressionAttributeValues=values,
        )
    except botocore.exceptions.ClientError as exc:
        if is_condition_failure(exc):
            return False
        raise
    return True


def release_leadership(db: DynamoDBClient, table: str, client_id: str) -> None:
    """Give the lease up if we hold it, so the next client leads at once."""
    try:
        db.update_item(
            TableName=table,
            Key={"Key": {"S": LEADER_KEY}},
            UpdateExpression="REMOVE #id, #name SET #lu = :now",
            ConditionExpression="#id = :me",
            ExpressionAttributeNames={"#id": "ID", "#name": "Name", "#lu": "LastUpdate"},
            ExpressionAttributeValues={":me": {"S": client_id}, ":now": {"N": str(now_ms())}},
        )
    except botocore.exceptions.ClientError as exc:
        if not is_condition_failure(exc):
            raise


def read_leader(db: DynamoDBClient, table: str) -> str | None:
    """The ID in the leader lease, if any (it may be stale)."""
    return read_leader_item(db, table)[0]


def read_leader_item(db: DynamoDBClient, table: str) -> tuple[str | None, int | None]:
    """The ID in the leader lease, if any (it may be stale), and its LastUpdate in epoch ms, if any."""
    item = present(db.get_item(TableName=table, Key={"Key": {"S": LEADER_KEY}}, ConsistentRead=True).get("Item", {}))
    stored = item.get("LastUpdate", {}).get("N")
    return item.get("ID", {}).get("S"), None if stored is None else epoch_ms(int(stored))


@attrs.frozen
class ShardCache:
    """The consumable frontier as last written to the metadata table."""

    shard_ids: tuple[str, ...]
    parents: dict[str, tuple[str, ...]] = attrs.field(factory=dict, eq=False)
    version: int = 0
    last_update: int = 0
    #: shard -> client, as the leader published it (``Config(assignment="balanced")`` only).
    assignment: dict[str, str] = attrs.field(factory=dict, eq=False)
    #: The identity of the stream the shards belong to ("" in caches of versions before it).
    stream: str = attrs.field(default="", eq=False)


def read_shard_cache(db: DynamoDBClient, table: str, key: str = SHARD_CACHE_KEY) -> ShardCache | None:
    """A stream's shard cache (``key``: its item, see :attr:`.streams.StreamScope.cache_key`), if written."""
    item = db.get_item(TableName=table, Key={"Key": {"S": key}}, ConsistentRead=True).get("Item")
    if not item:
        return None
    item = present(item)
    shard_ids, parents, assignment = cache_item.decode(item)
    return ShardCache(
        shard_ids=shard_ids,
        parents=parents,
        version=int(item.get("Version", {}).get("N", "0")),
        last_update=epoch_ms(int(item.get("LastUpdate", {}).get("N", "0"))),
        assignment=assignment,
        stream=item.get("Stream", {}).get("S", ""),
    )


def delete_shard_cache(db: DynamoDBClient, table: str, key: str = SHARD_CACHE_KEY) -> None:
    """Delete a stream's shard cache (a reset): the next clients list the shards and make it again."""
    db.delete_item(TableName=table, Key={"Key": {"S": key}})


def write_shard_cache(
    db: DynamoDBClient,
    table: str,
    shard_ids: list[str],
    parents: dict[str, tuple[str, ...]],
    expected_version: int,
    assignment: Mapping[str, str] | None = None,
    *,
    stream: str = "",
    key: str = SHARD_CACHE_KEY,
) -> ShardCache | None:
    """Write the cache (and the assignment, if any) if nobody wrote since we read ``expected_version``.

    None if someone did.
    """
    version = expected_version + 1
    now = now_ms()
    item: dict[str, Any] = {
        "Key": {"S": key},
        **cache_item.encode(shard_ids, parents, assignment),
        "Version": {"N": str(version)},
        "LastUpdate": {"N": str(now)},
    }
    if stream:
        item["Stream"] = {"S": stream}
    try:
        db.put_item(
            TableName=table,
            Item=item,
            ConditionExpression="attribute_not_exists(#v) OR #v = :seen",
            ExpressionAttributeNames={"#v": "Version"},
            ExpressionAttributeValues={":seen": {"N": str(expected_version)}},
        )
    except botocore.exceptions.ClientError as exc:
        if is_condition_failure(exc):
            return None
        raise
    return ShardCache(tuple(shard_ids), dict(parents), version, now, dict(assignment or {}), stream)
