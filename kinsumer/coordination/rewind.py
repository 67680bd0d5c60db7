"""Rewinding (or fast-forwarding) an application: every shard starts over at a position an operator names.

``kinsumer reset`` and :meth:`kinsumer.Kinsumer.reset` (both through :func:`kinsumer.admin.reset`) plan
first (:func:`plan_reset`: per shard, where it stands and where it will start), then apply
(:func:`apply_reset`). A reset is refused while any client of the application is live: a live owner
would overwrite it with its next commit.

In an application of several streams a reset is of one stream (its rows, its shard cache).
Each shard of the stream's listing (or those named) gets a row with no checkpoint, not finished,
not owned, and ``StartAt`` set: the time to start at (``TRIM_HORIZON``: 0, the shard's oldest
record; ``LATEST``: the time of the reset). A closed parent is read again from that time and its
children after it, so per-key order holds across a split. The shard cache is deleted, so the next
clients list the shards again rather than trust a cache that had the parents finished.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from ..aws.kinesis import active_stream_summary, list_shards, stream_identity
from ..aws.tables import Tables, now_ms
from ..errors import ConfigError, KinsumerError
from ..reading.position import Position
from . import checkpoints_table, clients_table, metadata_table
from .home_stream import establish_home_stream, stream_scope
from .streams import StreamScope

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kinesis import KinesisClient

__all__ = ["ResetPlan", "ShardReset", "apply_reset", "plan_reset", "reset_time"]


@attrs.frozen
class ShardReset:
    """One shard of a reset: where it stands, and the time it will start at."""

    shard_id: str
    #: Its checkpoint before the reset: (sequence number, sub-sequence number or None); None: no checkpoint (not
    #: read yet, or finished without one).
    checkpoint: Position | None
    #: It was read to its end (a closed shard).
    finished: bool
    #: Where it starts after the reset: epoch milliseconds (AT_TIMESTAMP); 0: its trim horizon.
    start_at: int
    #: Its parent shards (a split's or a merge's), read again before it.
    parents: tuple[str, ...] = ()
    #: A client found dead that still held its row, if any.
    owner: str | None = None


@attrs.frozen
class ResetPlan:
    """What :meth:`Kinsumer.reset() <kinsumer.Kinsumer.reset>` wrote (and ``kinsumer reset`` shows before it
    writes): each shard of the stream, from where it stood to where it starts. :meth:`describe` says it in
    lines for an operator.

    ``shards``: one ``ShardReset`` per shard, with ``shard_id``; ``checkpoint``, where it stood: a
    (sequence number, sub-sequence number or None) pair, or None without a checkpoint; ``finished`` (read to
    its end); ``start_at``, where it starts: epoch milliseconds, 0 for its trim horizon; ``parents``; and
    ``owner``, a client found dead that still held its row.
    """

    #: The stream reset.
    stream: str
    #: The stream's identity: its ARN and creation time (``<ARN>@<epoch ms>``).
    identity: str
    #: Each shard reset, by shard ID (see above).
    shards: tuple[ShardReset, ...]
    #: The time given is older than the stream keeps records: every shard starts at its trim horizon.
    #: False for ``TRIM_HORIZON`` and ``LATEST``, which name no time.
    past_retention: bool
    #: The stream is the application's home stream (its rows are keyed by shard ID; else ``<stream>/<shard ID>``).
    home: bool = True

    @property
    def scope(self) -> StreamScope:
        return StreamScope(self.stream, self.identity, self.home)

    def describe(self) -> str:
        """The plan for an operator, one line per shard."""
        lines = [f"{'shard':<24} {'from':<34} to"]
        for shard in self.shards:
            start = _position_text(shard.checkpoint, shard.finished)
            lines.append(f"{shard.shard_id:<24} {start:<34} {_time_text(shard.start_at)}")
        if self.past_retention:
            lines.append("the time is older than the stream's retention: every shard starts at its trim horizon")
        return "\n".join(lines)


def reset_time(to: str | dt.datetime, now: dt.datetime | None = None) -> int:
    """The start of a reset as epoch ms: ``"TRIM_HORIZON"`` (0), ``"LATEST"`` (now) or an aware datetime."""
    if isinstance(to, dt.datetime):
        if to.tzinfo is None:
            raise ConfigError("to", "must be an aware datetime (with a time zone), TRIM_HORIZON or LATEST", to)
        return int(to.timestamp() * 1000)
    if to == "TRIM_HORIZON":
        return 0
    if to == "LATEST":
        return int((now or dt.datetime.now(dt.UTC)).timestamp() * 1000)
    raise ConfigError("to", "must be TRIM_HORIZON, LATEST or an aware datetime", to)


def plan_reset(
    kinesis: KinesisClient,
    dynamodb: DynamoDBClient,
    stream: str,
    app: str,
    to: str | dt.datetime,
    *,
    shards: Sequence[str] | None = None,
    max_age: float,
) -> ResetPlan:
    """The reset of ``app`` on ``stream`` (a name or an ARN) to ``to`` (see :func:`reset_time`), for ``shards``
    (default: all of the stream's). Raises KinsumerError while a client of the application is live (seen within
    ``max_age`` seconds), naming them, and ConfigError for a shard the stream does not have."""
    tables = Tables.for_application(app)
    start_at = reset_time(to)
    _refuse_while_live(dynamodb, tables, max_age)
    summary = active_stream_summary(kinesis, stream)
    identity = stream_identity(summary, stream)
    scope = stream_scope(dynamodb, tables, stream, identity)  # a plan writes nothing
    listing = {info.shard_id: info for info in list_shards(kinesis, stream)}
    chosen = sorted(listing) if shards is None else list(shards)
    unknown = [s for s in chosen if s not in listing]
    if unknown:
        raise ConfigError("shards", f"must be shards of {stream} ({', '.join(sorted(listing))})", unknown)
    rows = checkpoints_table.load_rows(dynamodb, tables.checkpoints)
    planned = []
    for shard_id in chosen:
        row = rows.get(scope.key(shard_id))
        current = row is not None and not row.foreign(identity)
        planned.append(
            ShardReset(
                shard_id,
                checkpoint=row.checkpoint if row is not None and current else None,
                finished=bool(row is not None and current and row.finished),
                start_at=start_at,
                parents=listing[shard_id].parents,
                owner=row.owner_id if row is not None else None,
            )
        )
    kept_from = now_ms() - int(summary.get("RetentionPeriodHours", 24)) * 3_600_000
    past_retention = start_at != 0 and start_at < kept_from  # 0: TRIM_HORIZON, no time at all
    return ResetPlan(scope.name, identity, tuple(planned), past_retention=past_retention, home=scope.home)


def apply_reset(dynamodb: DynamoDBClient, app: str, plan: ResetPlan, *, max_age: float) -> None:
    """Write ``plan``: each shard's row, then the shard cache's deletion. Refused (KinsumerError) if a
    client became live meanwhile, or took one of the rows."""
    tables = Tables.for_application(app)
    _refuse_while_live(dynamodb, tables, max_age)
    if (establish_home_stream(dynamodb, tables, plan.stream) == plan.stream) != plan.home:
        raise KinsumerError(f"the home stream of {app} was recorded after this plan was made: plan the reset again")
    scope = plan.scope
    for shard in plan.shards:
        done = checkpoints_table.rewind(
            dynamodb, tables.checkpoints, scope.key(shard.shard_id), start_at=shard.start_at, stream=plan.identity,
            parents=shard.parents, seen_owner=shard.owner,
        )  # fmt: skip
        if not done:
            raise KinsumerError(
                f"{shard.shard_id} was taken by a client while it was being reset; stop every client of {app} "
                "and run the reset again"
            )
    metadata_table.delete_shard_cache(dynamodb, tables.metadata, scope.cache_key)


def _refuse_while_live(dynamodb: DynamoDBClient, tables: Tables, max_age: float) -> None:
    live = clients_table.live_clients(dynamodb, tables.clients, max_age)
    if live:
        where = {c.id: "a client of the Go library" if c.go else f"on {c.host or 'an unknown host'}" for c in live}
        names = ", ".join(f"{c.name or c.id} ({c.id}, {where[c.id]})" for c in live)
        raise KinsumerError(
            f"clients of the application are running: {names}; stop them first (a live owner would "
            "overwrite the reset with its next checkpoint)"
        )


def _position_text(checkpoint: Position | None, finished: bool) -> str:
    if finished:
        return "finished"
    if checkpoint is None:
        return "no checkpoint"
    sequence_number, sub_sequence = checkpoint
    return f"after {sequence_number}" + (f":{sub_sequence}" if sub_sequence is not None else "")


def _time_text(start_at: int) -> str:
    if start_at == 0:
        return "TRIM_HORIZON"
    return dt.datetime.fromtimestamp(start_at / 1000, dt.UTC).isoformat(timespec="milliseconds")
