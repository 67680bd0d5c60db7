"""The clients table: heartbeats and the sorted list of live clients.

Row: ``ID`` (hash key), ``Name``, ``LastUpdate`` (epoch ms), ``Host``, ``Pid``,
``CacheVersion`` (the version of the shard cache the client last read or wrote: the others
read the cache only when a live client has a newer one), ``Leaving`` (set while a stopping
client hands its shards off: it gets no shards, yet its shards are not taken from it).
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING, Any

import attrs
import botocore.exceptions

from ..aws.error_codes import is_condition_failure
from ..aws.tables import now_ms

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["ClientRow", "all_clients", "deregister", "heartbeat", "live_clients", "reap_clients"]

_HOST = socket.gethostname()


@attrs.frozen
class ClientRow:
    id: str
    name: str
    last_update: int  # epoch ms of the last heartbeat
    host: str = ""
    pid: int = 0
    cache_version: int = 0
    leaving: bool = False


def heartbeat(
    db: DynamoDBClient, table: str, client_id: str, name: str, cache_version: int = 0, *, leaving: bool = False
) -> None:
    """Insert or refresh this client's row."""
    item: dict[str, Any] = {
        "ID": {"S": client_id},
        "Name": {"S": name},
        "LastUpdate": {"N": str(now_ms())},
        "Host": {"S": _HOST},
        "Pid": {"N": str(os.getpid())},
        "CacheVersion": {"N": str(cache_version)},
    }
    if leaving:
        item["Leaving"] = {"BOOL": True}
    db.put_item(TableName=table, Item=item)


def deregister(db: DynamoDBClient, table: str, client_id: str) -> None:
    """Delete this client's row (a clean stop), so the others rebalance at once."""
    db.delete_item(TableName=table, Key={"ID": {"S": client_id}})


def _scan(db: DynamoDBClient, table: str, condition: str | None = None, cutoff_ms: int = 0) -> list[ClientRow]:
    rows: list[ClientRow] = []
    params: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    if condition is not None:
        params.update(
            FilterExpression=condition,
            ExpressionAttributeNames={"#lu": "LastUpdate"},
            ExpressionAttributeValues={":cutoff": {"N": str(cutoff_ms)}},
        )
    for page in db.get_paginator("scan").paginate(**params):
        for item in page.get("Items", []):
            rows.append(
                ClientRow(
                    id=item["ID"]["S"],
                    name=item.get("Name", {}).get("S", ""),
                    last_update=int(item.get("LastUpdate", {}).get("N", "0")),
                    host=item.get("Host", {}).get("S", ""),
                    pid=int(item.get("Pid", {}).get("N", "0")),
                    cache_version=int(item.get("CacheVersion", {}).get("N", "0")),
                    leaving=bool(item.get("Leaving", {}).get("BOOL", False)),
                )
            )
    return rows


def all_clients(db: DynamoDBClient, table: str) -> list[ClientRow]:
    """Every row, live or not, sorted by ID."""
    return sorted(_scan(db, table), key=lambda r: r.id)


def live_clients(db: DynamoDBClient, table: str, max_age: float) -> list[ClientRow]:
    """Clients that heartbeated within ``max_age`` seconds, sorted by ID."""
    rows = _scan(db, table, "#lu > :cutoff", now_ms() - int(max_age * 1000))
    return sorted(rows, key=lambda r: r.id)


def reap_clients(db: DynamoDBClient, table: str, older_than: float) -> int:
    """Delete rows silent for more than ``older_than`` seconds; returns how many."""
    cutoff = now_ms() - int(older_than * 1000)
    dead = _scan(db, table, "#lu < :cutoff", cutoff)
    reaped = 0
    for row in dead:
        try:
            db.delete_item(
                TableName=table,
                Key={"ID": {"S": row.id}},
                ConditionExpression="#lu < :cutoff",
                ExpressionAttributeNames={"#lu": "LastUpdate"},
                ExpressionAttributeValues={":cutoff": {"N": str(cutoff)}},
            )
            reaped += 1
        except botocore.exceptions.ClientError as exc:
            if not is_condition_failure(exc):
                raise
            # it came back to life meanwhile
    return reaped
