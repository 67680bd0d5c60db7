"""The reading seam: what every way of reading a shard offers the code that uses it.

The consumer's shard workers, the Spark executors and ``kinsumer tail`` read a shard through
a :class:`ShardReader`. Polling (GetRecords, :mod:`.polling`) is one implementation; enhanced
fan-out (SubscribeToShard) is meant to be another, with no change to coordination or
delivery. A reader hands records on page by page, in shard order; it repositions itself
after the last record it handed on whenever it has to (an expired iterator, a renewed
subscription), so whoever uses it never sees a record twice or misses one.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import email.utils
import logging
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from ..config import DEFAULT_IDLE_POLL_INTERVAL, DEFAULT_THROTTLE_DELAY, MAX_RECORDS_PER_CALL
from ..record import Record, records_from_api
from ..stats import StatReceiver
from .kpl import HashRange, deaggregate, outside_range
from .position import StartPosition
from .shard_ranges import ShardRanges

__all__ = [
    "IDLE_AFTER",
    "LONG_IDLE_AFTER",
    "ApiRecord",
    "OutsideRule",
    "Page",
    "ReaderFactory",
    "ReaderSettings",
    "ShardReader",
    "outside_rule",
    "taken_at",
    "user_records",
]

log = logging.getLogger("kinsumer.reading")

#: One record as the Kinesis API returns it, in botocore's shape (``Data``, ``PartitionKey``,
#: ``SequenceNumber``, ``ApproximateArrivalTimestamp``).
ApiRecord = dict[str, Any]

#: Without the server's time, a LATEST start counts from this long before this host's clock.
_LATEST_SLACK = dt.timedelta(seconds=1)


@attrs.frozen
class Page:
    """What one read of a shard returned: its records, in shard order, and where the shard stands."""

    shard_id: str
    #: The records, as the API returns them. :meth:`records` makes :class:`Record` objects of them;
    #: the Spark executors take these as they are, straight into Arrow columns.
    raw: Sequence[ApiRecord]
    #: When the page was fetched (this host's clock, UTC).
    retrieved_at: dt.datetime
    #: How far the shard's tip is ahead of this page (None if the service did not say).
    millis_behind_latest: int | None
    #: The shard is closed and read to its end (or gone past retention): nothing more will come.
    end_of_shard: bool = False
    #: With ``end_of_shard``: the shards that continue it, when the service names them.
    child_shards: tuple[str, ...] = ()
    #: The read stopped at its limit (as many records as it asked for): more may follow at once.
    full: bool = False
    #: User records of KPL aggregates on the page whose hash keys are outside the shard's range (see
    #: :class:`OutsideRule`): in ``raw`` if delivered, left out if dropped.
    outside_range: int = 0

    @property
    def at_tip(self) -> bool:
        """Nothing more was in the shard when the page was read: the page is not full, and the
        service says it is 0 ms behind or (when it does not say) the page is empty. (kinesalite
        says 0 ms behind on every page.)"""
        behind = self.millis_behind_latest
        return not self.full and (behind == 0 or (behind is None and not self.raw))

    def records(self, stream: str = "") -> list[Record]:
        """The page's records as :class:`Record` objects of ``stream`` (made on each call: call it once)."""
        return records_from_api(self.raw, self.shard_id, self.retrieved_at, stream)


#: Seconds of empty reads at the full rate before an idle shard is read less often.
IDLE_AFTER = 1.0
#: Seconds of empty reads at ``idle_poll_interval`` before a long-idle shard is read less often still
#: (up to ``max_idle_poll_interval``).
LONG_IDLE_AFTER = 60.0
#: Doublings of a wait at most: past every bound a wait can have, and no float overflow however
#: long a shard stays idle.
_MAX_DOUBLINGS = 64


