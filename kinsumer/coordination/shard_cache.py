"""Computing and storing the shard cache (the consumable frontier).

The leader does it every ``leader_action_frequency``; any client does it when the cache is
empty or when one of its shards has just finished, so children start without waiting for
the leader's next round.

Which shards are finished: only a closed shard can be, and a finished shard stays finished while any
client of the application runs (a reset is refused while one is live, and deletes the shard cache). So a
refresh reads the rows of the closed shards not yet seen finished (:class:`FinishedShards`), 100 to a
BatchGetItem, and a stream that was never resharded costs no read at all. The table is scanned instead
when that reads less (more such shards than a scan's read units), and when the leader looks for the rows
of shards trimmed past retention, every :data:`TRIMMED_EVERY`. Before, every refresh scanned the table:
530 read units every ``leader_action_frequency`` at 10,000 shards.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import botocore.exceptions

from ..aws.kinesis import ShardInfo, list_shards
from ..aws.tables import Tables
from ..clock import monotonic
from ..reading.frontier import consumable_frontier
from . import checkpoints_table, metadata_table
from .metadata_table import ShardCache
from .streams import StreamScope

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kinesis import KinesisClient

__all__ = ["TRIMMED_EVERY", "FinishedShards", "refresh_shard_cache"]

log = logging.getLogger("kinsumer.leader")

#: Seconds between two scans of the leader for the rows of shards trimmed past retention (a day or more old).
TRIMMED_EVERY = 3600.0
#: Checkpoint rows a scan reads per read unit, about (rows of 200 to 250 bytes, 4 KB a unit).
_ROWS_PER_READ_UNIT = 16


class FinishedShards:
    """The closed shards of one stream a client has seen finished, for the current incarnation of the
    stream, and when the leader's next look for trimmed shards' rows is due. Kept across refreshes by the
    client's coordinator."""

    def __init__(self) -> None:
        self.identity: str | None = None  # the incarnation the set is of
        self.shards: set[str] = set()
        self.reap_at = -math.inf  # monotonic: the leader scans for trimmed shards' rows from then on
        self.batched = True  # False: the IAM policy does not allow BatchGetItem (the table is scanned)

    def track(self, identity: str) -> None:
        """Keep to the incarnation ``identity``: for a new one, nothing seen finished and the look for trimmed
        shards' rows due."""
        if identity != self.identity:
            self.forget()
            self.identity = identity

    def forget(self) -> None:
        """Nothing is known finished (the shard cache is gone: a reset may have cleared rows)."""
        self.identity, self.shards, self.reap_at = None, set(), -math.inf


def refresh_shard_cache(
    kinesis: KinesisClient,
    db: DynamoDBClient,
    scope: StreamScope,
    tables: Tables,
    seen: ShardCache | None,
    *,
    reap_trimmed: bool = False,
    known: FinishedShards | None = None,
) -> ShardCache:
    """List the shards of ``scope``'s stream, compute the frontier, and store it unless it is unchanged.

    ``seen`` is the cache as last read; if another client wrote a newer one meanwhile, that
    one is returned instead. With ``reap_trimmed``, finished rows of shards that left the
    stream (past retention) are deleted, every :data:`TRIMMED_EVERY` (a scan). Rows of
    another incarnation of the stream (``scope.identity``: the current one) count as not finished; a cache
    of another incarnation is written again. Only the stream's own rows (:meth:`StreamScope.shard_id`)
    count. ``known``: the client's :class:`FinishedShards` of the stream (None: nothing known finished).
    """
    shards = list_shards(kinesis, scope.ref)
    known = known or FinishedShards()
    if seen is None:  # no cache: none yet, or a reset deleted it
        known.forget()
    known.track(scope.identity)
    reap = reap_trimmed and monotonic() >= known.reap_at
    finished = _finished(db, tables, scope, shards, known, scan=reap)
    frontier = consumable_frontier(shards, finished)
    if reap:
        known.reap_at = monotonic() + TRIMMED_EVERY
        listed = {s.shard_id for s in shards}
        trimmed = sorted(scope.key(s) for s in finished if s not in listed)
        if trimmed:
            log.info("deleting the checkpoints of %d shards trimmed from %s", len(trimmed), scope.name)
            checkpoints_table.delete_rows(db, tables.checkpoints, trimmed)
    if seen is not None and list(seen.shard_ids) == frontier and seen.stream == scope.identity:
        return seen
    parents = {s.shard_id: s.parents for s in shards if s.shard_id in set(frontier)}
    written = metadata_table.write_shard_cache(  # the published assignment goes with it
        db, tables.metadata, frontier, parents, seen.version if seen else 0, seen.assignment if seen else None,
        stream=scope.identity, key=scope.cache_key,
    )  # fmt: skip
    if written is None:  # someone else wrote first: theirs is at least as fresh
        return metadata_table.read_shard_cache(db, tables.metadata, scope.cache_key) or ShardCache(
            tuple(frontier), parents, stream=scope.identity
        )
    log.info("shard cache of %s: %d consumable shards %s", scope.name, len(frontier), frontier)
    return written


def _finished(
    db: DynamoDBClient,
    tables: Tables,
    scope: StreamScope,
    shards: list[ShardInfo],
    known: FinishedShards,
    *,
    scan: bool,
) -> set[str]:
    """The finished shards of ``scope``: of a scan (``scan``; or when it reads less than the rows of the closed
    shards not seen finished; or without BatchGetItem) they include shards no longer listed."""
    seen = known.shards  # of the incarnation the caller keeps to (known.track)
    closed = {s.shard_id for s in shards if s.closed}
    unknown = sorted(closed - seen)
    many = len(unknown) > max(checkpoints_table.BATCH_READ_KEYS, len(shards) // _ROWS_PER_READ_UNIT)
    if not scan and not unknown:
        return seen & closed
    if not scan and known.batched and not many:
        try:
            keys = [scope.key(s) for s in unknown]
            rows = checkpoints_table.finished_among(db, tables.checkpoints, keys, scope.identity)
        except botocore.exceptions.ClientError as exc:
            instead = "the shard cache's refresh scans the table for finished shards"
            checkpoints_table.batch_reads_denied(exc, tables.checkpoints, instead, log)
            known.batched = False
        else:
            seen.update(shard_id for key in rows if (shard_id := scope.shard_id(key)) is not None)
            return seen & closed
    rows = checkpoints_table.finished_shards(db, tables.checkpoints, scope.identity)
    finished = {shard_id for key in rows if (shard_id := scope.shard_id(key)) is not None}
    known.shards = finished & closed
    return finished
