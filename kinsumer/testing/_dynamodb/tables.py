"""A simulated table: its description, its items, their keys and scan order."""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._errors import SimError, validation
from .capacity import Limits
from .values import Item, check_value, key_error

__all__ = ["MAX_HASH_KEY_BYTES", "Table", "new_table"]

MAX_HASH_KEY_BYTES = 2048


@dataclass
class Table:
    name: str
    key: str  # the hash key's name
    key_type: str  # S, N or B
    description: dict[str, Any]
    limits: Limits
    items: dict[Hashable, Item] = field(default_factory=dict)
    _order: list[Hashable] | None = None

    @property
    def arn(self) -> str:
        return str(self.description["TableArn"])

    def key_of(self, key: Mapping[str, Any]) -> Hashable:
        """The stored key of a request's ``Key`` (exactly the table's key attribute)."""
        if set(key) != {self.key} or next(iter(key[self.key]), None) != self.key_type:
            raise validation("The provided key element does not match the schema")
        return self._checked(check_value(key[self.key], self.key))

    def key_in(self, item: Item) -> Hashable:
        """The stored key of an item to put."""
        value = item.get(self.key)
        if value is None:
            raise key_error(f"Missing the key {self.key} in the item")
        kind = next(iter(value))
        if kind != self.key_type:
            raise key_error(f"Type mismatch for key {self.key} expected: {self.key_type} actual: {kind}")
        return self._checked(value)

    def _checked(self, value: dict[str, Any]) -> Hashable:
        content = value[self.key_type]
        if content in ("", b""):
            raise key_error(f"An AttributeValue may not contain an empty string. Key: {self.key}")
        size = len(content) if isinstance(content, bytes) else len(str(content).encode())
        if size > MAX_HASH_KEY_BYTES:
            raise key_error(f"Size of hashkey has exceeded the maximum size limit of {MAX_HASH_KEY_BYTES} bytes")
        return content  # type: ignore[no-any-return]

    def key_item(self, key: Hashable) -> Item:
        return {self.key: {self.key_type: key}}

    def order(self, extra: list[Hashable]) -> list[Hashable]:
        """Scan order: by a hash of the key, as DynamoDB's partitions order it (not insertion order)."""
        if self._order is None:
            self._order = sorted(self.items, key=_position)
        if not extra:
            return self._order
        return sorted(set(self._order) | set(extra), key=_position)

    def changed_keys(self) -> None:
        self._order = None


def _position(key: Hashable) -> bytes:
    return hashlib.md5(repr(key).encode(), usedforsecurity=False).digest()


def position(key: Hashable) -> bytes:
    return _position(key)


def new_table(params: Mapping[str, Any], now: float, region: str, account: str, serial: int) -> Table:
    """A table as CreateTable makes it (ACTIVE at once), after DynamoDB's checks of the parameters."""
    name = params["TableName"]
    schema = list(params["KeySchema"])
    definitions = {d["AttributeName"]: d["AttributeType"] for d in params["AttributeDefinitions"]}
    if [k["KeyType"] for k in schema] == ["HASH", "RANGE"]:
        raise NotImplementedError("SimDynamoDB models hash keys only (kinsumer's tables have no sort key)")
    if [k["KeyType"] for k in schema] != ["HASH"]:
        raise validation("Invalid KeySchema: The first KeySchemaElement is not a HASH key type")
    key = schema[0]["AttributeName"]
    if set(definitions) != {key}:
        raise key_error("Number of attributes in KeySchema does not exactly match number of attributes defined in "
                        "AttributeDefinitions")  # fmt: skip
    billing = params.get("BillingMode", "PROVISIONED")
    throughput = params.get("ProvisionedThroughput")
    if billing == "PROVISIONED" and throughput is None:
        raise key_error(
            "ReadCapacityUnits and WriteCapacityUnits must both be specified when BillingMode is PROVISIONED"
        )
    if billing == "PAY_PER_REQUEST" and throughput is not None:
        raise key_error("Neither ReadCapacityUnits nor WriteCapacityUnits can be specified when BillingMode is "
                        "PAY_PER_REQUEST")  # fmt: skip
    on_demand = params.get("OnDemandThroughput", {})
    limits = Limits(
        provisioned_read=float(throughput["ReadCapacityUnits"]) if throughput else None,
        provisioned_write=float(throughput["WriteCapacityUnits"]) if throughput else None,
        on_demand_read=_positive(on_demand.get("MaxReadRequestUnits")),
        on_demand_write=_positive(on_demand.get("MaxWriteRequestUnits")),
    )
    description: dict[str, Any] = {
        "AttributeDefinitions": [{"AttributeName": key, "AttributeType": definitions[key]}],
        "TableName": name,
        "KeySchema": [{"AttributeName": key, "KeyType": "HASH"}],
        "TableStatus": "ACTIVE",
        "CreationDateTime": dt.datetime.fromtimestamp(now, dt.UTC),
        "ProvisionedThroughput": {
            "NumberOfDecreasesToday": 0,
            "ReadCapacityUnits": int(throughput["ReadCapacityUnits"]) if throughput else 0,
            "WriteCapacityUnits": int(throughput["WriteCapacityUnits"]) if throughput else 0,
        },
        "TableSizeBytes": 0,
        "ItemCount": 0,
        "TableArn": f"arn:aws:dynamodb:{region}:{account}:table/{name}",
        "TableId": f"00000000-0000-4000-8000-{serial:012d}",
        "BillingModeSummary": {"BillingMode": billing},
        "DeletionProtectionEnabled": False,
    }
    if on_demand:
        description["OnDemandThroughput"] = dict(on_demand)
    return Table(name, key, definitions[key], description, limits)


def _positive(value: Any) -> float | None:
    return float(value) if value is not None and value > 0 else None


def not_found(name: str | None = None) -> SimError:
    suffix = f": Table: {name} not found" if name is not None else ""
    return SimError("ResourceNotFoundException", f"Requested resource not found{suffix}")