@attrs.frozen
class ReaderSettings:
    """How a reader paces and sizes its calls.

    A read comes ``throttle_delay`` after the one before while the shard brings records, and for
    :data:`IDLE_AFTER` seconds of empty reads after that (a shard written to every second or so
    keeps its latency); then twice as late each time, up to ``idle_poll_interval``. A shard that
    still reads nothing for :data:`LONG_IDLE_AFTER` seconds at that pace is read twice as late
    each time again, up to ``max_idle_poll_interval`` (None: the same as ``idle_poll_interval``):
    a long-idle shard costs a read per ``max_idle_poll_interval``, and a record written to it waits
    at most that long (at most ``idle_poll_interval`` on a shard written to in the last
    :data:`LONG_IDLE_AFTER` seconds). A read that brings records (or says more are waiting)
    brings back the full rate at once.

    A backlog (the last page came back full) is read at once, as long as the last second holds
    fewer than :attr:`per_second` reads: the same reads per second, without a pause after a page
    that is quickly read (a reader's small first page, the pages of small records).
    """

    throttle_delay: float = DEFAULT_THROTTLE_DELAY
    max_records_per_call: int = MAX_RECORDS_PER_CALL
    idle_poll_interval: float = DEFAULT_IDLE_POLL_INTERVAL
    max_idle_poll_interval: float | None = None

    @property
    def per_second(self) -> int:
        """Reads of a shard in any one second, at most: as many as ``throttle_delay`` spaces out (Kinesis allows 5)."""
        return max(1, math.floor(1.0 / self.throttle_delay + 1e-9))

    @property
    def longest_wait(self) -> float:
        """The longest wait between two reads: ``max_idle_poll_interval`` (at least ``idle_poll_interval``)."""
        longest = self.max_idle_poll_interval
        return self.idle_poll_interval if longest is None else max(longest, self.idle_poll_interval)

    def next_read(self, reads: Sequence[float], empty_reads: int, backlog: bool) -> float:
        """When the next read may go, given the times of the last reads (oldest first, at least the last
        :attr:`per_second`), how many came back empty in a row, and whether the last page was full."""
        if not reads:
            return -math.inf
        due = reads[-1] + (0.0 if backlog else self.delay(empty_reads))
        if len(reads) >= self.per_second:
            due = max(due, reads[-self.per_second] + 1.0)
        return due

    def delay(self, empty_reads: int) -> float:
        """Seconds between a read and the next, after ``empty_reads`` empty reads in a row."""
        throttle, idle = self.throttle_delay, max(self.throttle_delay, self.idle_poll_interval)
        at_full_rate = max(1, math.ceil(IDLE_AFTER / throttle))
        if empty_reads < at_full_rate:
            return throttle
        slower = _doubled(throttle, empty_reads - at_full_rate + 1)
        if slower < idle or self.longest_wait <= idle:
            return float(min(idle, slower))
        # the first read at ``idle``, then LONG_IDLE_AFTER seconds of them, then slower still
        at_idle = at_full_rate + _doublings_below(throttle, idle)
        long_idle = at_idle + max(1, math.ceil(LONG_IDLE_AFTER / idle))
        if empty_reads < long_idle:
            return float(idle)
        return float(min(self.longest_wait, _doubled(idle, empty_reads - long_idle + 1)))


def _doubled(seconds: float, times: int) -> float:
    """``seconds`` doubled ``times`` times (at most :data:`_MAX_DOUBLINGS`)."""
    return seconds * 2.0 ** min(times, _MAX_DOUBLINGS)


def _doublings_below(start: float, bound: float) -> int:
    """How many of ``start`` doubled 1, 2, ... times stay under ``bound``."""
    count = 0
    while count < _MAX_DOUBLINGS and _doubled(start, count + 1) < bound:
        count += 1
    return count


