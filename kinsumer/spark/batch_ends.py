"""Where each shard of a micro-batch ended, kept in the application's metadata table.

One item per batch (``Key = spark|<run>|<batch>``) holds a map ``Ends`` of shard -> end
position, a map ``Counts`` of shard -> records, and per shard an attribute ``Stop|<shard>``
saying why its read ended there (see :class:`~.offsets.Stop`) and ``Behind|<shard>``, how far
the shard's tip was ahead of the read's last page (MillisBehindLatest, when the service said).
The driver creates the item when it plans the batch; an executor adds its shard's end with a
conditional write, so the first recorded end of a (batch, shard) is final and every replay of
that batch reads exactly the same records.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import botocore.exceptions

from ..aws.error_codes import is_condition_failure
from ..aws.tables import now_ms
from .offsets import ShardEnd, Stop

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["BatchEnds", "BatchLedger"]


class BatchLedger(Protocol):
    """Where each shard of each batch ended (:class:`BatchEnds` in DynamoDB, or :class:`~.path_ledger.PathLedger`)."""

    @property
    def table(self) -> str:
        """Where the ledger is, for messages."""
        ...

    def plan(self, batch: int) -> bool: ...

    def record(self, batch: int, shard: str, end: ShardEnd, count: int) -> bool: ...

    def ends(self, batch: int) -> dict[str, ShardEnd]: ...

    def forget(self, batch: int) -> None: ...


class BatchEnds:
    """The recorded ends of the batches of one run of a query."""

    def __init__(self, db: DynamoDBClient, table: str, run: str) -> None:
        self._db = db
        self.table = table
        self._run = run

    def _key(self, batch: int) -> dict[str, Any]:
        return {"Key": {"S": f"spark|{self._run}|{batch:012d}"}}

    def plan(self, batch: int) -> bool:
        """Create the batch's (empty) item unless it exists (a replay keeps what was recorded); True if new."""
        try:
            self._db.put_item(
                TableName=self.table,
                Item={**self._key(batch), "Ends": {"M": {}}, "Counts": {"M": {}}, "Planned": {"N": str(now_ms())}},
                ConditionExpression="attribute_not_exists(#k)",
                ExpressionAttributeNames={"#k": "Key"},
            )
        except botocore.exceptions.ClientError as exc:
            if not is_condition_failure(exc):
                raise
            return False
        return True

    def record(self, batch: int, shard: str, end: ShardEnd, count: int) -> bool:
        """Record where ``shard`` ended in ``batch``; False if an end was recorded already."""
        names = {"#e": "Ends", "#c": "Counts", "#s": shard, "#stop": f"Stop|{shard}"}
        values = {":end": {"S": end.position}, ":count": {"N": str(count)}, ":stop": {"S": end.stop.value}}
        update = "SET #e.#s = :end, #c.#s = :count, #stop = :stop"
        if end.behind is not None:
            names["#behind"], values[":behind"] = f"Behind|{shard}", {"N": str(end.behind)}
            update += ", #behind = :behind"
        try:
            self._db.update_item(
                TableName=self.table,
                Key=self._key(batch),
                UpdateExpression=update,
                ConditionExpression="attribute_exists(#e) AND attribute_not_exists(#e.#s)",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        except botocore.exceptions.ClientError as exc:
            if is_condition_failure(exc):
                return False
            raise
        return True

    def ends(self, batch: int) -> dict[str, ShardEnd]:
        """Every recorded end of ``batch``, by shard."""
        item = self._db.get_item(TableName=self.table, Key=self._key(batch), ConsistentRead=True).get("Item", {})
        ends = {}
        counts = item.get("Counts", {}).get("M", {})
        for shard, value in item.get("Ends", {}).get("M", {}).items():
            behind = item.get(f"Behind|{shard}", {}).get("N")
            stop = Stop(item.get(f"Stop|{shard}", {}).get("S", Stop.MORE.value))
            count = counts.get(shard, {}).get("N")
            ends[shard] = ShardEnd(
                value["S"], stop, None if behind is None else int(behind), None if count is None else int(count)
            )
        return ends

    def counts(self, batch: int) -> dict[str, int]:
        item = self._db.get_item(TableName=self.table, Key=self._key(batch), ConsistentRead=True).get("Item", {})
        return {shard: int(value["N"]) for shard, value in item.get("Counts", {}).get("M", {}).items()}

    def forget(self, batch: int) -> None:
        """Delete a batch that can no longer be replayed."""
        if batch >= 0:
            self._db.delete_item(TableName=self.table, Key=self._key(batch))
