"""Reading one shard's part of a micro-batch, on an executor. No Spark here.

Live (first attempt): read from the start position up to ``limit`` records, the end of
the shard, or the tip of the stream; record where it ended; then hand the records over.
Recording *before* handing over means any later failure (the sink, the task, the driver)
replays exactly the recorded range. Replay: read from the start up to the recorded end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
import botocore.exceptions

from ..retry import error_code, retry_call
from ..stats import StatReceiver
from ..stream import get_shard_iterator
from .batch_ends import BatchEnds
from .offsets import SHARD_END, after, to_start_position

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient

__all__ = ["ShardRange", "read_shard_range"]

_THROTTLE = 0.2  # seconds between two GetRecords on the shard (Kinesis allows 5 per second)
_REPLAY_BUDGET = 300.0  # seconds a replay may take to find its recorded end


@attrs.frozen
class ShardRange:
    """One shard's share of one batch: what an executor needs (it is pickled to it)."""

    stream: str
    shard: str
    batch: int
    start: str
    limit: int  # records; 0: until the tip of the stream
    time_budget: float  # seconds of reading at most, on a live read
    closed: bool = False  # the shard is closed: read to its end, not just to an empty page


def read_shard_range(
    kinesis: KinesisClient, ends: BatchEnds, part: ShardRange, stats: StatReceiver | None = None
) -> list[dict[str, Any]]:
    """The Kinesis records of ``part``: the recorded range, or a fresh one recorded now."""
    stats = stats or StatReceiver()
    recorded = ends.ends(part.batch).get(part.shard)
    if recorded is None:
        records, end = _read(kinesis, part, stats, stop_at=None)
        if ends.record(part.batch, part.shard, end, len(records)):
            return records
        recorded = ends.ends(part.batch).get(part.shard)  # another attempt recorded first: use its range
        if recorded is None:
            raise RuntimeError(
                f"batch {part.batch} of {part.shard} has no item in {ends.table}: it was never planned "
                "(or was deleted); the driver plans every batch before its tasks run"
            )
    if recorded == part.start:
        return []
    records, _ = _read(kinesis, part, stats, stop_at=recorded)
    return records


def _read(
    kinesis: KinesisClient, part: ShardRange, stats: StatReceiver, stop_at: str | None
) -> tuple[list[dict[str, Any]], str]:
    """Read from ``part.start``: up to ``stop_at`` if given, else live. Returns (records, end)."""
    reader = _Reader(kinesis, part, stats)
    if stop_at is None:
        return reader.live()
    return reader.replay(stop_at), stop_at


class _Reader:
    """GetRecords on one shard from a start position, throttled and retried."""

    def __init__(self, kinesis: KinesisClient, part: ShardRange, stats: StatReceiver) -> None:
        self._kinesis, self._part, self._stats = kinesis, part, stats
        self._last_call = -_THROTTLE
        self.records: list[dict[str, Any]] = []
        self._iterator: str | None = self._fresh_iterator()

    def _call(self, fn: Callable[[], Any], operation: str) -> Any:
        return retry_call(fn, operation=operation, stats=self._stats, min_wait=_THROTTLE)

    def _fresh_iterator(self) -> str:
        part = self._part
        position = after(self.records[-1]["SequenceNumber"]) if self.records else part.start
        return str(
            self._call(
                lambda: get_shard_iterator(self._kinesis, part.stream, part.shard, to_start_position(position)),
                "GetShardIterator",
            )
        )

    def _next_page(self, limit: int) -> tuple[list[dict[str, Any]], int | None]:
        """One GetRecords; returns its records and MillisBehindLatest. Renews expired iterators."""
        assert self._iterator is not None
        time.sleep(max(0.0, self._last_call + _THROTTLE - time.monotonic()))
        self._last_call = time.monotonic()
        iterator = self._iterator
        try:
            response = self._call(lambda: self._kinesis.get_records(ShardIterator=iterator, Limit=limit), "GetRecords")
        except botocore.exceptions.ClientError as exc:
            if error_code(exc) != "ExpiredIteratorException":
                raise
            self._stats.error_retried("GetRecords", "ExpiredIteratorException")
            self._iterator = self._fresh_iterator()
            return [], None
        page = list(response.get("Records", []))
        behind = response.get("MillisBehindLatest")
        self._stats.records_fetched(self._part.shard, len(page), behind)
        self._iterator = response.get("NextShardIterator")
        return page, behind

    def live(self) -> tuple[list[dict[str, Any]], str]:
        """Up to the limit, the end of the shard, the tip of an open shard or the time budget."""
        part = self._part
        deadline = time.monotonic() + part.time_budget
        while self._iterator is not None:
            want = min(10_000, part.limit - len(self.records)) if part.limit else 10_000
            page, behind = self._next_page(want)
            self.records.extend(page)
            # an open shard is done at the tip; a closed one only at its end (no next iterator)
            at_tip = not part.closed and (behind == 0 or (behind is None and not page))
            if (part.limit and len(self.records) >= part.limit) or at_tip or time.monotonic() >= deadline:
                break
        if self._iterator is None:
            return self.records, SHARD_END
        return self.records, after(self.records[-1]["SequenceNumber"]) if self.records else part.start

    def replay(self, stop_at: str) -> list[dict[str, Any]]:
        """Exactly the records up to the recorded end ``stop_at``."""
        stop_seq = None if stop_at == SHARD_END else stop_at.partition(":")[2]
        deadline = time.monotonic() + _REPLAY_BUDGET
        while self._iterator is not None and time.monotonic() < deadline:
            page, _ = self._next_page(10_000)
            for i, record in enumerate(page):
                if record["SequenceNumber"] == stop_seq:
                    self.records.extend(page[: i + 1])
                    return self.records
            self.records.extend(page)
        if stop_seq is None and self._iterator is None:
            return self.records
        raise RuntimeError(
            f"cannot replay batch {self._part.batch} of {self._part.shard}: its recorded end {stop_at} "
            "was not found (trimmed past retention?)"
        )
