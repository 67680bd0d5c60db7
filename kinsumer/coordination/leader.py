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

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kinesis import KinesisClient

__all__ = ["refresh_shard_cache"]

log = logging.getLogger("kinsumer.leader")


def refresh_shard_cache(
    kinesis: KinesisClient,
    db: DynamoDBClient,
    stream_name: str,
    tables: Tables,
    seen: ShardCache | None,
    *,
    reap_trimmed: bool = False,
    stream_identity: str = "",
) -> ShardCache:
    """List the shards, compute the frontier, and store it unless it is unchanged.

    ``seen`` is the cache as last read; if another client wrote a newer one meanwhile, that
    one is returned instead. With ``reap_trimmed``, finished rows of shards that left the
    stream (past retention) are deleted. Rows of another incarnation of the stream
    (``stream_identity``: the current one) count as not finished; a cache of another
    incarnation is written again.
    """
    shards = list_shards(kinesis, stream_name)
    finished = checkpoints_table.finished_shards(db, tables.checkpoints, stream_identity)
    frontier = consumable_frontier(shards, finished)
    if reap_trimmed:
        listed = {s.shard_id for s in shards}
        trimmed = sorted(s for s in finished if s not in listed)
        if trimmed:
            log.info("deleting the checkpoints of %d shards trimmed from the stream", len(trimmed))
            checkpoints_table.delete_rows(db, tables.checkpoints, trimmed)
    if seen is not None and list(seen.shard_ids) == frontier and seen.stream == stream_identity:
        return seen
    parents = {s.shard_id: s.parents for s in shards if s.shard_id in set(frontier)}
    written = metadata_table.write_shard_cache(  # the published assignment goes with it
        db, tables.metadata, frontier, parents, seen.version if seen else 0, seen.assignment if seen else None,
        stream=stream_identity,
    )  # fmt: skip
    if written is None:  # someone else wrote first: theirs is at least as fresh
        return metadata_table.read_shard_cache(db, tables.metadata) or ShardCache(
            tuple(frontier), parents, stream=stream_identity
        )
    log.info("shard cache: %d consumable shards %s", len(frontier), frontier)
    return written
