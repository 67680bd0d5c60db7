"""The checkpoints table: one row per shard, owned by at most one live client.

Row: ``Shard`` (hash key), ``SequenceNumber`` (string: Kinesis sequence numbers exceed
DynamoDB's 38 digits), ``SubSequenceNumber`` (inside a KPL aggregate: the index of the last
processed user record; absent when the whole Kinesis record is processed, and in rows of
versions before it), ``OwnerID``, ``OwnerName``, ``LastUpdate`` (epoch **nanoseconds**, as the Go
library writes it, so that a Go client counts a shard kinsumer reads as owned; rows of versions before
it hold epoch ms: read by magnitude, see :mod:`kinsumer.aws.stored`), ``Finished``
(epoch ms, set once the shard is closed and fully processed), ``ParentShardIds``, ``StartAt``
(epoch ms, the service's time: where a shard with no checkpoint starts when ``initial_position``
is LATEST or AT_TIMESTAMP, recorded by its first owner so that no later owner starts later),
``Stream`` (the identity of the stream the row's progress belongs to: a row of an earlier
incarnation of a stream created again under its name is never applied; rows without it, of
versions before it, count as the current stream's), and the crash-loop guard's
(:mod:`kinsumer.handling.careful`): ``PreviousOwner`` (set by each capture to the owner it took
the row from, empty for a free row: a non-empty one means that owner ended uncleanly),
``Handed`` (a ``process()`` owner's reservation) and ``Careful`` (an episode, JSON); and
``OwnerInstance``, the owner's process (the ``Instance`` of its client row) that captured the
row: a client started again under its ``client_id`` never releases its earlier process's rows,
which others take as a dead owner's. ``Retrying`` says what ``process()`` is calling again, and
``Paused`` since when its owner paused the shard (``Kinsumer.pause()``), ``BusySince`` since when
a handler call under way has run (once it has for long), ``Expired`` the records sent to the
sink as too old, ``OutsideRange`` the user records of KPL aggregates read outside the shard's
hash key range (delivered or dropped, ``Config.kpl_outside_shard``), and ``OldestArrival`` (epoch
ms) the arrival in the stream of the oldest record its owner held and had not finished with at its
last commit, all for ``kinsumer status``.

Capture is conditional on the row being free, ours, or exactly as read while its owner was
found dead (the caller decides that from the clients table: :mod:`.membership`); commit and
release are conditional on ``OwnerID = :me``, so a client that lost a shard can never
overwrite the new owner's checkpoint.

The Go library's rows (twitchscience/kinsumer: ``Shard``, ``SequenceNumber``, ``LastUpdate``,
``OwnerName``, ``Finished``, ``OwnerID``, ``LastUpdateRFC``, ``FinishedRFC``) are read as they are: its
NULL attributes count as absent, in reads and in conditions (:mod:`kinsumer.aws.stored`), and an empty
``SequenceNumber`` (its release of a shard never read) as none.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs
import botocore.exceptions

from ..aws.error_codes import error_code, is_condition_failure
from ..aws.stored import NULL_TYPE, absent, epoch_ms, present
from ..aws.tables import now_ms
from ..clock import now_ns
from ..handling.careful import NO_EPISODE
from ..reading.position import Position, StartPosition

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = [
    "BATCH_READ_KEYS",
    "CheckpointRow",
    "batch_reads_denied",
    "capture",
    "commit",
    "delete_rows",
    "guard",
    "note_paused",
    "note_retrying",
    "finished_among",
    "finished_shards",
    "load_rows",
    "read_row",
    "read_rows",
    "record_start",
    "release",
    "reset",
    "rewind",
]

_NAMES = {
    "#lag": "MillisBehindLatest",
    "#seq": "SequenceNumber",
    "#sub": "SubSequenceNumber",
    "#owner": "OwnerID",
    "#oname": "OwnerName",
    "#lu": "LastUpdate",
    "#fin": "Finished",
    "#parents": "ParentShardIds",
    "#start": "StartAt",
    "#stream": "Stream",
    "#prev": "PreviousOwner",
    "#inst": "OwnerInstance",
    "#retry": "Retrying",
    "#paused": "Paused",
    "#busy": "BusySince",
    "#expired": "Expired",
    "#outside": "OutsideRange",
    "#oldest": "OldestArrival",
    "#handed": "Handed",
    "#careful": "Careful",
}


@attrs.frozen
class CheckpointRow:
    shard_id: str
    sequence_number: str | None = None
    sub_sequence_number: int | None = None
    owner_id: str | None = None
    owner_name: str | None = None
    last_update: int = 0  # epoch ms, whichever unit the row stores
    finished: bool = False
    parent_shard_ids: tuple[str, ...] = ()
    millis_behind_latest: int | None = None  # as last committed by the owner
    start_at: int | None = None  # epoch ms: where the shard starts while it has no checkpoint
    stream: str | None = None  # the identity of the stream the row's progress belongs to
    previous_owner: str | None = None  # the owner the last capture took the row from (None: it was free)
    owner_instance: str | None = None  # the owner's process that captured it (rows of versions before it: None)
    retrying: str | None = None  # process() is calling a failing handler again: "attempt N: Error"
    handed: str | None = None  # the crash-loop guard's reservation (Reservation.to_text())
    careful: str | None = None  # the crash-loop guard's episode (Episode.to_json())
    paused: int | None = None  # epoch ms: the owner paused the shard (Kinsumer.pause()) then
    busy_since: int | None = None  # epoch ms: a process() handler call under way since then, for long
    expired: int = 0  # records process() sent to the sink as too old (max_record_age), this capture
    outside_range: int = 0  # user records of KPL aggregates outside the shard's hash key range, this capture
    oldest_arrival: int | None = None  # epoch ms: the arrival of the oldest record its owner held at its last commit
    #: LastUpdate as stored (ns, or ms in rows of earlier versions): a condition on the row as read compares it.
    stored_last_update: int = attrs.field(default=0, eq=False)

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> CheckpointRow:
        item = present(item)
        stored = int(item.get("LastUpdate", {}).get("N", "0"))
        return cls(
            shard_id=item["Shard"]["S"],
            sequence_number=item.get("SequenceNumber", {}).get("S") or None,
            sub_sequence_number=int(item["SubSequenceNumber"]["N"]) if "SubSequenceNumber" in item else None,
            owner_id=item.get("OwnerID", {}).get("S"),
            owner_name=item.get("OwnerName", {}).get("S"),
            last_update=epoch_ms(stored),
            finished="Finished" in item,
            parent_shard_ids=tuple(v["S"] for v in item.get("ParentShardIds", {}).get("L", [])),
            millis_behind_latest=int(item["MillisBehindLatest"]["N"]) if "MillisBehindLatest" in item else None,
            start_at=int(item["StartAt"]["N"]) if "StartAt" in item else None,
            stream=item.get("Stream", {}).get("S"),
            previous_owner=item.get("PreviousOwner", {}).get("S") or None,
            owner_instance=item.get("OwnerInstance", {}).get("S"),
            retrying=item.get("Retrying", {}).get("S"),
            handed=item.get("Handed", {}).get("S"),
            careful=item.get("Careful", {}).get("S"),
            paused=int(item["Paused"]["N"]) if "Paused" in item else None,
            busy_since=int(item["BusySince"]["N"]) if "BusySince" in item else None,
            expired=int(item.get("Expired", {}).get("N", "0")),
            outside_range=int(item.get("OutsideRange", {}).get("N", "0")),
            oldest_arrival=int(item["OldestArrival"]["N"]) if "OldestArrival" in item else None,
            stored_last_update=stored,
        )

    @property
    def resume_at(self) -> StartPosition | None:
        """Where reading the shard goes on: after its checkpoint, else at its recorded start; None
        if it has neither (it starts at ``initial_position``)."""
        if self.checkpoint is not None:
            return StartPosition.after_position(self.checkpoint)
        if self.start_at is not None:
            return StartPosition.at_timestamp(dt.datetime.fromtimestamp(self.start_at / 1000, dt.UTC))
        return None

    def foreign(self, stream: str) -> bool:
        """The row's progress belongs to another incarnation of the stream (``stream``: the current one)."""
        return self.stream is not None and bool(stream) and self.stream != stream

    def without_progress(self) -> CheckpointRow:
        """The row with nothing of its shard's progress: as if the shard was never read."""
        return attrs.evolve(
            self, sequence_number=None, sub_sequence_number=None, finished=False, start_at=None,
            millis_behind_latest=None, stream=None, handed=None, careful=None,
        )  # fmt: skip

    @property
    def checkpoint(self) -> Position | None:
        """Where the shard is processed up to, if anywhere."""
        if self.sequence_number is None:
            return None
        return self.sequence_number, self.sub_sequence_number


