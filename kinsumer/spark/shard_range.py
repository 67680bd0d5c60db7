"""Reading one shard's part of a micro-batch, on an executor. No Spark here.

Live (first attempt): read from the start position up to ``limit`` records, the end of
the shard, the tip of the stream or the batch's ``until`` cut; record where it ended and
why (a conditional write: the first attempt's end wins); then hand the records over. If
another attempt recorded first, or the driver found the end recorded when it planned the
batch again (``recorded``), read exactly that range instead.
Recording *before* handing over means any later failure (the sink, the task, the driver)
replays exactly the recorded range. Replay: read from the start up to the recorded end.

A task reads its shards concurrently, a thread each (:func:`read_shard_ranges`): a shard's
read mostly waits for Kinesis (on AWS a shard gives 2 MB/s), as in the consumer's reader threads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING

import attrs

from ..aws.retry import Stopped
from ..errors import ReplayError
from ..reading.fanout import SubscriptionReader
from ..reading.polling import PollingReader
from ..reading.reader import MAX_RECORDS_PER_CALL, ApiRecord, ShardReader
from ..stats import StatReceiver
from .batch_ends import BatchLedger
from .cut import before_cut
from .offsets import SHARD_END, ShardEnd, Stop, after_record, end_index, to_start_position

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient

__all__ = ["ShardRange", "read_shard_range", "read_shard_ranges"]

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
    until: int | None = None  # epoch ms: records that arrived at or after it are not this query run's
    recorded: str | None = None  # the end an earlier run of this batch recorded: a replay
    consumer: str | None = None  # the ARN of the enhanced fan-out consumer to read through; None: GetRecords


def read_shard_range(
    kinesis: KinesisClient, ends: BatchLedger, part: ShardRange, stats: StatReceiver | None = None
) -> list[ApiRecord]:
    """The records of ``part``: the recorded range, or a fresh one recorded now."""
    stats = stats or StatReceiver()
    end = part.recorded
    if end is None:
        with _RangeReader(kinesis, part, stats) as live:
            records, live_end = live.live()
        if ends.record(part.batch, part.shard, live_end, len(records)):
            return records
        recorded = ends.ends(part.batch).get(part.shard)  # another attempt recorded first: use its range
        if recorded is None:
            raise ReplayError(
                f"batch {part.batch} of {part.shard} has no item in {ends.table}: it was never planned "
                "(or was deleted); the driver plans every batch before its tasks run"
            )
        end = recorded.position
    if end == part.start:
        return []
    with _RangeReader(kinesis, part, stats) as replay:
        return replay.replay(end)


def read_shard_ranges(
    kinesis: KinesisClient, ends: BatchLedger, parts: Sequence[ShardRange]
) -> Iterator[tuple[ShardRange, list[ApiRecord]]]:
    """Each of ``parts`` with its records, read concurrently, in the order the reads finish.

    A failed read is raised once the task's other reads have finished: each recorded its end
    first, so a retried task replays them.
    """
    if len(parts) == 1:  # no thread for a task of one shard
        yield parts[0], read_shard_range(kinesis, ends, parts[0])
        return
    with ThreadPoolExecutor(len(parts), thread_name_prefix="kinsumer-shard") as pool:
        pending = {pool.submit(read_shard_range, kinesis, ends, part): part for part in parts}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                yield pending.pop(future), future.result()


class _RangeReader:
    """One shard from a batch's start position, through the reading seam (GetRecords or a subscription)."""

    def __init__(self, kinesis: KinesisClient, part: ShardRange, stats: StatReceiver) -> None:
        self._part = part
        self._stop = threading.Event()  # set when a live read's time budget is up: a wait for a page ends
        start = to_start_position(part.start)
        self._reader: ShardReader
        if part.consumer is None:
            self._reader = PollingReader(kinesis, part.stream, part.shard, start, stats=stats, stop=self._stop)
        else:  # a closed shard's end is checked at once where the subscription does not say it (kinesis-mock)
            check = 0.0 if part.closed else None
            self._reader = SubscriptionReader(
                kinesis, part.stream, part.consumer, part.shard, start, stats=stats, stop=self._stop,
                closed_check=check,
            )  # fmt: skip
        self.records: list[ApiRecord] = []
        self._behind: int | None = None  # the last page's MillisBehindLatest

    def __enter__(self) -> _RangeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self._reader.close()  # a subscription's connection and pump

    def live(self) -> tuple[list[ApiRecord], ShardEnd]:
        """Up to the limit, the end of the shard, the cut, the tip of an open shard or the time budget.

        The limit counts user records: a batch may end inside a KPL aggregate, and the next
        one starts with the aggregate's following user record.
        """
        timer = threading.Timer(self._part.time_budget, self._stop.set)
        timer.daemon = True
        timer.start()
        try:
            return self._live()
        except Stopped:  # the time budget ran out while waiting for a page (a subscription with nothing to say)
            return self.records, self._end(Stop.MORE)
        finally:
            timer.cancel()

    def _live(self) -> tuple[list[ApiRecord], ShardEnd]:
        part, records = self._part, self.records
        deadline = time.monotonic() + part.time_budget
        while True:
            want = min(MAX_RECORDS_PER_CALL, part.limit - len(records)) if part.limit else MAX_RECORDS_PER_CALL
            page = self._reader.next_page(want)
            if page.millis_behind_latest is not None:
                self._behind = page.millis_behind_latest
            raw, cut = before_cut(page.raw, part.until)
            room = part.limit - len(records) if part.limit else len(raw)
            records.extend(raw[:room])
            if room < len(raw):
                return records, self._end(Stop.MORE)
            if cut:
                return records, self._end(Stop.TARGET)
            if page.end_of_shard:
                return records, ShardEnd(SHARD_END, behind=self._behind)
            if part.limit and len(records) >= part.limit:
                return records, self._end(Stop.MORE)
            # an open shard is done at the tip; a closed one only at its end
            if not part.closed and page.at_tip:
                return records, self._end(Stop.TIP if part.until is None else Stop.TARGET)
            if time.monotonic() >= deadline:
                return records, self._end(Stop.MORE)

    def _end(self, stop: Stop) -> ShardEnd:
        records = self.records
        return ShardEnd(after_record(records[-1]) if records else self._part.start, stop, self._behind)

    def replay(self, stop_at: str) -> list[ApiRecord]:
        """Exactly the records up to the recorded end ``stop_at``."""
        deadline = time.monotonic() + _REPLAY_BUDGET
        records = self.records
        while time.monotonic() < deadline:
            page = self._reader.next_page()
            last = end_index(page.raw, stop_at)
            if last is not None:
                records.extend(page.raw[: last + 1])
                return records
            records.extend(page.raw)
            if page.end_of_shard:
                if stop_at == SHARD_END:
                    return records
                break
        raise ReplayError(
            f"cannot replay batch {self._part.batch} of {self._part.shard}: its recorded end {stop_at} "
            "was not found (trimmed past retention?)"
        )
