from __future__ import annotations

from typing import Any

import pytest

from kinsumer.aws.kinesis import ensure_stream_active, list_shards
from kinsumer.aws.tables import Tables
from kinsumer.coordination import checkpoints_table, metadata_table
from kinsumer.coordination.shard_cache import refresh_shard_cache
from kinsumer.coordination.streams import StreamScope
from kinsumer.errors import StreamNotFound


class PagedKinesis:
    """ListShards as AWS documents it: NextToken excludes StreamName."""

    def __init__(self, pages: list[list[str]]) -> None:
        self.pages, self.calls = pages, []  # type: ignore[var-annotated]

    def list_shards(self, **params: Any) -> dict[str, Any]:
        self.calls.append(params)
        index = int(params["NextToken"]) if "NextToken" in params else 0
        assert ("StreamName" in params) == ("NextToken" not in params), params
        page: dict[str, Any] = {"Shards": [{"ShardId": s} for s in self.pages[index]]}
        if index + 1 < len(self.pages):
            page["NextToken"] = str(index + 1)
        return page


def test_list_shards_pages_through_everything() -> None:
    fake = PagedKinesis([["a", "b"], ["c", "d"], ["e"]])
    assert [s.shard_id for s in list_shards(fake, "big")] == ["a", "b", "c", "d", "e"]  # type: ignore[arg-type]
    assert fake.calls == [{"StreamName": "big"}, {"NextToken": "1"}, {"NextToken": "2"}]


def test_unknown_stream(kinesis: Any) -> None:
    with pytest.raises(StreamNotFound, match="'nope'"):
        list_shards(kinesis, "nope")
    with pytest.raises(StreamNotFound):
        ensure_stream_active(kinesis, "nope")


def test_refresh_writes_the_frontier_and_skips_unchanged(kinesis: Any, db: Any, tables: Tables) -> None:
    kinesis.create_stream(StreamName="s", ShardCount=2)
    cache = refresh_shard_cache(kinesis, db, StreamScope("s"), tables, None)
    assert cache.shard_ids == ("shardId-000000000000", "shardId-000000000001")
    again = refresh_shard_cache(kinesis, db, StreamScope("s"), tables, cache)
    assert again.version == cache.version  # unchanged: not rewritten


def test_refresh_holds_back_children_until_their_parent_is_finished(kinesis: Any, db: Any, tables: Tables) -> None:
    kinesis.create_stream(StreamName="s", ShardCount=1)
    kinesis.split_shard(StreamName="s", ShardToSplit="shardId-000000000000", NewStartingHashKey=str(2**127))
    cache = refresh_shard_cache(kinesis, db, StreamScope("s"), tables, None)
    assert cache.shard_ids == ("shardId-000000000000",)
    checkpoints_table.capture(db, tables.checkpoints, "shardId-000000000000", owner_id="A", owner_name="a")
    checkpoints_table.release(
        db, tables.checkpoints, "shardId-000000000000", owner_id="A", checkpoint=("1", None), finished=True
    )
    cache = refresh_shard_cache(kinesis, db, StreamScope("s"), tables, cache)
    assert cache.shard_ids == ("shardId-000000000001", "shardId-000000000002")
    assert cache.parents["shardId-000000000001"] == ("shardId-000000000000",)
    stored = metadata_table.read_shard_cache(db, tables.metadata)
    assert stored is not None and stored.shard_ids == cache.shard_ids


def test_refresh_yields_to_a_concurrent_writer(kinesis: Any, db: Any, tables: Tables) -> None:
    kinesis.create_stream(StreamName="s", ShardCount=1)
    stale = refresh_shard_cache(kinesis, db, StreamScope("s"), tables, None)
    metadata_table.write_shard_cache(db, tables.metadata, ["other"], {}, expected_version=stale.version)
    kinesis.split_shard(StreamName="s", ShardToSplit="shardId-000000000000", NewStartingHashKey=str(2**127))
    checkpoints_table.capture(db, tables.checkpoints, "shardId-000000000000", owner_id="A", owner_name="a")
    checkpoints_table.release(
        db, tables.checkpoints, "shardId-000000000000", owner_id="A", checkpoint=("1", None), finished=True
    )
    result = refresh_shard_cache(kinesis, db, StreamScope("s"), tables, stale)
    assert result.shard_ids == ("other",)  # the newer write wins; the next round recomputes
