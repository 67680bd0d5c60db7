"""The shard readers of the simulation: an idle stream, read as kinsumer's polling reader paces it.

What a :class:`~kinsumer.reading.reader.ShardReader` gives the shard worker, without records: each read
comes when :class:`~kinsumer.reading.reader.ReaderSettings` (the production pacing: the full rate for a
second of empty reads, then twice as late each time, up to ``idle_poll_interval``) says it may, and
returns an empty page at the tip, or, once :class:`~.kinesis.SimKinesis` closed the shard (a split), the
end of the shard with its children. Every read is counted as a GetRecords on the stream.
"""

from __future__ import annotations

import collections
import datetime as dt
import threading
from collections.abc import Callable

from kinsumer import clock
from kinsumer.reading.position import StartPosition
from kinsumer.reading.reader import Page, ReaderFactory, ReaderSettings
from tests.sim.kinesis import SimKinesis

__all__ = ["SimReader", "sim_readers"]


class SimReader:
    """Reads one shard of a :class:`~.kinesis.SimKinesis` that nobody writes to."""

    def __init__(self, kinesis: SimKinesis, shard_id: str, settings: ReaderSettings) -> None:
        self._kinesis = kinesis
        self._shard_id = shard_id
        self._settings = settings
        self._reads: collections.deque[float] = collections.deque(maxlen=settings.per_second)
        self._empty_reads = 0

    @property
    def shard_id(self) -> str:
        return self._shard_id

    @property
    def latest_at(self) -> dt.datetime | None:
        return None

    def next_page(self, limit: int | None = None) -> Page:
        self._reads.append(clock.monotonic())
        self._empty_reads += 1
        children = self._kinesis.children(self._shard_id)
        self._kinesis.calls["GetRecords"] += 1
        at = dt.datetime.fromtimestamp(clock.wall(), dt.UTC)
        return Page(self._shard_id, [], at, 0, end_of_shard=children is not None, child_shards=children or ())

    def ready_at(self) -> float:
        return self._settings.next_read(self._reads, self._empty_reads, backlog=False)

    def on_ready(self, wake: Callable[[], None]) -> None:
        pass  # a polling reader's pace is all of it: the worker looks at ready_at()

    def close(self) -> None:
        pass


def sim_readers(kinesis: SimKinesis, settings: ReaderSettings) -> ReaderFactory:
    """The readers of ``kinesis``'s shards: the factory a :class:`~kinsumer.coordination.shard_pool.ShardPool`
    takes."""

    def reader(shard_id: str, start: StartPosition, stop: threading.Event) -> SimReader:
        return SimReader(kinesis, shard_id, settings)

    return reader