class ShardReader(Protocol):
    """Reads one shard from a start position, page by page."""

    @property
    def shard_id(self) -> str: ...

    @property
    def latest_at(self) -> dt.datetime | None:
        """Where a LATEST start lies, once the first page was asked for: the service's time when
        the reader's first iterator was made (None for other starts, and before)."""
        ...

    def next_page(self, limit: int | None = None) -> Page:
        """The next page: at most ``limit`` records (default: the reader's own size).

        Blocks until the service answered (pacing the calls); retries transient faults;
        raises ``Stopped`` once the reader's stop event is set, and the error itself for
        faults that retrying cannot fix. After a page with ``end_of_shard`` every further
        call returns an empty page with ``end_of_shard``.
        """
        ...

    def ready_at(self) -> float:
        """When (``time.monotonic()``) :meth:`next_page` would not wait: a polling reader's next call is
        due (its throttle, an idle shard's longer pause), a subscription holds a page. ``math.inf``:
        not before the callback given to :meth:`on_ready` is called."""
        ...

    def on_ready(self, wake: Callable[[], None]) -> None:
        """Have ``wake`` called (from any thread) whenever :meth:`ready_at` may have come earlier."""
        ...

    def close(self) -> None:
        """Release what the reader holds (a subscription, a connection). Idempotent."""
        ...


@attrs.frozen
class OutsideRule:
    """What a reader does with the user records of KPL aggregates whose hash keys are outside its shard's
    hash key range (:func:`~.kpl.outside_range`): it counts them (``StatReceiver.outside_range``, the
    page's ``outside_range``) and delivers them, or with ``drop`` leaves them out."""

    ranges: ShardRanges
    drop: bool = False

    @classmethod
    def listing(cls, kinesis: Any, stream: str, choice: str) -> OutsideRule:
        """The rule of ``Config.kpl_outside_shard`` (``choice``: ``"deliver"`` or ``"drop"``) for ``stream``'s
        readers, with its ranges listed by ``kinesis`` when first needed."""
        return cls(ShardRanges(kinesis, stream), drop=choice == "drop")


def outside_rule(stream: str, shard_id: str, hash_range: HashRange | None, drop: bool) -> OutsideRule:
    """The rule of a reader whose shard's range was listed elsewhere (the Spark driver's listing)."""
    known = {} if hash_range is None else {shard_id: hash_range}
    return OutsideRule(ShardRanges.known(stream, known), drop=drop)


#: Makes the reader of one shard: (shard ID, start position, stop event) -> reader.
ReaderFactory = Callable[[str, StartPosition, threading.Event], ShardReader]


def user_records(
    raw: list[ApiRecord],
    shard_id: str,
    stats: StatReceiver,
    skip_from: StartPosition | None = None,
    outside: OutsideRule | None = None,
) -> tuple[list[ApiRecord], int]:
    """Kinesis records as the user records they carry (KPL aggregates unpacked), in order, and how many of
    them are outside the shard's hash key range (``outside``: the rule; None: not looked for).

    ``skip_from``: a start inside an aggregate; the user records it covers are left out. May block
    for a ListShards (the shard's range, the first time an aggregate is read).
    """
    records, malformed = deaggregate(raw)
    if malformed:
        log.warning("%d records of %s looked like KPL aggregates but were not; delivered as they are",
                    malformed, shard_id)  # fmt: skip
        stats.malformed_aggregates(shard_id, malformed)
    if skip_from is not None:
        records = [r for r in records if not skip_from.is_done(r["SequenceNumber"], r.get("SubSequenceNumber"))]
    if outside is None or records is raw or not records:  # no aggregate on the page
        return records, 0
    hash_range = outside.ranges.of(shard_id)
    found = [] if hash_range is None else outside_range(records, hash_range)
    if not found:
        return records, 0
    stats.outside_range(shard_id, len(found), outside.drop)
    if outside.drop:
        gone = set(found)
        records = [r for i, r in enumerate(records) if i not in gone]
    return records, len(found)


def taken_at(response: Mapping[str, Any]) -> dt.datetime:
    """When the server answered (a GetShardIterator): its ``Date`` (whole seconds, so at or before).

    The server's clock, not this host's: a skewed local clock would skip records or repeat them.
    """
    date = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    if date:
        with contextlib.suppress(TypeError, ValueError):
            taken = email.utils.parsedate_to_datetime(date)
            if taken.tzinfo is not None:
                return taken
    log.debug("no Date in the answer; using this host's clock")
    return dt.datetime.now(dt.UTC) - _LATEST_SLACK
