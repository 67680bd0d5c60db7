"""SimDynamoDB: an in-memory DynamoDB that acts as a botocore DynamoDB client, on an injected clock.

It answers what kinsumer calls (``kinsumer/coordination/*_table.py``, ``kinsumer/aws/tables.py``,
``kinsumer/spark/batch_ends.py``, ``kinsumer/status.py``): CreateTable, DescribeTable, DeleteTable,
PutItem, GetItem, UpdateItem, DeleteItem, Scan, ``get_paginator("scan")``, and ``meta.events`` (botocore's
own emitter: ``before-parameter-build`` and ``after-call`` are emitted as a client does, so
``kinsumer.aws.call_watch`` counts the calls). What it takes from botocore itself: the parameter validation
(``validate=True``), the exception classes and the error response shape, the paginator.

DynamoDB's rules kept (see the modules for each model and its approximations): the attribute-value wire
format (numbers normalised as DynamoDB returns them); condition, filter, update and projection expressions
with their placeholders (:mod:`.expressions`); conditional failures (ConditionalCheckFailedException, with
``ReturnValuesOnConditionCheckFailure``); ReturnValues; the 400 KB item limit and the key limits
(:mod:`.values`, :mod:`.tables`); capacity units and throttling (:mod:`.capacity`); eventually consistent
reads (:mod:`.history`); Scan's 1 MB pages and ``Limit``, in hash order, as DynamoDB's partitions give them.

Not modeled: sort keys, indexes, Query, batch and transaction calls, TTL, streams, UpdateTable, a table's
CREATING/DELETING states (a table is ACTIVE at once and gone at once), botocore's own retries (an error
reaches the caller on the first attempt, as with ``max_attempts=1``). A parameter it does not model raises
NotImplementedError rather than being ignored.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Hashable
from typing import Any

import botocore.session
from botocore.paginate import Paginator

from .._client import ServiceClient
from .._errors import SimError, service_model, validation
from . import evaluate
from .capacity import Limits, Meter, read_units, write_units
from .expressions import Placeholders, parse_condition, parse_projection, parse_update
from .history import History
from .tables import Table, new_table, not_found, position
from .values import Item, check_item, copied, item_size

__all__ = ["MAX_ITEM_BYTES", "PAGE_BYTES", "SimDynamoDB"]

MAX_ITEM_BYTES = 400 * 1024
PAGE_BYTES = 1024 * 1024

_EXPRESSIONS = {"ExpressionAttributeNames", "ExpressionAttributeValues"}
_SUPPORTED: dict[str, set[str]] = {
    "CreateTable": {"TableName", "KeySchema", "AttributeDefinitions", "BillingMode", "ProvisionedThroughput",
                    "OnDemandThroughput", "Tags"},
    "DescribeTable": {"TableName"},
    "DeleteTable": {"TableName"},
    "PutItem": {"TableName", "Item", "ConditionExpression", "ReturnValues", "ReturnConsumedCapacity",
                "ReturnValuesOnConditionCheckFailure", *_EXPRESSIONS},
    "GetItem": {"TableName", "Key", "ConsistentRead", "ProjectionExpression", "ReturnConsumedCapacity",
                "ExpressionAttributeNames"},
    "BatchGetItem": {"RequestItems"},
    "UpdateItem": {"TableName", "Key", "UpdateExpression", "ConditionExpression", "ReturnValues",
                   "ReturnConsumedCapacity", "ReturnValuesOnConditionCheckFailure", *_EXPRESSIONS},
    "DeleteItem": {"TableName", "Key", "ConditionExpression", "ReturnValues", "ReturnConsumedCapacity",
                   "ReturnValuesOnConditionCheckFailure", *_EXPRESSIONS},
    "Scan": {"TableName", "ConsistentRead", "FilterExpression", "ProjectionExpression", "Limit", "ExclusiveStartKey",
             "ReturnConsumedCapacity", *_EXPRESSIONS},
}  # fmt: skip
_RETURN_VALUES = {
    "PutItem": {"NONE", "ALL_OLD"},
    "DeleteItem": {"NONE", "ALL_OLD"},
    "UpdateItem": {"NONE", "ALL_OLD", "ALL_NEW", "UPDATED_OLD", "UPDATED_NEW"},
}


@functools.cache
def _scan_pages() -> Any:
    """botocore's paginator model of Scan, loaded once (a session costs a tenth of a second)."""
    return botocore.session.get_session().get_paginator_model("dynamodb").get_paginator("Scan")


