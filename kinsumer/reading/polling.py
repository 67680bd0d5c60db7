"""Reading a shard by polling: GetShardIterator, then GetRecords page after page.

The only place kinsumer calls GetRecords. At most ``1 / throttle_delay`` calls per second per
shard, retries included (a backlog reads them back to back, else they are spaced out);
transient faults are retried with backoff; an expired iterator is renewed after the last
record handed on; a shard that left the stream (past retention) ends like a closed one. KPL
aggregates become their user records here (:mod:`.kpl`).
"""

from __future__ import annotations

import collections
import datetime as dt
import functools
import logging
import math
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import botocore.exceptions

from .. import clock
from ..aws import lean_get_records
from ..aws.error_codes import is_expired_iterator, is_not_found
from ..aws.kinesis import stream_exists
from ..aws.retry import Stopped, retry_call
from ..aws.stream_ref import StreamRef, stream_params
from ..stats import StatReceiver
from .position import StartPosition
from .reader import ApiRecord, OutsideRule, Page, ReaderSettings, taken_at, user_records

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient

__all__ = ["FIRST_PAGE", "PollingReader", "latest_at", "polling_readers"]

log = logging.getLogger("kinsumer.reading")
T = TypeVar("T")

#: Records in a reader's first GetRecords at most (unless it asks for a limit).
FIRST_PAGE = 1000


