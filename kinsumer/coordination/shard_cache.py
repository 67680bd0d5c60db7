"""Computing and storing the shard cache (the consumable frontier).

The leader does it every ``leader_action_frequency``; any client does it when the cache is
empty or when one of its shards has just finished, so children start without waiting for
the leader's next round.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..aws.kinesis import list_shards
from ..aws.tables import Tables
from ..reading.frontier import consumable_frontier
from . import checkpoints_table, metadata_table
from .metadata_table import ShardCache
from .streams import StreamScope

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kinesis import KinesisClient

__all__ = ["refresh_shard_cache"]

log = logging.getLogger("kinsumer.leader")


def refresh_shard_cache(
    kinesis: KinesisClient,
    db: DynamoDBClient,
    scope: StreamScope,
    tables: Tables,
    seen: ShardCache | None,
    *,
    reap_trimmed: bool = False,
) -> ShardCache:
    """List the shards of ``scope``'s stream, compute the frontier, and store it unless it is unchanged.

    ``seen`` is the cache as last read; if another client wrote a newer one meanwhile, that
    one is returned instead. With ``reap_trimmed``, finished rows of shards that left the
    stream (past retention) are deleted. Rows of another incarnation of the stream
    (``scope.identity``: the current one) count as not finished; a cache of another
    incarnation is written again. Only the stream's own rows (:meth:`StreamScope.shard_id`) count.
    """
    shards = list_shards(kinesis, scope.name)
    finished_rows = checkpoints_table.finished_shards(db, tables.checkpoints, scope.identity)
    finished = {shard_id for key in finished_rows if (shard_id := scope.shard_id(key)) is not None}
    frontier = consumable_frontier(shards, finished)
    if reap_trimmed:
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
