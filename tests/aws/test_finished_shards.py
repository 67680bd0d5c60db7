"""Which shards are finished, read without scanning the checkpoints table (issue 40): only the rows of closed
shards not yet seen finished are read, a scan only for the leader's hourly look for trimmed shards' rows or
when it reads less (moto in-process)."""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any

import botocore.exceptions
import pytest

from kinsumer import clock
from kinsumer.aws.tables import Tables
from kinsumer.coordination import checkpoints_table, metadata_table
from kinsumer.coordination.metadata_table import ShardCache
from kinsumer.coordination.shard_cache import TRIMMED_EVERY, FinishedShards, refresh_shard_cache
from kinsumer.coordination.streams import StreamScope

PARENT = "shardId-000000000000"
CHILDREN = ("shardId-000000000001", "shardId-000000000002")


class Calls:
    """The DynamoDB operations ``db`` makes on the checkpoints table, and the keys its BatchGetItems ask for."""

    def __init__(self, db: Any, table: str) -> None:
        self.table, self.counts, self.keys = table, Counter[str](), list[list[str]]()
        db.meta.events.register("before-parameter-build.dynamodb", self._seen)

    def _seen(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        if params.get("TableName") == self.table:
            self.counts[model.name] += 1
        elif self.table in params.get("RequestItems", {}):
            self.counts[model.name] += 1
            self.keys.append([k["Shard"]["S"] for k in params["RequestItems"][self.table]["Keys"]])

    def take(self) -> Counter[str]:
        counts, self.counts = self.counts, Counter()
        return counts


class Later:
    """The system's clocks, ``ahead`` seconds later."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.ahead

    def wall(self) -> float:
        return time.time() + self.ahead

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def finish(db: Any, tables: Tables, shard_id: str) -> None:
    checkpoints_table.capture(db, tables.checkpoints, shard_id, owner_id="A", owner_name="a")
    assert checkpoints_table.release(
        db, tables.checkpoints, shard_id, owner_id="A", checkpoint=("1", None), finished=True
    )


def split(kinesis: Any) -> None:
    kinesis.create_stream(StreamName="s", ShardCount=1)
    kinesis.split_shard(StreamName="s", ShardToSplit=PARENT, NewStartingHashKey=str(2**127))


def refresh(
    kinesis: Any, db: Any, tables: Tables, seen: ShardCache | None, known: FinishedShards, **kw: Any
) -> ShardCache:
    return refresh_shard_cache(kinesis, db, StreamScope("s"), tables, seen, known=known, **kw)


def test_a_stream_never_resharded_reads_no_row_after_the_leaders_first_look(
    kinesis: Any, db: Any, tables: Tables
) -> None:
    kinesis.create_stream(StreamName="s", ShardCount=4)
    calls, leader, follower = Calls(db, tables.checkpoints), FinishedShards(), FinishedShards()
    cache = refresh(kinesis, db, tables, None, leader, reap_trimmed=True)
    assert calls.take() == Counter({"Scan": 1})  # its first look for trimmed shards' rows
    for _ in range(3):
        cache = refresh(kinesis, db, tables, cache, leader, reap_trimmed=True)
        refresh(kinesis, db, tables, cache, follower)
    assert len(cache.shard_ids) == 4
    assert calls.take() == Counter()  # no shard is closed: none can be finished


def test_a_closed_shard_is_read_until_it_is_finished_then_no_more(kinesis: Any, db: Any, tables: Tables) -> None:
    split(kinesis)
    calls, known = Calls(db, tables.checkpoints), FinishedShards()
    cache = refresh(kinesis, db, tables, None, known)
    cache = refresh(kinesis, db, tables, cache, known)
    assert cache.shard_ids == (PARENT,)  # the children wait for their parent
    assert calls.take() == Counter({"BatchGetItem": 2}) and calls.keys == [[PARENT], [PARENT]]
    finish(db, tables, PARENT)
    calls.take()
    cache = refresh(kinesis, db, tables, cache, known)
    assert cache.shard_ids == CHILDREN
    assert calls.take() == Counter({"BatchGetItem": 1})
    for _ in range(3):
        assert refresh(kinesis, db, tables, cache, known).shard_ids == CHILDREN
    assert calls.take() == Counter()  # seen finished: not read again


def test_more_closed_shards_than_a_scan_reads_are_scanned(
    kinesis: Any, db: Any, tables: Tables, monkeypatch: pytest.MonkeyPatch
) -> None:
    kinesis.create_stream(StreamName="s", ShardCount=2)
    for shard in ("shardId-000000000000", "shardId-000000000001"):
        kinesis.split_shard(
            StreamName="s", ShardToSplit=shard, NewStartingHashKey=str(2**126 if shard.endswith("0") else 3 * 2**126)
        )
    monkeypatch.setattr(checkpoints_table, "BATCH_READ_KEYS", 1)  # so 2 closed shards to read are "many"
    finish(db, tables, "shardId-000000000000")
    calls, known = Calls(db, tables.checkpoints), FinishedShards()
    cache = refresh(kinesis, db, tables, None, known)
    assert calls.take() == Counter({"Scan": 1})
    assert "shardId-000000000000" not in cache.shard_ids and "shardId-000000000001" in cache.shard_ids
    refresh(kinesis, db, tables, cache, known)
    assert calls.take() == Counter({"BatchGetItem": 1}) and calls.keys[-1] == ["shardId-000000000001"]


def test_the_leader_deletes_trimmed_shards_rows_once_an_hour(kinesis: Any, db: Any, tables: Tables) -> None:
    kinesis.create_stream(StreamName="s", ShardCount=1)
    finish(db, tables, "shardId-trimmed-1")  # rows of shards no longer listed (past retention)
    calls, known, later = Calls(db, tables.checkpoints), FinishedShards(), Later()
    with clock.installed(later):
        cache = refresh(kinesis, db, tables, None, known, reap_trimmed=True)
        assert checkpoints_table.read_row(db, tables.checkpoints, "shardId-trimmed-1") is None
        finish(db, tables, "shardId-trimmed-2")
        calls.take()
        later.ahead = TRIMMED_EVERY - 60
        cache = refresh(kinesis, db, tables, cache, known, reap_trimmed=True)
        assert calls.take() == Counter()  # not due: nothing read
        assert checkpoints_table.read_row(db, tables.checkpoints, "shardId-trimmed-2") is not None
        later.ahead = TRIMMED_EVERY + 1
        refresh(kinesis, db, tables, cache, known, reap_trimmed=True)
        assert calls.take()["Scan"] == 1
        assert checkpoints_table.read_row(db, tables.checkpoints, "shardId-trimmed-2") is None


def test_a_deleted_shard_cache_forgets_what_was_seen_finished(kinesis: Any, db: Any, tables: Tables) -> None:
    """A reset clears Finished (no client is live) and deletes the cache: the parent is read again first."""
    split(kinesis)
    known = FinishedShards()
    finish(db, tables, PARENT)
    cache = refresh(kinesis, db, tables, None, known)
    assert cache.shard_ids == CHILDREN
    row = checkpoints_table.read_row(db, tables.checkpoints, PARENT)
    assert row is not None
    assert checkpoints_table.rewind(
        db, tables.checkpoints, PARENT, start_at=0, stream="", parents=(), seen_owner=row.owner_id
    )  # fmt: skip
    assert refresh(kinesis, db, tables, cache, known).shard_ids == CHILDREN  # the cache is there: trusted
    metadata_table.delete_shard_cache(db, tables.metadata)  # as the reset does
    assert refresh(kinesis, db, tables, None, known).shard_ids == (PARENT,)


class NoBatchGetItem:
    """A DynamoDB client whose IAM policy does not allow BatchGetItem."""

    def __init__(self, db: Any) -> None:
        self._db = db

    def batch_get_item(self, **_: Any) -> Any:
        error = {"Error": {"Code": "AccessDeniedException", "Message": "not authorized to perform BatchGetItem"}}
        raise botocore.exceptions.ClientError(error, "BatchGetItem")  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def test_without_batch_get_item_the_table_is_scanned_with_one_warning(
    kinesis: Any, db: Any, tables: Tables, caplog: pytest.LogCaptureFixture
) -> None:
    split(kinesis)
    finish(db, tables, PARENT)
    calls, known = Calls(db, tables.checkpoints), FinishedShards()
    denied = NoBatchGetItem(db)
    with caplog.at_level(logging.WARNING, "kinsumer.leader"):
        cache = refresh_shard_cache(kinesis, denied, StreamScope("s"), tables, None, known=known)  # type: ignore[arg-type]
        cache = refresh_shard_cache(kinesis, denied, StreamScope("s"), tables, cache, known=known)  # type: ignore[arg-type]
    assert cache.shard_ids == CHILDREN
    assert calls.take() == Counter({"Scan": 1})  # the second refresh knows the parent finished
    assert [r.message for r in caplog.records if "BatchGetItem" in r.message] and len(caplog.records) == 1