class PollingReader:
    """Reads one shard with GetRecords (see the module's description)."""

    def __init__(
        self,
        kinesis: KinesisClient,
        stream_name: str,
        shard_id: str,
        start: StartPosition,
        *,
        settings: ReaderSettings | None = None,
        stats: StatReceiver | None = None,
        stop: threading.Event | None = None,
        outside: OutsideRule | None = None,
    ) -> None:
        """``outside``: what to do with the user records of KPL aggregates outside the shard's hash key range
        (None: deliver them, uncounted)."""
        self._kinesis = kinesis
        self._stream_name = stream_name
        self._stream_arn = StreamRef(stream_name).arn  # named in GetRecords too, when given
        self._shard_id = shard_id
        self._settings = settings or ReaderSettings()
        self._stats = stats or StatReceiver()
        self._stop = stop or threading.Event()
        self._outside = outside
        self._position = start  # where a new iterator starts: after the last record handed on
        self._skip_from = start if start.sub_sequence is not None else None  # drop what it already covers
        self._iterator: str | None = None
        self._ended = False
        #: Monotonic times of the last GetRecords attempts (as many as a second may hold).
        self._attempts: collections.deque[float] = collections.deque(maxlen=self._settings.per_second)
        self._backlog = False  # the last page came back full: the next read need not wait for the throttle
        self._empty_reads = 0  # reads in a row that came back empty (the next waits longer)
        self._latest_at: dt.datetime | None = None

    @property
    def shard_id(self) -> str:
        return self._shard_id

    @property
    def latest_at(self) -> dt.datetime | None:
        return self._latest_at

    def close(self) -> None:
        """Nothing to release: an iterator expires by itself."""

    def ready_at(self) -> float:
        """When the next GetRecords may go (see :class:`~.reader.ReaderSettings`)."""
        if self._ended:
            return -math.inf
        return self._settings.next_read(self._attempts, self._empty_reads, self._backlog)

    def on_ready(self, wake: Callable[[], None]) -> None:
        """Nothing but time makes a polling reader ready (:meth:`ready_at` says when)."""

    def next_page(self, limit: int | None = None) -> Page:
        """The next page of records (see :class:`~kinsumer.reading.reader.ShardReader`).

        Without a ``limit``, the reader's first page holds at most ``FIRST_PAGE`` records: a
        server takes time in proportion to a page's size, so the first records of a backlog
        arrive sooner; the following pages are full size.
        """
        if limit is None:
            limit = self._settings.max_records_per_call
            if not self._attempts:
                limit = min(limit, FIRST_PAGE)
        while not self._ended:
            if self._iterator is None:
                self._iterator = self._new_iterator()
                if self._iterator is None:
                    break  # the shard is gone
            try:
                response = self._get_records(self._iterator, limit)
            except botocore.exceptions.ClientError as exc:
                if not is_expired_iterator(exc):
                    raise
                self._stats.error_retried("GetRecords", "ExpiredIteratorException")
                log.info("iterator of %s expired; resuming at %s", self._shard_id, self._position)
                self._iterator = None
                continue
            page = self._page(response, limit)
            if page is not None:
                return page
        self._ended = True
        return Page(self._shard_id, (), dt.datetime.now(dt.UTC), None, end_of_shard=True)

    # ----------------------------------------------------------------- calls

    def _call(self, fn: Callable[[], T], operation: str, min_wait: float = 0.0) -> T:
        return retry_call(
            fn, operation=operation, stats=self._stats, sleep=self._sleep, should_stop=self._stop.is_set,
            min_wait=min_wait,
        )  # fmt: skip

    def _sleep(self, seconds: float) -> None:
        if clock.wait(self._stop, seconds):
            raise Stopped(self._shard_id)

    def _new_iterator(self) -> str | None:
        """An iterator at the current position; None if the shard left the stream."""
        position = self._position
        args = {**stream_params(self._stream_name), "ShardId": self._shard_id, **position.iterator_args()}
        try:
            response = self._call(lambda: self._kinesis.get_shard_iterator(**args), "GetShardIterator")
        except botocore.exceptions.ClientError as exc:
            if not is_not_found(exc):
                raise
            if not self._call(lambda: stream_exists(self._kinesis, self._stream_name), "DescribeStreamSummary"):
                raise
            log.warning("%s is no longer in the stream (past retention); it ends here", self._shard_id)
            return None
        if position.kind == "LATEST":  # should it expire before a record comes, resume from when it was taken
            self._latest_at = taken_at(response)
            self._position = StartPosition.at_timestamp(self._latest_at)
        return str(response["ShardIterator"])

    def _get_records(self, iterator: str, limit: int) -> dict[str, Any]:
        """One GetRecords when due (see :class:`~.reader.ReaderSettings`: after empty reads later, on a
        backlog at once); at most ``per_second`` attempts in any second, and a retry waits at least
        ``throttle_delay``."""
        throttle = self._settings.throttle_delay
        wait = self.ready_at() - clock.monotonic()
        if wait > 0:
            self._sleep(wait)
        call = functools.partial(self._attempt, iterator, limit)
        return self._call(call, "GetRecords", min_wait=throttle)

    def _attempt(self, iterator: str, limit: int) -> dict[str, Any]:
        wait = self._settings.next_read(self._attempts, 0, backlog=True) - clock.monotonic()
        if wait > 0:  # a retry, which waits at least throttle_delay, stays within per_second too
            self._sleep(wait)
        self._attempts.append(clock.monotonic())  # every attempt counts for the throttle
        return lean_get_records.get_records(self._kinesis, iterator, limit, self._stream_arn)

    # ----------------------------------------------------------------- pages

    def _page(self, response: dict[str, Any], limit: int) -> Page | None:
        """The page of a GetRecords answer; None if it held only what the start already covers.

        A start inside a KPL aggregate reads that aggregate again and drops the user records
        the start covers. When that leaves nothing (the start was after the aggregate's last user
        record), the empty page says nothing of the shard: a caller would take it for the tip
        (the probe of an idle shard, the end of a batch's read) while records follow. The reader
        reads on instead.
        """
        raw: list[ApiRecord] = response.get("Records", [])
        behind = response.get("MillisBehindLatest")
        self._empty_reads = 0 if raw or behind else self._empty_reads + 1  # records, or more to come: full rate
        self._stats.records_fetched(self._shard_id, len(raw), behind)
        retrieved_at = dt.datetime.now(dt.UTC)
        full = self._backlog = len(raw) >= limit
        covered_only, outside = False, 0
        if raw:
            self._position = StartPosition.after(raw[-1]["SequenceNumber"])
            raw, outside = user_records(raw, self._shard_id, self._stats, self._skip_from, self._outside)
            covered_only = not raw
            self._skip_from = None
        self._iterator = response.get("NextShardIterator")
        if self._iterator is not None:
            if covered_only:
                return None
            return Page(self._shard_id, raw, retrieved_at, behind, full=full, outside_range=outside)
        self._ended = True
        children = tuple(str(child["ShardId"]) for child in response.get("ChildShards") or ())
        return Page(
            self._shard_id, raw, retrieved_at, behind, end_of_shard=True, child_shards=children, outside_range=outside
        )


def latest_at(kinesis: KinesisClient, stream_name: str, shard_id: str) -> dt.datetime:
    """Where LATEST lies in a shard now, as a time in the server's clock (whole seconds: at or before).

    A LATEST start made concrete, so that it can be recorded and a new reader starts there too.
    """
    response = kinesis.get_shard_iterator(**stream_params(stream_name), ShardId=shard_id, ShardIteratorType="LATEST")
    return taken_at(response)


def polling_readers(
    kinesis: KinesisClient,
    stream_name: str,
    settings: ReaderSettings,
    stats: StatReceiver,
    outside: OutsideRule | None = None,
) -> Callable[[str, StartPosition, threading.Event], PollingReader]:
    """A reader factory: PollingReaders of ``stream_name`` with these settings."""

    def make(shard_id: str, start: StartPosition, stop: threading.Event) -> PollingReader:
        return PollingReader(
            kinesis, stream_name, shard_id, start, settings=settings, stats=stats, stop=stop, outside=outside
        )

    return make
