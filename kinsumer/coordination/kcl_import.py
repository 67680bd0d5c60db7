"""``kinsumer import-kcl``: an application moves from KCL (or kclpy) to kinsumer in place, where KCL stood.

What a lease holds and what it maps to is :mod:`.kcl_leases` (pure, with the KCL sources of each fact), the
plan and the check made of the tables' contents :mod:`.kcl_plan` (pure). Here the I/O: :func:`plan_import`
reads the lease table, the stream's listing and the application's rows; :func:`apply_import` writes the rows
that change; :func:`check_import` reads both tables back.

The import is refused while a KCL worker still renews a lease (its ``leaseCounter`` moves within KCL's
failover time: it would go on reading, and checkpointing in KCL's table), unless forced; while a kinsumer
client of the application is live (it would overwrite the rows with its next commit); while a client holds
one of the rows (never overwritten); where a row holds kinsumer's own progress that differs from KCL's
(unless told to overwrite it); and while a lease checkpointed at ``AT_TIMESTAMP`` has no timestamp given.
A row that already says what the import would write is left as it is, so a second run writes nothing.
Each row is written free (no owner), ``LastUpdate`` in epoch nanoseconds, with a condition that it is still
absent, or as read and free.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import botocore.exceptions

from ..aws.error_codes import is_condition_failure, is_not_found
from ..aws.kinesis import active_stream_summary, list_shards, stream_identity
from ..aws.stored import NULL_TYPE, absent
from ..aws.stream_ref import StreamRef
from ..aws.tables import Tables, ensure_tables_ready
from ..clock import now_ms, now_ns, sleep
from ..errors import KinsumerError
from . import clients_table, metadata_table
from .checkpoints_table import CheckpointRow
from .home_stream import establish_home_stream, stream_scope
from .kcl_leases import KclLease, checkpoint_item, is_lease_item, renewed_leases, select_leases
from .kcl_plan import (
    ImportCheck,
    ImportPlan,
    LeaseScan,
    StoredRows,
    check_shards,
    live_problem,
    plan_notes,
    plan_problems,
    plan_shards,
    renewed_problem,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kinesis import KinesisClient

__all__ = ["apply_import", "check_import", "plan_import", "scan_leases"]


def scan_leases(db: DynamoDBClient, table: str) -> LeaseScan:
    """Every lease of the KCL lease table ``table`` (strongly consistent). KinsumerError if it is not one."""
    try:
        schema = db.describe_table(TableName=table)["Table"].get("KeySchema", [])
    except botocore.exceptions.ClientError as exc:
        if is_not_found(exc):
            raise KinsumerError(
                f"KCL lease table {table!r} does not exist: name the table of the KCL application (KCL's "
                "applicationName, kclpy's applicationName property) and check the region (or endpoint)"
            ) from exc
        raise
    if [(k["AttributeName"], k["KeyType"]) for k in schema] != [("leaseKey", "HASH")]:
        keys = ", ".join(f"{k['AttributeName']} ({k['KeyType']})" for k in schema)
        raise KinsumerError(f"table {table!r} is keyed by {keys}, not leaseKey: it is not a KCL lease table")
    leases: dict[str, KclLease] = {}
    others = 0
    for page in db.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        for item in page.get("Items", []):
            if not is_lease_item(item):
                others += 1
                continue
            lease = KclLease.from_item(item)
            leases[lease.lease_key] = lease
    return LeaseScan(leases, others)


def plan_import(
    kinesis: KinesisClient,
    dynamodb: DynamoDBClient,
    lease_table: str,
    app: str,
    stream: str,
    *,
    failover_time: float,
    max_age: float,
    at_timestamp: int | None = None,
    force: bool = False,
    overwrite: bool = False,
    kcl_stream_identifier: str | None = None,
) -> ImportPlan:
    """The import of ``lease_table``'s leases of ``stream`` into ``app``, writing nothing. Unless ``force``, the
    lease table is read twice ``failover_time`` seconds apart, to find the leases KCL workers still renew.
    ``at_timestamp``: KCL's configured ``AT_TIMESTAMP`` (epoch ms); ``max_age``: seconds after which a silent
    kinsumer client counts as dead."""
    tables = Tables.for_application(app)
    ensure_tables_ready(dynamodb, tables)
    summary = active_stream_summary(kinesis, stream)
    identity = stream_identity(summary, stream)
    scan = scan_leases(dynamodb, lease_table)
    notes, problems = [], []
    if force:
        notes.append("--force: whether KCL workers still renew their leases was not checked")
    else:
        sleep(failover_time)
        before, scan = scan, scan_leases(dynamodb, lease_table)
        if renewed := renewed_leases(before.leases, scan.leases):
            problems.append(renewed_problem(renewed, failover_time))
    arn = str(summary.get("StreamARN", ""))
    name = StreamRef(stream, field="stream").name  # KCL's leases, and kinsumer's rows, know it by its name
    selection = select_leases(
        scan.leases.values(), stream_name=name, account_id=arn.split(":")[4] if arn.count(":") >= 5 else None,
        created_ms=int(identity.rsplit("@", 1)[1]), chosen=kcl_stream_identifier,
    )  # fmt: skip
    listing = {info.shard_id: info.parents for info in list_shards(kinesis, stream)}
    scope = stream_scope(dynamodb, tables, stream, identity)
    rows = _rows(dynamodb, tables.checkpoints)
    imported_at = now_ms()
    shards = plan_shards(
        selection, listing, rows, scope, imported_at=imported_at, at_timestamp=at_timestamp, overwrite=overwrite
    )
    notes += plan_notes(selection, shards, listing, scan, imported_at)
    problems += plan_problems(app, name, lease_table, selection, shards, listing)
    live = clients_table.live_clients(dynamodb, tables.clients, max_age)
    if live:
        problems.append(live_problem(app, live))
    return ImportPlan(
        lease_table, app, name, identity, scope.home, str(selection.identifier) if selection.identifier else None,
        imported_at, tuple(shards), tuple(notes), tuple(problems),
    )  # fmt: skip


def _rows(db: DynamoDBClient, table: str) -> StoredRows:
    """Every row of the checkpoints table (strongly consistent), with its LastUpdate as stored, by key."""
    rows: dict[str, tuple[CheckpointRow, int]] = {}
    for page in db.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        for item in page.get("Items", []):
            row = CheckpointRow.from_item(item)
            rows[row.shard_id] = (row, row.stored_last_update)
    return rows


def apply_import(dynamodb: DynamoDBClient, plan: ImportPlan, *, max_age: float) -> int:
    """Write the rows of ``plan`` that change, then delete the stream's shard cache if any did; returns how many.
    KinsumerError if the plan is refused, a client became live meanwhile, or a row changed since the plan."""
    if plan.problems:
        raise KinsumerError("the import is refused: " + "; ".join(plan.problems))
    tables = Tables.for_application(plan.app)
    live = clients_table.live_clients(dynamodb, tables.clients, max_age)
    if live:
        raise KinsumerError(live_problem(plan.app, live))
    if plan.writes and (establish_home_stream(dynamodb, tables, plan.stream) == plan.stream) != plan.home:
        raise KinsumerError(f"the home stream of {plan.app} was recorded after the plan was made: run the import again")
    for shard in plan.writes:
        assert shard.position is not None
        item = checkpoint_item(
            shard.key, shard.position, stream=plan.identity, parents=shard.parents, last_update_ns=now_ns(),
            finished_at=plan.imported_at,
        )  # fmt: skip
        if not _put(dynamodb, tables.checkpoints, item, shard.row_last_update):
            raise KinsumerError(
                f"the row of {shard.shard_id} changed while it was imported (a client took it?): stop every client "
                f"of {plan.app} and run the import again"
            )
    if plan.writes:
        metadata_table.delete_shard_cache(dynamodb, tables.metadata, plan.scope.cache_key)
    return len(plan.writes)


def _put(db: DynamoDBClient, table: str, item: dict[str, Any], seen_last_update: int | None) -> bool:
    """Put ``item`` if the row is still absent, or (``seen_last_update``) free and as read; False if not."""
    params: dict[str, Any] = {
        "TableName": table, "Item": item, "ConditionExpression": "attribute_not_exists(#shard)",
        "ExpressionAttributeNames": {"#shard": "Shard"},
    }  # fmt: skip
    if seen_last_update is not None:
        params["ConditionExpression"] = f"#lu = :seen AND {absent('#owner')}"
        params["ExpressionAttributeNames"] = {"#lu": "LastUpdate", "#owner": "OwnerID"}
        params["ExpressionAttributeValues"] = {":seen": {"N": str(seen_last_update)}, ":null": NULL_TYPE}
    try:
        db.put_item(**params)
    except botocore.exceptions.ClientError as exc:
        if is_condition_failure(exc):
            return False
        raise
    return True


def check_import(dynamodb: DynamoDBClient, plan: ImportPlan) -> ImportCheck:
    """Read the lease table and the rows again, and compare them (see :func:`~.kcl_plan.check_shards`)."""
    leases = scan_leases(dynamodb, plan.lease_table).leases
    return check_shards(plan, leases, _rows(dynamodb, Tables.for_application(plan.app).checkpoints))
