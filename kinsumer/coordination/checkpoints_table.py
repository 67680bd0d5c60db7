"""The checkpoints table: one row per shard, owned by at most one live client.

Row: ``Shard`` (hash key), ``SequenceNumber`` (string: Kinesis sequence numbers exceed
DynamoDB's 38 digits), ``OwnerID``, ``OwnerName``, ``LastUpdate`` (epoch ms), ``Finished``
(epoch ms, set once the shard is closed and fully processed), ``ParentShardIds``.

Capture is conditional on the row being free or stale; commit and release are conditional
on ``OwnerID = :me``, so a client that lost a shard can never overwrite the new owner's
checkpoint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import botocore.exceptions

from ..aws.error_codes import is_condition_failure
from ..aws.tables import now_ms

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["CheckpointRow", "capture", "commit", "delete_rows", "load_rows", "read_row", "release"]

_NAMES = {
    "#lag": "MillisBehindLatest",
    "#seq": "SequenceNumber",
    "#owner": "OwnerID",
    "#oname": "OwnerName",
    "#lu": "LastUpdate",
    "#fin": "Finished",
    "#parents": "ParentShardIds",
}


@attrs.frozen
class CheckpointRow:
    shard_id: str
    sequence_number: str | None = None
    owner_id: str | None = None
    owner_name: str | None = None
    last_update: int = 0
    finished: bool = False
    parent_shard_ids: tuple[str, ...] = ()
    millis_behind_latest: int | None = None  # as last committed by the owner

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> CheckpointRow:
        return cls(
            shard_id=item["Shard"]["S"],
            sequence_number=item.get("SequenceNumber", {}).get("S"),
            owner_id=item.get("OwnerID", {}).get("S"),
            owner_name=item.get("OwnerName", {}).get("S"),
            last_update=int(item.get("LastUpdate", {}).get("N", "0")),
            finished="Finished" in item,
            parent_shard_ids=tuple(v["S"] for v in item.get("ParentShardIds", {}).get("L", [])),
            millis_behind_latest=int(item["MillisBehindLatest"]["N"]) if "MillisBehindLatest" in item else None,
        )


def _names(expression: str) -> dict[str, str]:
    return {k: v for k, v in _NAMES.items() if k in expression}


def read_row(db: DynamoDBClient, table: str, shard_id: str) -> CheckpointRow | None:
    """The shard's row (strongly consistent), or None."""
    item = db.get_item(TableName=table, Key={"Shard": {"S": shard_id}}, ConsistentRead=True).get("Item")
    return CheckpointRow.from_item(item) if item else None


def capture(
    db: DynamoDBClient,
    table: str,
    shard_id: str,
    *,
    owner_id: str,
    owner_name: str,
    max_age: float,
    parents: tuple[str, ...] = (),
) -> CheckpointRow | None:
    """Take the shard if it is unfinished and free, ours, or stale. Returns the row as taken.

    A single conditional UpdateItem that returns the new row, so the checkpoint we start
    from is exactly the one stored when we took ownership.
    """
    now = now_ms()
    update = "SET #owner = :me, #oname = :name, #lu = :now"
    values: dict[str, Any] = {
        ":me": {"S": owner_id},
        ":name": {"S": owner_name},
        ":now": {"N": str(now)},
        ":cutoff": {"N": str(now - int(max_age * 1000))},
    }
    if parents:
        update += ", #parents = :parents"
        values[":parents"] = {"L": [{"S": p} for p in parents]}
    condition = "attribute_not_exists(#fin) AND (attribute_not_exists(#owner) OR #owner = :me OR #lu <= :cutoff)"
    item = _conditional_update(db, table, shard_id, update, condition, values, return_new=True)
    return None if item is None else CheckpointRow.from_item(item)


def _conditional_update(
    db: DynamoDBClient,
    table: str,
    shard_id: str,
    update: str,
    condition: str,
    values: dict[str, Any],
    *,
    return_new: bool = False,
) -> dict[str, Any] | None:
    """UpdateItem on the shard's row; None when ``condition`` does not hold, else the new row."""
    try:
        resp = db.update_item(
            TableName=table,
            Key={"Shard": {"S": shard_id}},
            UpdateExpression=update,
            ConditionExpression=condition,
            ExpressionAttributeNames=_names(update + condition),
            ExpressionAttributeValues=values,
            ReturnValues="ALL_NEW" if return_new else "NONE",
        )
    except botocore.exceptions.ClientError as exc:
        if is_condition_failure(exc):
            return None
        raise
    return dict(resp.get("Attributes", {}))


def _owned_update(
    db: DynamoDBClient, table: str, shard_id: str, owner_id: str, update: str, values: dict[str, Any]
) -> bool:
    values = {**values, ":me": {"S": owner_id}, ":now": {"N": str(now_ms())}}
    return _conditional_update(db, table, shard_id, update, "#owner = :me", values) is not None


def _set_checkpoint(sequence_number: str | None) -> tuple[str, dict[str, Any]]:
    """The start of an owner's update: LastUpdate, and the checkpoint if there is one."""
    if sequence_number is None:
        return "SET #lu = :now", {}
    return "SET #lu = :now, #seq = :seq", {":seq": {"S": sequence_number}}


def commit(
    db: DynamoDBClient,
    table: str,
    shard_id: str,
    *,
    owner_id: str,
    sequence_number: str | None,
    millis_behind_latest: int | None = None,
) -> bool:
    """Refresh our lease and store ``sequence_number`` (and the lag) if given. False: not ours."""
    update, values = _set_checkpoint(sequence_number)
    if millis_behind_latest is not None:
        update += ", #lag = :lag"
        values[":lag"] = {"N": str(millis_behind_latest)}
    return _owned_update(db, table, shard_id, owner_id, update, values)


def release(
    db: DynamoDBClient,
    table: str,
    shard_id: str,
    *,
    owner_id: str,
    sequence_number: str | None,
    finished: bool = False,
) -> bool:
    """Give the shard up, storing the final checkpoint (and Finished). False: not ours any more."""
    update, values = _set_checkpoint(sequence_number)
    if finished:
        update += ", #fin = :now"
    update += " REMOVE #owner, #oname"
    return _owned_update(db, table, shard_id, owner_id, update, values)


def load_rows(db: DynamoDBClient, table: str) -> dict[str, CheckpointRow]:
    """Every row of the table (strongly consistent), by shard ID."""
    rows: dict[str, CheckpointRow] = {}
    for page in db.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        for item in page.get("Items", []):
            row = CheckpointRow.from_item(item)
            rows[row.shard_id] = row
    return rows


def delete_rows(db: DynamoDBClient, table: str, shard_ids: list[str]) -> None:
    """Delete finished rows (of shards trimmed from the stream)."""
    for shard_id in shard_ids:
        try:
            db.delete_item(
                TableName=table,
                Key={"Shard": {"S": shard_id}},
                ConditionExpression="attribute_exists(#fin)",
                ExpressionAttributeNames={"#fin": "Finished"},
            )
        except botocore.exceptions.ClientError as exc:
            if not is_condition_failure(exc):
                raise
