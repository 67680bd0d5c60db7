"""``minRecordsPerTrigger`` and ``maxTriggerDelay``: a micro-batch waits for enough records, or for the delay.

As Spark's Kafka source's ``minOffsetsPerTrigger`` / ``maxTriggerDelay``: the driver plans the next
batch as always, and while fewer than ``records`` records are available and less than ``max_delay``
has passed since the last batch it planned, ``latestOffset`` returns its start (no batch).

Spark's engine does none of the waiting, for Kafka's source either: it passes the source's read
limit back to ``latestOffset`` and runs a batch whenever the offset moved. PySpark 4.0's Python
streaming reader has no read limits at all (``latestOffset()`` takes no argument); from 4.2 a
Python source may report ``ReadMinRows(min_rows)`` (with no delay: there is no CompositeReadLimit
in Python) and gets it back, which says the same as our options and nothing more. So the source
waits itself, on 4.0 as on 4.3.

The delay counts from the last batch this query run planned, or from the run's first
``latestOffset`` (which never waits, as Kafka's first trigger: Spark 4.0 / 4.1 plan a
Trigger.AvailableNow query with that one call). A delay that ran out on an idle stream does not
start again (Kafka's does): the next record is read at once, and two batches are never less than
``max_delay`` apart unless the later one had ``records`` records available.

Counting: Kinesis has no record counts per position, so the driver counts by reading
(:class:`RecordCounter`): GetRecords after each shard's start, from iterators kept while the batch
waits (each record is fetched once per wait), payloads dropped at once, only for shards the
planning found something in (that stopped at a limit, or whose probe found a record), and no
further than ``records`` in all. A check comes at most once per ``interval`` (idleBatchInterval).
A wait costs at most ``records`` records fetched by the driver and, per check, about one
GetRecords per shard with something to read; the executors read those records again in the batch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

from ..reading.polling import PollingReader
from ..reading.reader import ReaderSettings
from .offsets import BatchOffset, Stop, to_start_position

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient

__all__ = ["RecordCounter", "TriggerWait", "to_count"]

#: Records in one GetRecords at most (Kinesis's limit).
_PAGE = 10_000

Shard = tuple[str, str]  # (stream, shard)
Planned = Mapping[str, BatchOffset]  # a planned batch: the offset of each stream of the query
Count = Callable[[Mapping[Shard, str], int], int]
T = TypeVar("T", bound=Planned)


def to_count(following: Planned) -> dict[Shard, str]:
    """The shards of a planned batch (each stream's offset) that have something to read, with their starts.

    The shards the batch reads, and those it leaves for later under ``maxRecordsPerTrigger``
    that have more (a shard at the tip has nothing to count).
    """
    return {
        (stream, shard): position
        for stream, offset in sorted(following.items())
        for shard, position in sorted(offset.shards.items())
        if offset.unread.get(shard, Stop.MORE.value) == Stop.MORE.value
    }


class TriggerWait:
    """Decides whether a planned batch waits (see the module's description). ``count``: how many
    records (at most the number asked for; more is allowed) follow the given positions."""

    def __init__(
        self, records: int, max_delay: float, interval: float, count: Count, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._records = records
        self._max_delay = max_delay
        self._interval = interval
        self._count = count
        self._clock = clock
        self._since: float | None = None  # the last batch planned, or the run's first look
        self._checked_at = -math.inf

    def admit(self, following: T | None) -> T | None:
        """``following`` if it runs now; None while it waits. Call it on every ``latestOffset``."""
        now = self._clock()
        if self._since is None:  # the run's first look never waits; the delay counts from here
            self._since = now
        elif following is not None and self._holds(following, now):
            return None
        if following is not None:
            self._since, self._checked_at = now, -math.inf
        return following

    def _holds(self, following: Planned, now: float) -> bool:
        assert self._since is not None
        if now - self._since >= self._max_delay:
            return False
        if now - self._checked_at < self._interval:
            return True
        self._checked_at = now
        return self._count(to_count(following), self._records) < self._records


class RecordCounter:
    """Counts the records after shards' positions with GetRecords, from iterators kept between calls.

    A call reads on from where the last call stopped at the same position (a record is fetched
    once), stops as soon as it has counted ``wanted``, and fetches no more than that in all for one
    set of positions; a shard whose position moved starts over.
    """

    def __init__(self, kinesis: KinesisClient, interval: float, ref: Callable[[str], str] = str) -> None:
        """``ref``: how Kinesis calls name a stream of the shards (its ARN if given one, else its name)."""
        self._kinesis = kinesis
        self._ref = ref
        # a reader after empty reads waits no longer than the checks are apart
        self._settings = ReaderSettings(idle_poll_interval=max(interval, 0.25))
        self._readers: dict[Shard, tuple[str, PollingReader, int]] = {}  # shard -> (position, reader there, counted)

    def __call__(self, positions: Mapping[Shard, str], wanted: int) -> int:
        for shard in set(self._readers) - set(positions):
            del self._readers[shard]
        for shard, position in positions.items():
            if shard not in self._readers or self._readers[shard][0] != position:
                start = to_start_position(position)
                stream, shard_id = shard
                reader = PollingReader(self._kinesis, self._ref(stream), shard_id, start, settings=self._settings)
                self._readers[shard] = (position, reader, 0)
        total = sum(counted for _, _, counted in self._readers.values())
        for shard in sorted(positions):
            position, reader, counted = self._readers[shard]
            while total < wanted:  # a shard read to its end answers at once, with no call
                page = reader.next_page(min(wanted - total, _PAGE))
                counted += len(page.raw)
                total += len(page.raw)
                if page.end_of_shard or not page.full:
                    break
            self._readers[shard] = (position, reader, counted)
        return total