def _names(expression: str) -> dict[str, str]:
    return {k: v for k, v in _NAMES.items() if k in expression}


def read_row(db: DynamoDBClient, table: str, shard_id: str) -> CheckpointRow | None:
    """The shard's row (strongly consistent), or None."""
    item = db.get_item(TableName=table, Key={"Shard": {"S": shard_id}}, ConsistentRead=True).get("Item")
    return CheckpointRow.from_item(item) if item else None


#: Keys of one BatchGetItem, at most (DynamoDB's limit).
BATCH_READ_KEYS = 100


def read_rows(
    db: DynamoDBClient, table: str, shard_ids: Sequence[str]
) -> tuple[dict[str, CheckpointRow | None], list[str]]:
    """The rows of up to :data:`BATCH_READ_KEYS` shards in one BatchGetItem (strongly consistent): each
    shard's row or None, and the shards DynamoDB left unprocessed (to read again)."""
    keys = [{"Shard": {"S": shard_id}} for shard_id in shard_ids]
    answer = db.batch_get_item(RequestItems={table: {"Keys": keys, "ConsistentRead": True}})
    left = answer.get("UnprocessedKeys") or {}
    unprocessed = [key["Shard"]["S"] for key in (left[table]["Keys"] if table in left else [])]
    rows: dict[str, CheckpointRow | None] = {shard_id: None for shard_id in shard_ids if shard_id not in unprocessed}
    for item in answer.get("Responses", {}).get(table, []):
        rows[item["Shard"]["S"]] = CheckpointRow.from_item(item)
    return rows, unprocessed


