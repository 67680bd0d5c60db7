"""The application's three DynamoDB tables: names, creation, deletion, readiness.

Plain functions taking a boto3 DynamoDB client, like the rest of the table code.
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import TYPE_CHECKING, Any

import attrs
import botocore.exceptions

from ..clock import now_ms
from ..errors import TableNotFound, TableTimeout, WrongTableSchema
from .error_codes import is_in_use, is_not_found

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["Tables", "create_table", "create_tables", "delete_tables", "ensure_tables_ready", "now_ms"]

_WAIT_POLL = 0.5


@attrs.frozen
class Tables:
    """The table names of one application."""

    clients: str
    checkpoints: str
    metadata: str

    @classmethod
    def for_application(cls, application_name: str) -> Tables:
        return cls(
            clients=f"{application_name}_clients",
            checkpoints=f"{application_name}_checkpoints",
            metadata=f"{application_name}_metadata",
        )

    def with_keys(self) -> list[tuple[str, str]]:
        """(table name, hash key name) of each table."""
        return [(self.clients, "ID"), (self.checkpoints, "Shard"), (self.metadata, "Key")]


def _describe(db: DynamoDBClient, name: str) -> dict[str, Any] | None:
    """The table's description; None if it does not exist."""
    try:
        return dict(db.describe_table(TableName=name)["Table"])
    except botocore.exceptions.ClientError as exc:
        if is_not_found(exc):
            return None
        raise


def _table_status(db: DynamoDBClient, name: str) -> str | None:
    table = _describe(db, name)
    return None if table is None else table.get("TableStatus")


def _check_key(name: str, key: str, table: dict[str, Any]) -> None:
    """Raise :class:`WrongTableSchema` unless ``table``'s key is ``key`` alone, a string hash key."""
    schema = [(k.get("AttributeName"), k.get("KeyType")) for k in table.get("KeySchema", [])]
    types = {a.get("AttributeName"): a.get("AttributeType") for a in table.get("AttributeDefinitions", [])}
    if schema != [(key, "HASH")] or types.get(key) != "S":
        found = ", ".join(f"{attr} ({str(kind).lower()} key, type {types.get(attr, '?')})" for attr, kind in schema)
        raise WrongTableSchema(name, found or "nothing", key)


def _wait_for(db: DynamoDBClient, name: str, wanted: set[str | None], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while (status := _table_status(db, name)) not in wanted:
        if time.monotonic() > deadline:
            raise TableTimeout(name, status, timeout)
        time.sleep(_WAIT_POLL)


def create_table(db: DynamoDBClient, name: str, key: str, *, timeout: float = 300.0) -> None:
    """Create one on-demand table with string hash ``key`` if missing; wait until ACTIVE."""
    _create_one(db, name, key, {"BillingMode": "PAY_PER_REQUEST"}, timeout)


def _create_one(db: DynamoDBClient, name: str, key: str, billing: dict[str, Any], timeout: float) -> None:
    if _table_status(db, name) is None:
        try:
            db.create_table(
                TableName=name,
                KeySchema=[{"AttributeName": key, "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"}],
                **billing,
            )
        except botocore.exceptions.ClientError as exc:
            if not is_in_use(exc):  # created meanwhile by someone else
                raise
    _wait_for(db, name, {"ACTIVE"}, timeout)
    table = _describe(db, name)
    if table is not None:
        _check_key(name, key, table)


def _delete_one(db: DynamoDBClient, name: str, timeout: float) -> None:
    if _table_status(db, name) is None:
        return
    try:
        db.delete_table(TableName=name)
    except botocore.exceptions.ClientError as exc:
        if not (is_not_found(exc) or is_in_use(exc)):
            raise
    _wait_for(db, name, {None}, timeout)


def _for_each(tables: Tables, action: Any) -> None:
    """Run ``action(name, key)`` for the three tables in parallel; re-raise the first failure."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=3, thread_name_prefix="kinsumer-tables") as pool:
        futures = [pool.submit(action, name, key) for name, key in tables.with_keys()]
        for future in futures:
            future.result()


def create_tables(
    db: DynamoDBClient,
    tables: Tables,
    *,
    billing_mode: str = "PAY_PER_REQUEST",
    read_capacity: int = 10,
    write_capacity: int = 10,
    timeout: float = 300.0,
) -> None:
    """Create the missing tables and wait until all three are ACTIVE. Idempotent."""
    billing: dict[str, Any] = {"BillingMode": billing_mode}
    if billing_mode == "PROVISIONED":
        billing["ProvisionedThroughput"] = {"ReadCapacityUnits": read_capacity, "WriteCapacityUnits": write_capacity}
    _for_each(tables, lambda name, key: _create_one(db, name, key, billing, timeout))


def delete_tables(db: DynamoDBClient, tables: Tables, *, timeout: float = 300.0) -> None:
    """Delete the tables that exist and wait until they are gone. Idempotent."""
    _for_each(tables, lambda name, key: _delete_one(db, name, timeout))


def ensure_tables_ready(db: DynamoDBClient, tables: Tables) -> None:
    """Raise :class:`TableNotFound` naming the first table that is missing or not usable, and
    :class:`WrongTableSchema` for one keyed otherwise than kinsumer keys it."""

    def check(name: str, key: str) -> None:
        table = _describe(db, name)
        if table is None or table.get("TableStatus") not in ("ACTIVE", "UPDATING"):
            raise TableNotFound(name)
        _check_key(name, key, table)

    _for_each(tables, check)  # the three at once: run() starts sooner