class SimDynamoDB(ServiceClient):
    """A DynamoDB client over in-memory tables. ``clock``: seconds (virtual time); ``staleness``: how old
    (seconds) an eventually consistent read may be, with ``stale_probability`` and ``seed`` (see
    :mod:`.history`); ``limits``: per table name, overriding what CreateTable gave (see :mod:`.capacity`)."""

    SERVICE = "dynamodb"
    SUPPORTED = _SUPPORTED

    def __init__(
        self,
        clock: Callable[[], float],
        *,
        staleness: float = 0.0,
        stale_probability: float = 0.5,
        seed: int = 0,
        limits: dict[str, Limits] | None = None,
        region: str = "us-east-1",
        account: str = "123456789012",
        validate: bool = True,
    ) -> None:
        super().__init__(region=region, account=account, validate=validate)
        self._clock = clock
        self._rng = random.Random(seed)
        self._history: dict[str, History] = {}
        self._staleness, self._stale_probability = staleness, stale_probability
        self._limits = dict(limits or {})
        self._tables: dict[str, Table] = {}
        self.meter = Meter()

    # -- the client's surface
    def create_table(self, **params: Any) -> dict[str, Any]:
        return self._call("CreateTable", params, self._create_table)

    def describe_table(self, **params: Any) -> dict[str, Any]:
        return self._call("DescribeTable", params, self._describe_table)

    def delete_table(self, **params: Any) -> dict[str, Any]:
        return self._call("DeleteTable", params, self._delete_table)

    def put_item(self, **params: Any) -> dict[str, Any]:
        return self._call("PutItem", params, self._put_item)

    def get_item(self, **params: Any) -> dict[str, Any]:
        return self._call("GetItem", params, self._get_item)

    def batch_get_item(self, **params: Any) -> dict[str, Any]:
        return self._call("BatchGetItem", params, self._batch_get_item)

    def update_item(self, **params: Any) -> dict[str, Any]:
        return self._call("UpdateItem", params, self._update_item)

    def delete_item(self, **params: Any) -> dict[str, Any]:
        return self._call("DeleteItem", params, self._delete_item)

    def scan(self, **params: Any) -> dict[str, Any]:
        return self._call("Scan", params, self._scan)

    def can_paginate(self, operation_name: str) -> bool:
        return operation_name == "scan"

    def get_paginator(self, operation_name: str) -> Paginator:  # type: ignore[type-arg]
        if operation_name != "scan":
            raise NotImplementedError(f"SimDynamoDB paginates scan only, not {operation_name}")
        return Paginator(self.scan, _scan_pages(), service_model().operation_model("Scan"))  # type: ignore[arg-type]

    def set_limits(self, table: str, limits: Limits) -> None:
        """Throughput limits for ``table`` from now on (its windows start afresh)."""
        with self._lock:
            self._limits[table] = limits
            if table in self._tables:
                self._tables[table].limits = limits
                self.meter.configure(table, limits)

    def items(self, table: str) -> list[Item]:
        """Every item of ``table`` as stored now (for tests and reports; no capacity consumed)."""
        with self._lock:
            return [copied(i) for i in self._tables[table].items.values()]

    def _failed(self, operation: str, params: dict[str, Any], error: SimError) -> None:
        self.meter.failed(params.get("TableName", ""), operation, self._clock(), error.code)

    def _table(self, name: str) -> Table:
        table = self._tables.get(name)
        if table is None:
            raise not_found()
        return table

    # -- tables
    def _create_table(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params["TableName"]
        if name in self._tables:
            raise SimError("ResourceInUseException", f"Table already exists: {name}")
        table = new_table(params, self._clock(), self._region, self._account, len(self._tables) + self._requests)
        table.limits = self._limits.get(name, table.limits)
        self._tables[name] = table
        self.meter.configure(name, table.limits)
        self._history[name] = History(self._staleness, self._stale_probability, self._rng)
        return {"TableDescription": copied(table.description)}

    def _describe(self, table: Table) -> dict[str, Any]:
        description = copied(table.description)
        description["ItemCount"] = len(table.items)
        description["TableSizeBytes"] = sum(item_size(i) for i in table.items.values())
        return description

    def _describe_table(self, params: dict[str, Any]) -> dict[str, Any]:
        table = self._tables.get(params["TableName"])
        if table is None:
            raise not_found(params["TableName"])
        return {"Table": self._describe(table)}

    def _delete_table(self, params: dict[str, Any]) -> dict[str, Any]:
        table = self._tables.pop(params["TableName"], None)
        if table is None:
            raise not_found(params["TableName"])
        description = self._describe(table)
        description["TableStatus"] = "DELETING"
        return {"TableDescription": description}

    # -- items
    def _expressions(self, params: dict[str, Any]) -> tuple[Placeholders, Any, Any, Any]:
        """The request's condition (or filter), update and projection, parsed; placeholders checked."""
        ph = Placeholders(params.get("ExpressionAttributeNames"), params.get("ExpressionAttributeValues"))
        condition = update = projection = None
        if "ConditionExpression" in params:
            condition = parse_condition(params["ConditionExpression"], "ConditionExpression", ph)
        if "FilterExpression" in params:
            condition = parse_condition(params["FilterExpression"], "FilterExpression", ph)
        if "UpdateExpression" in params:
            update = parse_update(params["UpdateExpression"], ph)
        if "ProjectionExpression" in params:
            projection = parse_projection(params["ProjectionExpression"], ph)
        ph.check_all_used()
        return ph, condition, update, projection

    def _return_values(self, operation: str, params: dict[str, Any]) -> str:
        wanted = params.get("ReturnValues", "NONE")
        if wanted not in _RETURN_VALUES[operation]:
            raise validation(f"ReturnValues can only be {' or '.join(sorted(_RETURN_VALUES[operation]))} for "
                             f"{operation}")  # fmt: skip
        return str(wanted)

    def _write(self, operation: str, params: dict[str, Any], table: Table, key: Hashable, condition: Any,
               after: Callable[[Item | None], Item | None]) -> tuple[Item | None, Item | None, float]:  # fmt: skip
        """One conditional write of ``key``: admission, condition, the new item (``after(old)``), accounts.
        Returns (old, new, units)."""
        now = self._clock()
        old = table.items.get(key)
        failed = condition is not None and not evaluate.holds(condition, old)
        new = None if failed else after(old)
        units = write_units(max(item_size(old), item_size(new)))
        self.meter.admit(table.name, table.arn, table.limits, [key], False, now)
        self.meter.charge(table.name, operation, units, {key: units}, False, now, table.limits)
        if failed:
            fail_old = params.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD"
            raise evaluate.condition_failed(old, fail_old)
        if new is None:
            table.items.pop(key, None)
        else:
            table.items[key] = new
        if (old is None) != (new is None):
            table.changed_keys()
        self._history[table.name].written(key, now, copied(old) if old else None, copied(new) if new else None)
        return old, new, units

    def _put_item(self, params: dict[str, Any]) -> dict[str, Any]:
        _, condition, _, _ = self._expressions(params)
        returning = self._return_values("PutItem", params)
        table = self._table(params["TableName"])
        item = check_item(params["Item"], "Item")
        key = table.key_in(item)
        if item_size(item) > MAX_ITEM_BYTES:
            raise validation("Item size has exceeded the maximum allowed size")
        old, _, units = self._write("PutItem", params, table, key, condition, lambda old: item)
        response = self._consumed(params, table, units)
        if returning == "ALL_OLD" and old is not None:
            response["Attributes"] = copied(old)
        return response

    def _update_item(self, params: dict[str, Any]) -> dict[str, Any]:
        _, condition, update, _ = self._expressions(params)
        returning = self._return_values("UpdateItem", params)
        table = self._table(params["TableName"])
        key = table.key_of(params["Key"])
        if update is not None:
            evaluate.check_update(update, (table.key,))

        def updated(old: Item | None) -> Item:
            base = table.key_item(key)
            new = evaluate.apply_update(update, old, base) if update else copied(old or base)
            if item_size(new) > MAX_ITEM_BYTES:
                raise validation("Item size to update has exceeded the maximum allowed size")
            return new

        old, new, units = self._write("UpdateItem", params, table, key, condition, updated)
        response = self._consumed(params, table, units)
        paths = update.paths() if update else []
        attributes = {
            "ALL_OLD": copied(old) if old else None,
            "ALL_NEW": copied(new) if new else None,
            "UPDATED_OLD": evaluate.project(old, paths) if old else None,
            "UPDATED_NEW": evaluate.project(new, paths) if new else None,
        }.get(returning)
        if attributes:
            response["Attributes"] = attributes
        return response

    def _delete_item(self, params: dict[str, Any]) -> dict[str, Any]:
        _, condition, _, _ = self._expressions(params)
        returning = self._return_values("DeleteItem", params)
        table = self._table(params["TableName"])
        key = table.key_of(params["Key"])
        old, _, units = self._write("DeleteItem", params, table, key, condition, lambda old: None)
        response = self._consumed(params, table, units)
        if returning == "ALL_OLD" and old is not None:
            response["Attributes"] = copied(old)
        return response

    def _read(self, table: Table, key: Hashable, consistent: bool, now: float) -> Item | None:
        latest = table.items.get(key)
        if consistent:
            return latest
        return self._history[table.name].read(key, now, latest)

    def _get_item(self, params: dict[str, Any]) -> dict[str, Any]:
        _, _, _, projection = self._expressions(params)
        table = self._table(params["TableName"])
        key = table.key_of(params["Key"])
        now, consistent = self._clock(), bool(params.get("ConsistentRead", False))
        item = self._read(table, key, consistent, now)
        units = read_units(item_size(item), consistent)
        self.meter.admit(table.name, table.arn, table.limits, [key], True, now)
        self.meter.charge(table.name, "GetItem", units, {key: units}, True, now, table.limits)
        response = self._consumed(params, table, units)
        if item is not None:
            response["Item"] = evaluate.project(item, projection) if projection else copied(item)
        return response

    def _batch_get_item(self, params: dict[str, Any]) -> dict[str, Any]:
        """Each key as a GetItem (units, limits); a key whose partition is out of capacity is left unprocessed,
        as DynamoDB does, and the throttling error is raised only if no key could be read."""
        now = self._clock()
        responses: dict[str, list[Item]] = {}
        unprocessed: dict[str, Any] = {}
        throttled: SimError | None = None
        read = 0  # keys read, of every table
        for name, request in params["RequestItems"].items():
            if set(request) - {"Keys", "ConsistentRead"}:
                raise NotImplementedError(f"SimDynamoDB does not model BatchGetItem's {sorted(request)}")
            table, consistent = self._table(name), bool(request.get("ConsistentRead", False))
            found: list[Item] = []
            left: list[Any] = []
            shares: dict[Hashable, float] = {}
            for key_item in request["Keys"]:
                key = table.key_of(key_item)
                try:
                    self.meter.admit(table.name, table.arn, table.limits, [key], True, now)
                except SimError as error:
                    throttled = error
                    left.append(key_item)
                    continue
                item = self._read(table, key, consistent, now)
                shares[key] = read_units(item_size(item), consistent)
                if item is not None:
                    found.append(copied(item))
            if shares:
                self.meter.charge(table.name, "BatchGetItem", sum(shares.values()), shares, True, now, table.limits)
            responses[name] = found
            if left:
                unprocessed[name] = {"Keys": left, "ConsistentRead": consistent}
            read += len(shares)
        if throttled is not None and not read:
            raise throttled
        return {"Responses": responses, "UnprocessedKeys": unprocessed}

    def _scan(self, params: dict[str, Any]) -> dict[str, Any]:
        _, condition, _, projection = self._expressions(params)
        table = self._table(params["TableName"])
        now, consistent = self._clock(), bool(params.get("ConsistentRead", False))
        limit = params.get("Limit")
        if limit is not None and limit < 1:
            raise validation("1 validation error detected: Value '0' at 'limit' failed to satisfy constraint: "
                             "Member must have value greater than or equal to 1")  # fmt: skip
        history = self._history[table.name]
        keys = table.order([] if consistent else list(history.keys()))
        if "ExclusiveStartKey" in params:
            start = position(table.key_of(params["ExclusiveStartKey"]))
            keys = [k for k in keys if position(k) > start]
        read: list[tuple[Hashable, Item, int]] = []
        total, last = 0, None
        for key in keys:
            item = self._read(table, key, consistent, now)
            if item is None:
                continue
            size = item_size(item)
            if read and total + size > PAGE_BYTES:
                last = read[-1][0]
                break
            read.append((key, item, size))
            total += size
            if limit is not None and len(read) == limit:
                last = key
                break
        units = read_units(total, consistent)
        self.meter.admit(table.name, table.arn, table.limits, [], True, now)
        shares = {key: units * size / total for key, _, size in read} if total else {}
        self.meter.charge(table.name, "Scan", units, shares, True, now, table.limits)
        matched = [item for _, item, _ in read if condition is None or evaluate.holds(condition, item)]
        items = [evaluate.project(i, projection) if projection else copied(i) for i in matched]
        response: dict[str, Any] = {"Items": items, "Count": len(items), "ScannedCount": len(read)}
        if last is not None:
            response["LastEvaluatedKey"] = table.key_item(last)
        response.update(self._consumed(params, table, units))
        return response

    def _consumed(self, params: dict[str, Any], table: Table, units: float) -> dict[str, Any]:
        wanted = params.get("ReturnConsumedCapacity", "NONE")
        if wanted == "NONE":
            return {}
        consumed: dict[str, Any] = {"TableName": table.name, "CapacityUnits": units}
        if wanted == "INDEXES":
            consumed["Table"] = {"CapacityUnits": units}
        return {"ConsumedCapacity": consumed}