def capture(
    db: DynamoDBClient,
    table: str,
    shard_id: str,
    *,
    owner_id: str,
    owner_name: str,
    parents: tuple[str, ...] = (),
    taking: CheckpointRow | None = None,
    stream: str = "",
    instance: str = "",
) -> CheckpointRow | None:
    """Take the shard if it is unfinished (or finished in another incarnation of the stream) and
    free or ours, or still exactly ``taking`` (a row read while its owner was found dead).
    Returns the row as taken: check :meth:`CheckpointRow.foreign` before applying it.

    A single conditional UpdateItem that returns the new row, so the checkpoint we start
    from is exactly the one stored when we took ownership. A row without ``Stream`` gets
    ``stream``; one with another keeps it (:func:`reset` clears the row, then sets it).
    """
    update = "SET #prev = if_not_exists(#owner, :free), #owner = :me, #oname = :name, #lu = :lu, #inst = :inst"
    values: dict[str, Any] = {
        ":me": {"S": owner_id}, ":name": {"S": owner_name}, ":lu": {"N": str(now_ns())}, ":free": {"S": ""},
        ":inst": {"S": instance}, ":null": NULL_TYPE,
    }  # fmt: skip
    unfinished = absent("#fin")
    if stream:
        update += ", #stream = if_not_exists(#stream, :stream)"
        values[":stream"] = {"S": stream}
        unfinished = f"({unfinished} OR #stream <> :stream)"
    if parents:
        update += ", #parents = :parents"
        values[":parents"] = {"L": [{"S": p} for p in parents]}
    taken = ""
    if taking is not None and taking.owner_id is not None:  # unchanged since read: its owner wrote nothing since
        taken = " OR (#owner = :prev AND #lu = :prevlu)"
        values[":prev"] = {"S": taking.owner_id}
        values[":prevlu"] = {"N": str(taking.stored_last_update)}
    update += " REMOVE #paused, #busy, #expired, #outside, #oldest"  # its owner's: the new one stores its own
    condition = f"{unfinished} AND ({absent('#owner')} OR #owner = :me{taken})"
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
    """``update`` if the row is ``owner_id``'s; it may use ``:lu`` (LastUpdate, epoch ns) and ``:now`` (epoch ms)."""
    values = {**values, ":me": {"S": owner_id}, ":lu": {"N": str(now_ns())}}
    if ":now" in update:
        values[":now"] = {"N": str(now_ms())}
    return _conditional_update(db, table, shard_id, update, "#owner = :me", values) is not None


