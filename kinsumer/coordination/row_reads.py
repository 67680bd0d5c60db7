"""Reads of checkpoint rows by shards waiting to capture them, several in one BatchGetItem.

A shard whose row a live client holds is captured once that client releases it (:mod:`.shard_worker`):
its worker reads the row again and again until then. When a client joins, hundreds of shards wait at
once (half the shards of a client that held them all), and a GetItem each, every second, made the
join's own cost: 512 shards took 500 calls a second, more than the releases and captures they waited for.

So the reads of a client's waiting shards go together: a read waits :data:`WINDOW` seconds for others,
then up to :data:`~.checkpoints_table.BATCH_READ_KEYS` rows are read in one strongly consistent
BatchGetItem (the same read units as as many GetItems, a hundredth of the calls). Keys DynamoDB leaves
unprocessed are read in the next batch. A batch that fails fails the reads it carried, as their own
GetItem would have. An IAM policy written before kinsumer read rows this way may not allow
``dynamodb:BatchGetItem``: then the rows are read a GetItem each, with a warning.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

import botocore.exceptions

from . import checkpoints_table
from .checkpoints_table import BATCH_READ_KEYS, CheckpointRow

if TYPE_CHECKING:
    from ..reading.shard_loop import ShardLoop
    from .runtime import Runtime

__all__ = ["WINDOW", "RowReads"]

log = logging.getLogger("kinsumer.shard")

#: Seconds a read waits for others to share its BatchGetItem: short beside the polls it serves
#: (a quarter of a second and more).
WINDOW = 0.05
_UNPROCESSED_PAUSE = 0.1  # seconds before reading keys DynamoDB left unprocessed, doubling while it does
_UNPROCESSED_PAUSE_MAX = 1.0


class RowReads:
    """The batched row reads of the shards of one :class:`~kinsumer.reading.shard_loop.ShardLoop` (used
    from its coroutines only)."""

    def __init__(self, runtime: Runtime, loop: ShardLoop) -> None:
        self._rt = runtime
        self._loop = loop
        self._waiting: dict[str, list[asyncio.Future[CheckpointRow | None]]] = {}
        self._flush_task: asyncio.Task[None] | None = None  # reading the waiting rows, while there are any
        self._batched = True  # False once the IAM policy refused BatchGetItem: a GetItem per row

    def read(self, shard_id: str) -> asyncio.Future[CheckpointRow | None]:
        """The row of ``shard_id`` (its key in the checkpoints table) as read by the next batch."""
        future: asyncio.Future[CheckpointRow | None] = self._loop.loop.create_future()
        self._waiting.setdefault(shard_id, []).append(future)
        if self._flush_task is None or self._flush_task.done():
            self._flush_task = self._loop.loop.create_task(self._flush())
        return future

    async def _flush(self) -> None:
        try:
            await asyncio.sleep(WINDOW)
            pause = _UNPROCESSED_PAUSE
            while self._waiting:
                keys = list(self._waiting)[:BATCH_READ_KEYS]
                if await self._read({key: self._waiting.pop(key) for key in keys}):
                    await asyncio.sleep(pause)  # DynamoDB throttled part of the batch: not at once again
                    pause = min(_UNPROCESSED_PAUSE_MAX, 2 * pause)
        except asyncio.CancelledError:  # the loop stops: nobody reads on
            for future in _each(self._waiting):
                future.cancel()
            self._waiting.clear()
            raise

    async def _read(self, futures: dict[str, list[asyncio.Future[CheckpointRow | None]]]) -> bool:
        """Read the rows ``futures`` wait for, and answer them; True if DynamoDB left some unprocessed."""
        rt, keys = self._rt, list(futures)

        def abandoned() -> bool:  # every read of the batch was given up (their shards stopped)
            return all(future.done() for future in _each(futures))

        def read() -> tuple[dict[str, CheckpointRow | None], list[str]]:
            if self._batched:
                try:
                    return rt.call(
                        functools.partial(checkpoints_table.read_rows, rt.dynamodb, rt.tables.checkpoints, keys),
                        "BatchGetItem", should_stop=abandoned,
                    )  # fmt: skip
                except botocore.exceptions.ClientError as exc:
                    instead = "the rows of shards waiting for a release are read one GetItem each"
                    checkpoints_table.batch_reads_denied(exc, rt.tables.checkpoints, instead, log)
                    self._batched = False
            rows = {}
            for key in keys:
                if not abandoned():
                    read_one = functools.partial(checkpoints_table.read_row, rt.dynamodb, rt.tables.checkpoints, key)
                    rows[key] = rt.call(read_one, "GetItem", should_stop=abandoned)
            return rows, []

        try:
            rows, unprocessed = await self._loop.io(read, first=True)
        except asyncio.CancelledError:
            for future in _each(futures):
                future.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 (handed to the readers: as each GetItem would have failed)
            for future in _each(futures):
                if not future.done():
                    future.set_exception(exc)
            return False
        for key in unprocessed:  # in the next batch
            self._waiting.setdefault(key, []).extend(futures.pop(key))
        for key, waiting in futures.items():
            for future in waiting:
                if not future.done():
                    future.set_result(rows.get(key))
        return bool(unprocessed)


def _each(
    futures: dict[str, list[asyncio.Future[CheckpointRow | None]]],
) -> Iterator[asyncio.Future[CheckpointRow | None]]:
    """Every read waiting in ``futures`` (by shard)."""
    return itertools.chain.from_iterable(futures.values())
