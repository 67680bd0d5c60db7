"""Snapshots for operators: one client's view (``Kinsumer.status()``) and an application's
state as the tables and ListShards show it (``read_status``, behind ``kinsumer status``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from .aws.kinesis import list_shards
from .aws.tables import Tables, ensure_tables_ready, now_ms
from .config import DEFAULT_GO_CLIENT_MAX_AGE
from .coordination import checkpoints_table, clients_table, metadata_table
from .coordination.home_stream import stream_scope
from .reading.frontier import consumable_frontier

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kinesis import KinesisClient

__all__ = ["ApplicationStatus", "ClientStatus", "OwnedShard", "read_status"]


@attrs.frozen
class OwnedShard:
    shard_id: str
    captured: bool  # False while waiting for the previous owner to let go
    checkpoint: str | None  # sequence number
    millis_behind_latest: int | None
    #: inside a KPL aggregate: the index of the last user record processed
    checkpoint_sub_sequence_number: int | None = None
    #: how the shard is read: ``"polling"`` (GetRecords) or ``"fan-out:<consumer name>"`` (SubscribeToShard)
    reading: str = "polling"
    #: ``process()`` is calling a failing handler again: the attempts so far
    retrying: int | None = None
    #: the name of the shard's stream
    stream: str = ""
    #: records ``process()`` sent to the sink as older than its ``max_record_age`` (this capture)
    expired: int = 0
    #: paused by :meth:`~kinsumer.Kinsumer.pause`: none of its records is handed out until it is resumed
    paused: bool = False
    #: seconds the oldest ``process()`` handler call under way on it has run; None if none is
    oldest_call_age: float | None = None
    #: seconds since the oldest record of it this client holds and has not finished with (read, queued, or
    #: under a handler) reached the stream; None if it holds none
    oldest_record_age: float | None = None
    #: user records of KPL aggregates read outside its hash key range, delivered or dropped (this capture)
    outside_range: int = 0


@attrs.frozen
class ClientStatus:
    """What one running Kinsumer knows of itself."""

    client_id: str
    client_name: str
    state: str  # new, running or stopped
    is_leader: bool
    client_index: int
    client_count: int
    shards: tuple[OwnedShard, ...]


@attrs.frozen
class ClientInfo:
    id: str
    name: str
    host: str
    pid: int
    heartbeat_age: float  # seconds since the last heartbeat
    live: bool
    #: how the client reads its shards: ``"polling"`` or ``"fan-out:<consumer name>"``
    reading: str = "polling"
    #: the streams it lists, when more than the application's first (see docs/several-streams.md)
    streams: tuple[str, ...] = ()
    #: a client of the Go library (twitchscience/kinsumer): kinsumer reads nothing while one is live
    go: bool = False


@attrs.frozen
class ShardInfoRow:
    shard_id: str
    consumable: bool  # in the frontier: open or closed but not finished, parents done
    closed: bool
    owner_id: str | None
    owner_name: str | None
    checkpoint: str | None
    finished: bool
    millis_behind_latest: int | None
    last_update_age: float | None  # seconds since the owner last committed
    #: inside a KPL aggregate: the index of the last user record processed
    checkpoint_sub_sequence_number: int | None = None
    #: how its owner reads it (``"polling"`` or ``"fan-out:<consumer name>"``); None without a known owner
    reading: str | None = None
    #: its owner's process() is calling a failing handler again ("attempt N: Error")
    retrying: str | None = None
    #: the crash-loop guard is handling it record by record after a process died (see process())
    careful: bool = False
    #: seconds since its owner paused it (``Kinsumer.pause()``); None when it is not paused
    paused_for: float | None = None
    #: seconds a ``process()`` handler call under way on it has run, once that is more than two commit
    #: periods (as its owner stored at its last commit); None otherwise
    oldest_call_age: float | None = None
    #: records its owner's ``process()`` sent to the sink as too old (``max_record_age``), this capture
    expired: int = 0
    #: seconds since the oldest record its owner held (and had not finished with) at its last commit
    #: reached the stream; None if it held none
    oldest_record_age: float | None = None
    #: user records of KPL aggregates its owner read outside its hash key range (delivered or dropped, as
    #: ``Config.kpl_outside_shard`` says), this capture
    outside_range: int = 0


@attrs.frozen
class ApplicationStatus:
    """An application's state on one stream, read from its tables and ListShards."""

    stream: str
    application: str
    clients: tuple[ClientInfo, ...]
    leader_id: str | None
    leader_age: float | None
    shard_cache: tuple[str, ...]
    shard_cache_age: float | None
    shards: tuple[ShardInfoRow, ...]

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def _age(epoch_ms: int, now: int) -> float:
    return round(max(0, now - epoch_ms) / 1000, 3)


