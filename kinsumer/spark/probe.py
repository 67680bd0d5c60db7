"""Probing idle shards on the driver: has anything arrived after a position?

One GetRecords of at most one record per probe, from an iterator kept between probes, so a
shard at the tip costs one call per ``interval`` and no micro-batch. The record a probe
returns is dropped: the executors read it in the batch that the probe lets the driver plan.
A shard where a probe found a record keeps that answer, with no call, while its position stays
(a batch that waits for ``minRecordsPerTrigger`` is planned again at each check).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from ..reading.polling import PollingReader
from .cut import arrival_ms
from .offsets import to_start_position

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient

__all__ = ["Prober"]


class Prober:
    """Probes shards, each at most once per ``interval`` seconds."""

    def __init__(
        self, kinesis: KinesisClient, stream: str, interval: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._kinesis = kinesis
        self._stream = stream
        self._interval = interval
        self._clock = clock
        self._readers: dict[str, tuple[str, PollingReader]] = {}  # shard -> (position, reader there)
        self._probed_at: dict[str, float] = {}
        self._found: dict[str, tuple[str, int | None]] = {}  # shard -> (position, until) a probe found something at

    def probe(self, positions: Mapping[str, str], shards: Iterable[str], until: int | None = None) -> dict[str, bool]:
        """For each of ``shards`` due for a probe: whether a record (before ``until``) follows its position;
        and True for those where a probe found a record at the same position before.

        A shard that ended, or whose tip is further ahead than the probe got, counts as having
        something: only a read settles it.
        """
        found: dict[str, bool] = {}
        now = self._clock()
        for shard in shards:
            if self._found.get(shard) == (positions[shard], until):
                found[shard] = True
                continue
            if now - self._probed_at.get(shard, -math.inf) < self._interval:
                continue
            self._probed_at[shard] = now
            page = self._reader(shard, positions[shard]).next_page(1)
            if page.raw:
                found[shard] = until is None or arrival_ms(page.raw[0]) < until
            else:
                found[shard] = page.end_of_shard or bool(page.millis_behind_latest)
            if page.raw and found[shard]:  # a record follows the position: a batch from there moves it
                self._found[shard] = (positions[shard], until)
            if page.raw or page.end_of_shard:
                del self._readers[shard]  # the next probe (if any) starts over at the shard's position
        for shard in set(self._readers) - set(positions):
            del self._readers[shard]
        for shard in set(self._found) - set(positions):
            del self._found[shard]
        return found

    def _reader(self, shard: str, position: str) -> PollingReader:
        kept = self._readers.get(shard)
        if kept is None or kept[0] != position:
            reader = PollingReader(self._kinesis, self._stream, shard, to_start_position(position))
            kept = self._readers[shard] = (position, reader)
        return kept[1]
