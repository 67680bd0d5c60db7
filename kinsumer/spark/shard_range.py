"""Reading one shard's part of a micro-batch, on an executor. No Spark here.

Live (first attempt): read from the start position up to ``limit`` records, the end of
the shard, the tip of the stream or the batch's ``until`` cut; record where it ended and
why (a conditional write: the first attempt's end wins); then hand the rows over (Arrow
batches, one per page, made as the pages come: :func:`~.rows.page_rows`). If
another attempt recorded first, or the driver found the end recorded when it planned the
batch again (``recorded``), read exactly that range instead.
Recording *before* handing over means any later failure (the sink, the task, the driver)
replays exactly the recorded range. Replay: read from the start up to the recorded end.

A task reads its shards concurrently, a thread each (:func:`read_shard_ranges`): a shard's
read mostly waits for Kinesis (on AWS a shard gives 2 MB/s), as in the consumer's reader threads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any

import attrs

from ..aws.retry import Stopped
from ..config import MAX_RECORDS_PER_CALL
from ..errors import ReplayError
from ..reading.fanout import SubscriptionReader
from ..reading.polling import PollingReader
from ..reading.reader import ApiRecord, ShardReader, outside_rule
from ..stats import StatReceiver
from .batch_ends import BatchLedger
from .offsets import SHARD_END, ShardEnd, Stop, after_record, end_index, passed_end, to_start_position
from .rows import page_rows

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient

__all__ = ["ShardRange", "read_shard_range", "read_shard_ranges"]

log = logging.getLogger("kinsumer.spark")

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
    run: str = ""  # the ledger run of the batch's offset on this stream (see ``query_offset``)
    hash_range: tuple[int, int] | None = None  # the shard's hash key range, from the driver's listing
    drop_outside: bool = False  # kplOutsideShard drop: leave out the user records of aggregates outside it
    ref: str = ""  # how Kinesis calls name the stream: its ARN if given one (streamARN); "": its name

    @property
    def called_as(self) -> str:
        """The stream as its Kinesis calls name it (see :attr:`ref`)."""
        return self.ref or self.stream


def read_shard_range(
    kinesis: KinesisClient, ends: BatchLedger, part: ShardRange, stats: StatReceiver | None = None
) -> list[Any]:
    """The rows of ``part`` as Arrow batches (none if it is empty): the recorded range, or a fresh one recorded now."""
    stats = stats or StatReceiver()
    end = part.recorded
    if end is None:
        with _RangeReader(kinesis, part, stats) as live:
            batches, live_end = live.live()
            count = live.count
        if live.outside:
            log.warning(
                "batch %d, %s of %s: %d user records of KPL aggregates outside the shard's hash key range, %s "
                "(kplOutsideShard)",
                part.batch, part.shard, part.stream, live.outside, "dropped" if part.drop_outside else "delivered",
            )  # fmt: skip
        if ends.record(part.batch, part.shard, live_end, count):
            return batches
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
    kinesis: KinesisClient, ledger_of: Callable[[ShardRange], BatchLedger], parts: Sequence[ShardRange]
) -> Iterator[tuple[ShardRange, list[Any]]]:
    """Each of ``parts`` with its rows (Arrow batches), read concurrently, in the order the reads finish.

    ``ledger_of``: the ledger each part records its end in (the parts of a task may be of several streams).

    A failed read is raised once the task's other reads have finished: each recorded its end
    first, so a retried task replays them.
    """
    if len(parts) == 1:  # no thread for a task of one shard
        yield parts[0], read_shard_range(kinesis, ledger_of(parts[0]), parts[0])
        return
    with ThreadPoolExecutor(len(parts), thread_name_prefix="kinsumer-shard") as pool:
        pending = {pool.submit(read_shard_range, kinesis, ledger_of(part), part): part for part in parts}
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
        outside = outside_rule(part.stream, part.shard, part.hash_range, part.drop_outside)
        self._reader: ShardReader
        if part.consumer is None:
            self._reader = PollingReader(
                kinesis, part.called_as, part.shard, start, stats=stats, stop=self._stop, outside=outside
            )
        else:  # a closed shard's end is checked at once where the subscription does not say it (kinesis-mock)
            check = 0.0 if part.closed else None
            self._reader = SubscriptionReader(
                kinesis, part.called_as, part.consumer, part.shard, start, stats=stats, stop=self._stop,
                closed_check=check, outside=outside,
            )  # fmt: skip
        self.batches: list[Any] = []  # the rows so far, an Arrow batch per page
        self.count = 0  # user records in them
        self.outside = 0  # user records of KPL aggregates read outside the shard's hash key range
        self._last: ApiRecord | None = None  # the last of them
        self._behind: int | None = None  # the last page's MillisBehindLatest

    def __enter__(self) -> _RangeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self._reader.close()  # a subscription's connection and pump

    def live(self) -> tuple[list[Any], ShardEnd]:
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
            return self.batches, self._end(Stop.MORE)
        finally:
            timer.cancel()

    def _live(self) -> tuple[list[Any], ShardEnd]:
        part = self._part
        deadline = time.monotonic() + part.time_budget
        while True:
            want = min(MAX_RECORDS_PER_CALL, part.limit - self.count) if part.limit else MAX_RECORDS_PER_CALL
            page = self._reader.next_page(want)
            self.outside += page.outside_range
            if page.millis_behind_latest is not None:
                self._behind = page.millis_behind_latest
            before, cut = page_rows(page.raw, part.stream, part.shard, part.until)
            room = part.limit - self.count if part.limit else before.num_rows
            self._keep(page.raw, before.slice(0, room) if room < before.num_rows else before)
            if room < before.num_rows:
                return self.batches, self._end(Stop.MORE)
            if cut:
                return self.batches, self._end(Stop.TARGET)
            if page.end_of_shard:
                return self.batches, ShardEnd(SHARD_END, behind=self._behind)
            if part.limit and self.count >= part.limit:
                return self.batches, self._end(Stop.MORE)
            # an open shard is done at the tip; a closed one only at its end
            if not part.closed and page.at_tip:
                return self.batches, self._end(Stop.TIP if part.until is None else Stop.TARGET)
            if time.monotonic() >= deadline:
                return self.batches, self._end(Stop.MORE)

    def _keep(self, raw: Sequence[ApiRecord], rows: Any) -> None:
        """Keep ``rows``, the first records of the page ``raw``."""
        if rows.num_rows:
            self.batches.append(rows)
            self.count += rows.num_rows
            self._last = raw[rows.num_rows - 1]

    def _end(self, stop: Stop) -> ShardEnd:
        last = self._last
        return ShardEnd(after_record(last) if last is not None else self._part.start, stop, self._behind)

    def replay(self, stop_at: str) -> list[Any]:
        """Exactly the rows up to the recorded end ``stop_at``."""
        part = self._part
        deadline = time.monotonic() + _REPLAY_BUDGET
        while time.monotonic() < deadline:
            page = self._reader.next_page()
            last = end_index(page.raw, stop_at)
            raw = page.raw if last is None else page.raw[: last + 1]
            self._keep(raw, page_rows(raw, part.stream, part.shard)[0])
            if last is not None:
                return self.batches
            if passed_end(page.raw, stop_at):  # its record is gone: found too late to fail on the driver
                break
            if page.end_of_shard:
                if stop_at == SHARD_END:
                    return self.batches
                break
        raise ReplayError(
            f"cannot replay batch {part.batch} of {part.shard}: its recorded end {stop_at} "
            "was not found (trimmed by the stream's retention?)"
        )
