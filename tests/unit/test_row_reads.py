"""Row reads of waiting shards, batched (kinsumer.coordination.row_reads), on a real ShardLoop."""

from __future__ import annotations

import asyncio
import logging
import types
from collections.abc import Iterator
from typing import Any

import boto3
import botocore.exceptions
import pytest
from moto import mock_aws

from kinsumer.aws.tables import create_table
from kinsumer.coordination.row_reads import RowReads
from kinsumer.reading.shard_loop import ShardLoop

TABLE = "app_checkpoints"


class Counted:
    """A DynamoDB client whose BatchGetItem calls are counted (their keys), which can leave keys
    unprocessed or fail."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.batches: list[list[str]] = []
        self.leave: set[str] = set()  # keys to leave unprocessed, once each
        self.fail: Exception | None = None
        self.gets: list[str] = []

    def get_item(self, **params: Any) -> dict[str, Any]:
        self.gets.append(params["Key"]["Shard"]["S"])
        return self.db.get_item(**params)  # type: ignore[no-any-return]

    def batch_get_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:
        keys = [k["Shard"]["S"] for k in RequestItems[TABLE]["Keys"]]
        self.batches.append(keys)
        if self.fail is not None:
            raise self.fail
        left = [k for k in keys if k in self.leave]
        self.leave -= set(left)
        asked = {**RequestItems[TABLE], "Keys": [{"Shard": {"S": k}} for k in keys if k not in left]}
        answer = self.db.batch_get_item(RequestItems={TABLE: asked})
        if left:
            answer["UnprocessedKeys"] = {TABLE: {"Keys": [{"Shard": {"S": k}} for k in left]}}
        return answer  # type: ignore[no-any-return]


@pytest.fixture
def db() -> Iterator[Counted]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_table(client, TABLE, "Shard")
        for i in range(0, 250, 2):  # every other shard has a row
            client.put_item(TableName=TABLE, Item={"Shard": {"S": f"s-{i}"}, "OwnerID": {"S": f"owner-{i}"}})
        yield Counted(client)


@pytest.fixture
def loop() -> Iterator[ShardLoop]:
    loop = ShardLoop(threads=2)
    loop.start()
    yield loop
    assert loop.stop(5)


def _row_reads(db: Counted, loop: ShardLoop) -> RowReads:
    """RowReads over ``db``, its calls made once (no retries)."""
    runtime = types.SimpleNamespace(
        dynamodb=db, tables=types.SimpleNamespace(checkpoints=TABLE), call=lambda fn, operation, **_: fn()
    )
    return RowReads(runtime, loop)  # type: ignore[arg-type]


def _reads(db: Counted, loop: ShardLoop, keys: list[str]) -> list[Any]:
    rows = _row_reads(db, loop)

    async def read_all() -> list[Any]:
        return await asyncio.gather(*(rows.read(key) for key in keys), return_exceptions=True)

    return asyncio.run_coroutine_threadsafe(read_all(), loop.loop).result(30)


def test_the_reads_of_many_waiting_shards_share_batch_get_items_of_at_most_100_keys(
    db: Counted, loop: ShardLoop
) -> None:
    keys = [f"s-{i}" for i in range(250)]
    rows = _reads(db, loop, keys)
    assert [len(batch) for batch in db.batches] == [100, 100, 50]
    assert sorted(k for batch in db.batches for k in batch) == sorted(keys)
    for i, row in enumerate(rows):
        assert (row.owner_id if row is not None else None) == (f"owner-{i}" if i % 2 == 0 else None)


def test_two_reads_of_one_shard_are_one_key_and_both_get_the_row(db: Counted, loop: ShardLoop) -> None:
    first, second = _reads(db, loop, ["s-2", "s-2"])
    assert db.batches == [["s-2"]]
    assert first.owner_id == second.owner_id == "owner-2"


def test_keys_dynamodb_left_unprocessed_are_read_in_a_later_batch(db: Counted, loop: ShardLoop) -> None:
    db.leave = {"s-4", "s-5"}
    rows = _reads(db, loop, ["s-2", "s-4", "s-5"])
    assert db.batches == [["s-2", "s-4", "s-5"], ["s-4", "s-5"]]
    assert [r.owner_id if r is not None else None for r in rows] == ["owner-2", "owner-4", None]


def test_a_failed_batch_fails_every_read_it_carried(db: Counted, loop: ShardLoop) -> None:
    db.fail = RuntimeError("no DynamoDB")
    rows = _reads(db, loop, ["s-2", "s-3"])
    assert all(isinstance(r, RuntimeError) for r in rows) and len(db.batches) == 1


def test_a_policy_without_batch_get_item_reads_each_row_with_get_item_and_says_so_once(
    db: Counted, loop: ShardLoop, caplog: pytest.LogCaptureFixture
) -> None:
    error = {"Error": {"Code": "AccessDeniedException", "Message": "not authorized to perform dynamodb:BatchGetItem"}}
    db.fail = botocore.exceptions.ClientError(error, "BatchGetItem")  # type: ignore[arg-type]
    rows = _row_reads(db, loop)

    async def read(keys: list[str]) -> list[Any]:
        return await asyncio.gather(*(rows.read(key) for key in keys))

    with caplog.at_level(logging.WARNING, logger="kinsumer.shard"):
        first = asyncio.run_coroutine_threadsafe(read(["s-2", "s-3"]), loop.loop).result(30)
        again = asyncio.run_coroutine_threadsafe(read(["s-4"]), loop.loop).result(30)
    assert [r.owner_id if r is not None else None for r in first + again] == ["owner-2", None, "owner-4"]
    assert len(db.batches) == 1 and db.gets == ["s-2", "s-3", "s-4"]  # refused once, then GetItem only
    assert [r.levelno for r in caplog.records] == [logging.WARNING] and "dynamodb:BatchGetItem" in caplog.text


def test_a_loop_stopped_while_a_batch_waits_cancels_it_and_its_reads(db: Counted) -> None:
    loop = ShardLoop(threads=1)
    loop.start()
    rows = _row_reads(db, loop)

    async def start_reading() -> asyncio.Future[Any]:
        return rows.read("s-2")

    read = asyncio.run_coroutine_threadsafe(start_reading(), loop.loop).result(30)
    assert loop.stop(5)  # within the batch's window: nothing read yet
    assert rows._flush_task is not None and rows._flush_task.cancelled()  # ended, not destroyed pending
    assert read.cancelled() and db.batches == []