def _owner_update(
    checkpoint: Position | None, sets: list[str], removes: list[str], values: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """An owner's update expression: LastUpdate, the checkpoint if there is one, and ``sets`` / ``removes``."""
    sets = ["#lu = :lu", *sets]
    if checkpoint is not None:
        sequence_number, sub_sequence = checkpoint
        sets.append("#seq = :seq")
        values = {**values, ":seq": {"S": sequence_number}}
        if sub_sequence is None:
            removes = [*removes, "#sub"]
        else:
            sets.append("#sub = :sub")
            values[":sub"] = {"N": str(sub_sequence)}
    update = "SET " + ", ".join(sets)
    if removes:
        update += " REMOVE " + ", ".join(removes)
    return update, values


def commit(
    db: DynamoDBClient,
    table: str,
    shard_id: str,
    *,
    owner_id: str,
    checkpoint: Position | None,
    millis_behind_latest: int | None = None,
    handed: str | None = None,
    busy_since: int | None = None,
    expired: int = 0,
    oldest_arrival: int | None = None,
    outside_range: int = 0,
) -> bool:
    """Refresh our lease and store ``checkpoint`` (and the lag, and the crash-loop guard's
    reservation) if given; and for operators since when a handler call under way has run, if it has
    for long (removed otherwise), the arrival of the oldest record held (removed if none), and the
    records sent to the sink as too old, and the user records read outside the shard's range. False: not ours."""
    sets, values, removes = [], {}, []
    if millis_behind_latest is not None:
        sets.append("#lag = :lag")
        values[":lag"] = {"N": str(millis_behind_latest)}
    if handed is not None:
        sets.append("#handed = :handed")
        values[":handed"] = {"S": handed}
    if busy_since is not None:
        sets.append("#busy = :busy")
        values[":busy"] = {"N": str(busy_since)}
    else:
        removes.append("#busy")
    if oldest_arrival is not None:
        sets.append("#oldest = :oldest")
        values[":oldest"] = {"N": str(oldest_arrival)}
    else:
        removes.append("#oldest")
    _counts(sets, values, expired, outside_range)
    update, values = _owner_update(checkpoint, sets, removes, values)
    return _owned_update(db, table, shard_id, owner_id, update, values)


def guard(
    db: DynamoDBClient,
    table: str,
    shard_id: str,
    *,
    owner_id: str,
    checkpoint: Position | None,
    careful: str,
    handed: str | None = None,
) -> bool:
    """Store the crash-loop guard's episode (``NO_EPISODE``: remove it) with ``checkpoint``, and a
    reservation if given. False: not ours."""
    sets, removes, values = [], [], {}
    if careful == NO_EPISODE:
        removes.append("#careful")
    else:
        sets.append("#careful = :careful")
        values[":careful"] = {"S": careful}
    if handed is not None:
        sets.append("#handed = :handed")
        values[":handed"] = {"S": handed}
    update, values = _owner_update(checkpoint, sets, removes, values)
    return _owned_update(db, table, shard_id, owner_id, update, values)


def reset(
    db: DynamoDBClient, table: str, shard_id: str, *, owner_id: str, stream: str, parents: tuple[str, ...]
) -> bool:
    """Clear what the row holds of another incarnation of the stream, and stamp ours. False: not ours."""
    sets = ["#stream = :stream", "#lu = :lu"]
    values: dict[str, Any] = {":stream": {"S": stream}}
    removes = ["#seq", "#sub", "#fin", "#start", "#lag", "#handed", "#careful"]
    if parents:
        sets.append("#parents = :parents")
        values[":parents"] = {"L": [{"S": p} for p in parents]}
    else:
        removes.append("#parents")
    update = f"SET {', '.join(sets)} REMOVE {', '.join(removes)}"
    return _owned_update(db, table, shard_id, owner_id, update, values)


def rewind(
    db: DynamoDBClient,
    table: str,
    shard_id: str,
    *,
    start_at: int,
    stream: str,
    parents: tuple[str, ...],
    seen_owner: str | None,
) -> bool:
    """An operator's reset: the shard starts over at ``start_at`` (epoch ms; 0: its trim horizon), its
    checkpoint, Finished and ownership removed. Made if the row is absent, free, or still held by
    ``seen_owner`` (a client found dead); False otherwise (a client took it meanwhile)."""
    sets = ["#start = :start", "#stream = :stream", "#lu = :lu"]
    values: dict[str, Any] = {
        ":start": {"N": str(start_at)}, ":stream": {"S": stream}, ":lu": {"N": str(now_ns())}, ":null": NULL_TYPE,
    }  # fmt: skip
    removes = ["#seq", "#sub", "#fin", "#lag", "#handed", "#careful", "#retry", "#owner", "#oname", "#prev", "#inst"]
    if parents:
        sets.append("#parents = :parents")
        values[":parents"] = {"L": [{"S": p} for p in parents]}
    condition = absent("#owner")
    if seen_owner is not None:
        condition += " OR #owner = :seen"
        values[":seen"] = {"S": seen_owner}
    update = f"SET {', '.join(sets)} REMOVE {', '.join(removes)}"
    return _conditional_update(db, table, shard_id, update, condition, values) is not None


def record_start(db: DynamoDBClient, table: str, shard_id: str, *, owner_id: str, start_at: int) -> bool:
    """Store where the shard starts while it has no checkpoint (epoch ms). False: not ours."""
    return _owned_update(
        db, table, shard_id, owner_id, "SET #start = :start, #lu = :lu", {":start": {"N": str(start_at)}}
    )


def note_paused(db: DynamoDBClient, table: str, shard_id: str, *, owner_id: str, paused: bool) -> bool:
    """Store that the owner paused the shard (or no longer does), for ``kinsumer status``. False: not ours."""
    if not paused:
        return _owned_update(db, table, shard_id, owner_id, "SET #lu = :lu REMOVE #paused", {})
    return _owned_update(db, table, shard_id, owner_id, "SET #lu = :lu, #paused = :now", {})


def note_retrying(db: DynamoDBClient, table: str, shard_id: str, *, owner_id: str, retrying: str | None) -> bool:
    """Store what ``process()`` is retrying (None: nothing any more), for ``kinsumer status``. False: not ours."""
    if retrying is None:
        return _owned_update(db, table, shard_id, owner_id, "SET #lu = :lu REMOVE #retry", {})
    return _owned_update(db, table, shard_id, owner_id, "SET #lu = :lu, #retry = :retry", {":retry": {"S": retrying}})


def _counts(sets: list[str], values: dict[str, Any], expired: int, outside_range: int) -> None:
    """Add the capture's counts for operators (``Expired``, ``OutsideRange``) that are not 0 to an owner's update."""
    for name, count in (("expired", expired), ("outside", outside_range)):
        if count:
            sets.append(f"#{name} = :{name}")
            values[f":{name}"] = {"N": str(count)}


def release(
    db: DynamoDBClient,
    table: str,
    shard_id: str,
    *,
    owner_id: str,
    checkpoint: Position | None,
    finished: bool = False,
    careful: str | None = None,
    expired: int = 0,
    outside_range: int = 0,
) -> bool:
    """Give the shard up, storing the final checkpoint (and Finished). False: not ours any more.

    A clean release leaves no reservation (nothing is in a handler); a crash-loop guard's episode
    goes on with the next owner, stored as ``careful`` (its marker cleared), if given.
    """
    sets, values = ["#fin = :now"] if finished else [], {}
    if careful is not None:
        sets.append("#careful = :careful")
        values[":careful"] = {"S": careful}
    _counts(sets, values, expired, outside_range)
    removes = ["#owner", "#oname", "#handed", "#retry", "#paused", "#busy", "#oldest"]
    update, values = _owner_update(checkpoint, sets, removes, values)
    return _owned_update(db, table, shard_id, owner_id, update, values)


def batch_reads_denied(exc: botocore.exceptions.ClientError, table: str, instead: str, log: logging.Logger) -> None:
    """Raise ``exc`` again unless it says the IAM policy does not allow BatchGetItem; if it does, warn on ``log``
    that ``instead`` is done (the caller does it from now on)."""
    if error_code(exc) != "AccessDeniedException":
        raise exc
    log.warning(
        "the IAM policy does not allow dynamodb:BatchGetItem on %s: %s (add the action, see docs/iam.md)",
        table,
        instead,
    )


def finished_among(db: DynamoDBClient, table: str, shard_ids: Sequence[str], stream: str) -> set[str]:
    """Those of ``shard_ids`` whose rows say Finished for the incarnation ``stream`` (strongly consistent),
    read :data:`BATCH_READ_KEYS` to a BatchGetItem. A row DynamoDB leaves unprocessed counts as not finished
    (read again at the next refresh): a shard is never taken as finished without its row saying so."""
    finished: set[str] = set()
    for start in range(0, len(shard_ids), BATCH_READ_KEYS):
        rows, _ = read_rows(db, table, shard_ids[start : start + BATCH_READ_KEYS])
        finished.update(key for key, row in rows.items() if row and row.finished and not row.foreign(stream))
    return finished


def load_rows(db: DynamoDBClient, table: str) -> dict[str, CheckpointRow]:
    """Every row of the table (strongly consistent), by shard ID."""
    rows: dict[str, CheckpointRow] = {}
    for page in db.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        for item in page.get("Items", []):
            row = CheckpointRow.from_item(item)
            rows[row.shard_id] = row
    return rows


def finished_shards(db: DynamoDBClient, table: str, stream: str) -> set[str]:
    """The shards whose rows say Finished, for the current incarnation ``stream`` (strongly consistent).

    The leader's scan: it reads three attributes of each row, not the whole row.
    """
    finished: set[str] = set()
    pages = db.get_paginator("scan").paginate(
        TableName=table, ConsistentRead=True, ProjectionExpression="#shard, #fin, #stream",
        ExpressionAttributeNames={"#shard": "Shard", "#fin": "Finished", "#stream": "Stream"},
    )  # fmt: skip
    for page in pages:
        for item in page.get("Items", []):
            row = CheckpointRow.from_item(item)
            if row.finished and not row.foreign(stream):
                finished.add(row.shard_id)
    return finished


def recorded_stream_name(db: DynamoDBClient, table: str) -> str | None:
    """The name of the stream a row of the table's first page records (``Stream``), if one does: the
    stream of an application whose tables predate the record of its home stream."""
    page = db.scan(
        TableName=table, Limit=50, ProjectionExpression="#stream", ExpressionAttributeNames={"#stream": "Stream"}
    )
    for item in page.get("Items", []):
        identity = item.get("Stream", {}).get("S", "")
        if identity:
            return identity.rsplit("@", 1)[0].rsplit("/", 1)[-1]  # ARN@ms; the ARN ends in stream/<name>
    return None


def delete_rows(db: DynamoDBClient, table: str, shard_ids: list[str]) -> None:
    """Delete finished rows (of shards trimmed from the stream)."""
    for shard_id in shard_ids:
        try:
            db.delete_item(
                TableName=table,
                Key={"Shard": {"S": shard_id}},
                ConditionExpression=f"NOT {absent('#fin')}",
                ExpressionAttributeNames={"#fin": "Finished"},
                ExpressionAttributeValues={":null": NULL_TYPE},
            )
        except botocore.exceptions.ClientError as exc:
            if not is_condition_failure(exc):
                raise
