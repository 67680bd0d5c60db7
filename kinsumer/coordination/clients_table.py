"""The clients table: heartbeats and the sorted list of live clients.

Row: ``ID`` (hash key), ``Name``, ``LastUpdate`` (epoch ms), ``Host``, ``Pid``,
``Instance`` (random, one per run of a Kinsumer: tells two processes that use one fixed
``client_id`` apart), ``Reading`` (how the client reads its shards: ``polling`` or
``fan-out:<consumer name>``; for operators), ``CacheVersion`` (the version of the shard cache the client last read
or wrote: the others read the cache only when a live client has a newer one), ``Leaving``
(set while a stopping client hands its shards off: it gets no shards, yet its shards are not
taken from it), ``Streams`` (the streams the client lists, when it lists more than one; a row
without it lists only the application's home stream: see :mod:`.streams`); in the leader's row
only, ``Roster``, ``RosterAt`` and ``SilentUntil`` (its :class:`Headline`: see :mod:`.roster`).

A client writes its row only while it holds it: the first heartbeat (:func:`claim`) takes a
free, stale or given-up row; the later ones (:func:`heartbeat`) only a row of its instance.

A client of the Go library (twitchscience/kinsumer) writes ``ID``, ``Name``, ``LastUpdate`` in epoch
nanoseconds and ``LastUpdateRFC`` in the same table: such a row reads as a :class:`ClientRow` with ``go``
set (see :mod:`kinsumer.aws.stored` for the rule), never as one of kinsumer's clients.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING, Any

import attrs
import botocore.exceptions

from ..aws.error_codes import is_condition_failure
from ..aws.stored import epoch_ms, is_nanoseconds, present, stored_cutoff
from ..aws.tables import now_ms
from ..config import DEFAULT_GO_CLIENT_MAX_AGE
from ..errors import TableConflict

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = [
    "ClientRow", "Headline", "all_clients", "claim", "deregister", "heartbeat", "live_clients", "read_client",
    "reap_clients", "this_host",
]  # fmt: skip

_HOST = socket.gethostname()


@attrs.frozen
class Headline:
    """What the leader's row says of the roster it published (see :mod:`.roster`)."""

    digest: str
    made_at: int  # epoch ms of the leader's scan the roster comes from
    silent_until: int = 0  # epoch ms at which the first silent live client counts as dead; 0: none is


@attrs.frozen
class ClientRow:
    id: str
    name: str
    last_update: int  # epoch ms of the last heartbeat
    host: str = ""
    pid: int = 0
    cache_version: int = 0
    leaving: bool = False
    instance: str = ""
    reading: str = "polling"  # rows of versions before it was written: polling
    #: The streams the client lists; () for one stream, the home stream (see :mod:`.streams`).
    streams: tuple[str, ...] = ()
    #: The leader's account of the roster (:mod:`.roster`); None in other rows.
    headline: Headline | None = None
    #: The row is a client of the Go library's (twitchscience/kinsumer), not of kinsumer's.
    go: bool = False

    def live_at(self, now_ms: int, max_age: float) -> bool:
        """The one rule of a live client: its last heartbeat is less than ``max_age`` seconds old at ``now_ms``
        (``Config.client_record_max_age`` for kinsumer's clients, ``go_client_max_age`` for the Go library's)."""
        return self.last_update > now_ms - int(max_age * 1000)


def this_host() -> str:
    return _HOST


def heartbeat(
    db: DynamoDBClient,
    table: str,
    client_id: str,
    name: str,
    instance: str,
    cache_version: int = 0,
    *,
    leaving: bool = False,
    reading: str = "polling",
    streams: tuple[str, ...] = (),
    headline: Headline | None = None,
) -> ClientRow | None:
    """Refresh this client's row; the other instance's row instead if one took it over (nothing written)."""
    item = _item(client_id, name, instance, cache_version, leaving, reading, streams)
    if headline is not None:
        item["Roster"] = {"S": headline.digest}
        item["RosterAt"] = {"N": str(headline.made_at)}
        item["SilentUntil"] = {"N": str(headline.silent_until)}
    return _put(db, table, item, "Instance = :instance", {})


def claim(
    db: DynamoDBClient,
    table: str,
    client_id: str,
    name: str,
    instance: str,
    *,
    stale_ms: int,
    replacing: int = -1,
    reading: str = "polling",
    streams: tuple[str, ...] = (),
) -> ClientRow | None:
    """The first heartbeat: write the row if it is free, ours, last updated before ``stale_ms`` (epoch ms),
    or last updated at ``replacing`` (a row of a dead process); else return the row that holds it."""
    values = {":stale": {"N": str(stale_ms)}, ":seen": {"N": str(replacing)}}
    condition = "Instance = :instance OR LastUpdate < :stale OR LastUpdate = :seen"
    return _put(db, table, _item(client_id, name, instance, 0, False, reading, streams), condition, values)