def read_status(
    kinesis: KinesisClient,
    db: DynamoDBClient,
    stream: str,
    application: str,
    max_age: float,
    go_max_age: float = DEFAULT_GO_CLIENT_MAX_AGE,
) -> ApplicationStatus:
    """Everything an operator wants on one screen. ``max_age``: when a client counts as dead; ``go_max_age``: when
    a client of the Go library does."""
    tables = Tables.for_application(application)
    listing = list_shards(kinesis, stream)  # first: a missing stream is the first thing to report
    ensure_tables_ready(db, tables)
    scope = stream_scope(db, tables, stream)
    rows = {
        shard_id: row
        for key, row in checkpoints_table.load_rows(db, tables.checkpoints).items()
        if (shard_id := scope.shard_id(key)) is not None
    }
    leader_id, leader_update = metadata_table.read_leader_item(db, tables.metadata)
    cache = metadata_table.read_shard_cache(db, tables.metadata, scope.cache_key)
    now = now_ms()
    clients = tuple(
        ClientInfo(
            c.id,
            c.name,
            c.host,
            c.pid,
            _age(c.last_update, now),
            c.live_at(now, go_max_age if c.go else max_age),
            "Go library" if c.go else c.reading,
            c.streams,
            c.go,
        )
        for c in clients_table.all_clients(db, tables.clients)
    )
    reading = {c.id: c.reading for c in clients}
    frontier = set(consumable_frontier(listing, {s for s, r in rows.items() if r.finished}))
    shards = []
    for shard in sorted(listing, key=lambda s: s.shard_id):
        row = rows.get(shard.shard_id) or checkpoints_table.CheckpointRow(shard.shard_id)
        shards.append(
            ShardInfoRow(
                shard_id=shard.shard_id,
                consumable=shard.shard_id in frontier,
                closed=shard.closed,
                owner_id=row.owner_id,
                owner_name=row.owner_name,
                checkpoint=row.sequence_number,
                finished=row.finished,
                millis_behind_latest=row.millis_behind_latest,
                last_update_age=_age(row.last_update, now) if row.last_update else None,
                checkpoint_sub_sequence_number=row.sub_sequence_number,
                reading=reading.get(row.owner_id) if row.owner_id else None,
                retrying=row.retrying,
                careful=row.careful is not None,
                paused_for=_age(row.paused, now) if row.paused is not None and row.owner_id else None,
                oldest_call_age=_age(row.busy_since, now) if row.busy_since is not None and row.owner_id else None,
                expired=row.expired,
                oldest_record_age=_age(row.oldest_arrival, now)
                if row.oldest_arrival is not None and row.owner_id
                else None,
                outside_range=row.outside_range,
            )
        )
    return ApplicationStatus(
        stream=stream,
        application=application,
        clients=clients,
        leader_id=leader_id,
        leader_age=None if leader_update is None else _age(leader_update, now),
        shard_cache=cache.shard_ids if cache else (),
        shard_cache_age=_age(cache.last_update, now) if cache else None,
        shards=tuple(shards),
    )