def _item(
    client_id: str, name: str, instance: str, cache_version: int, leaving: bool, reading: str, streams: tuple[str, ...]
) -> dict[str, Any]:
    item: dict[str, Any] = {
        "ID": {"S": client_id},
        "Name": {"S": name},
        "LastUpdate": {"N": str(now_ms())},
        "Host": {"S": _HOST},
        "Pid": {"N": str(os.getpid())},
        "Instance": {"S": instance},
        "CacheVersion": {"N": str(cache_version)},
        "Reading": {"S": reading},
    }
    if leaving:
        item["Leaving"] = {"BOOL": True}
    if len(streams) > 1:
        item["Streams"] = {"L": [{"S": stream} for stream in streams]}
    return item


def _put(
    db: DynamoDBClient, table: str, item: dict[str, Any], condition: str, values: dict[str, Any]
) -> ClientRow | None:
    """Put ``item`` if its row is absent or ``condition`` holds; else the row that is there."""
    for _ in range(3):  # a row deleted between the put and the read: put again
        try:
            db.put_item(
                TableName=table,
                Item=item,
                ConditionExpression=f"attribute_not_exists(ID) OR {condition}",
                ExpressionAttributeValues={":instance": item["Instance"], **values},
            )
            return None
        except botocore.exceptions.ClientError as exc:
            if not is_condition_failure(exc):
                raise
        found = db.get_item(TableName=table, Key={"ID": item["ID"]}, ConsistentRead=True).get("Item")
        if found is not None:
            return _row(found)
    raise TableConflict(
        f"the row of client {item['ID']['S']} in {table} kept changing under this client's writes (deleted and "
        "written again each time): another process writes it; check that no two processes share a client_id"
    )


def deregister(db: DynamoDBClient, table: str, client_id: str, instance: str) -> None:
    """Delete this client's row (a clean stop), so the others rebalance at once; not another instance's."""
    try:
        db.delete_item(
            TableName=table,
            Key={"ID": {"S": client_id}},
            ConditionExpression="Instance = :instance",
            ExpressionAttributeValues={":instance": {"S": instance}},
        )
    except botocore.exceptions.ClientError as exc:
        if not is_condition_failure(exc):
            raise


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
        rows += [_row(item) for item in page.get("Items", [])]
    return rows


def _row(item: dict[str, Any]) -> ClientRow:
    item = present(item)
    stored = int(item.get("LastUpdate", {}).get("N", "0"))
    headline = None
    if "Roster" in item:
        made_at, silent = int(item.get("RosterAt", {}).get("N", "0")), int(item.get("SilentUntil", {}).get("N", "0"))
        headline = Headline(item["Roster"]["S"], made_at, silent)
    return ClientRow(
        id=item["ID"]["S"],
        name=item.get("Name", {}).get("S", ""),
        last_update=epoch_ms(stored),
        host=item.get("Host", {}).get("S", ""),
        pid=int(item.get("Pid", {}).get("N", "0")),
        cache_version=int(item.get("CacheVersion", {}).get("N", "0")),
        leaving=bool(item.get("Leaving", {}).get("BOOL", False)),
        instance=item.get("Instance", {}).get("S", ""),
        reading=item.get("Reading", {}).get("S", "polling"),
        streams=tuple(v["S"] for v in item.get("Streams", {}).get("L", [])),
        headline=headline,
        go=is_nanoseconds(stored),
    )


def read_client(db: DynamoDBClient, table: str, client_id: str, *, consistent: bool = True) -> ClientRow | None:
    """One client's row, if there is one (an eventually consistent read costs half: it may miss the last write)."""
    item = db.get_item(TableName=table, Key={"ID": {"S": client_id}}, ConsistentRead=consistent).get("Item")
    return _row(item) if item else None


def all_clients(db: DynamoDBClient, table: str) -> list[ClientRow]:
    """Every row, live or not, sorted by ID."""
    return sorted(_scan(db, table), key=lambda r: r.id)


def live_clients(
    db: DynamoDBClient, table: str, max_age: float, go_max_age: float = DEFAULT_GO_CLIENT_MAX_AGE
) -> list[ClientRow]:
    """Clients that heartbeated within ``max_age`` seconds, and the Go library's within ``go_max_age``, sorted by ID
    (a Go row, in nanoseconds, passes the scan's filter in ms: each is judged here)."""
    now = now_ms()
    rows = _scan(db, table, "#lu > :cutoff", now - int(max_age * 1000))
    live = [r for r in rows if r.last_update > now - int((go_max_age if r.go else max_age) * 1000)]
    return sorted(live, key=lambda r: r.id)


def reap_clients(db: DynamoDBClient, table: str, older_than: float) -> int:
    """Delete rows silent for more than ``older_than`` seconds (the Go library's too); returns how many."""
    cutoff = now_ms() - int(older_than * 1000)
    dead = [row for row in all_clients(db, table) if row.last_update < cutoff]
    reaped = 0
    for row in dead:
        values: dict[str, Any] = {}
        condition = stored_cutoff("#lu", ":cutoff", cutoff, values)
        try:
            db.delete_item(
                TableName=table,
                Key={"ID": {"S": row.id}},
                ConditionExpression=condition,
                ExpressionAttributeNames={"#lu": "LastUpdate"},
                ExpressionAttributeValues=values,
            )
            reaped += 1
        except botocore.exceptions.ClientError as exc:
            if not is_condition_failure(exc):
                raise
            # it came back to life meanwhile
    return reaped
