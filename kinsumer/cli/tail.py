"""``kinsumer tail``: records as they arrive, read-only (or, with ``--app APP --commit``, as a member of APP).

Read-only, each shard is read by its own thread from the chosen position (or, with ``--app APP``, from
where APP's checkpoints say), writing nothing; a child shard starts once its parents were read to their
end, so per-key order holds across resharding.
"""

from __future__ import annotations

import base64
import json
import queue
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..aws.kinesis import list_shards
from ..aws.retry import Stopped, retry_call
from ..reading.frontier import consumable_frontier
from ..reading.polling import PollingReader
from ..reading.position import StartPosition
from ..reading.reader import ReaderSettings
from ..record import Record
from ..stats import StatReceiver

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient

__all__ = ["StreamTail", "format_record"]

_SETTINGS = ReaderSettings(max_records_per_call=1000)
_RELIST = 10.0  # seconds between two ListShards, to notice new shards
_ENDED = "ended"


class StreamTail:
    """Reads every consumable shard of a stream into one bounded queue."""

    def __init__(
        self,
        kinesis: KinesisClient,
        stream: str,
        start: StartPosition,
        buffer: int = 1000,
        *,
        starts: Mapping[str, StartPosition] | None = None,
        finished: Iterable[str] = (),
    ) -> None:
        """``starts``: where given shards start instead of ``start``; ``finished``: shards read to their end."""
        self._kinesis, self._stream, self._start = kinesis, stream, start
        self._starts = dict(starts or {})
        self._queue: queue.Queue[Record | tuple[str, str]] = queue.Queue(buffer)
        self._stop = threading.Event()
        self._finished: set[str] = set(finished)
        self._started: set[str] = set()
        self._threads: list[threading.Thread] = []

    def records(self, idle_timeout: float | None = None) -> Iterator[Record]:
        """Records in arrival order per shard, until stopped or ``idle_timeout`` s without one."""
        self._start_readers()
        next_list, last_record = time.monotonic() + _RELIST, time.monotonic()
        while not self._stop.is_set():
            try:
                item = self._queue.get(timeout=0.2)
            except queue.Empty:
                item = None
            now = time.monotonic()
            if isinstance(item, Record):
                last_record = now
                yield item
            elif item is not None:  # a shard ended: its children may start
                self._finished.add(item[1])
                next_list = now
            if now >= next_list:
                self._start_readers()
                next_list = now + _RELIST
            if idle_timeout is not None and now - last_record >= idle_timeout:
                return

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(2)

    def _start_readers(self) -> None:
        listing = retry_call(
            lambda: list_shards(self._kinesis, self._stream), operation="ListShards", stats=StatReceiver()
        )
        # the shards of the first listing start at the chosen position; later ones (children) at their start
        position = StartPosition.trim_horizon() if self._started else self._start
        for shard in consumable_frontier(listing, self._finished):
            if shard not in self._started:
                self._started.add(shard)
                start = self._starts.get(shard, position)
                thread = threading.Thread(target=self._read, args=(shard, start), daemon=True, name=f"tail-{shard}")
                self._threads.append(thread)
                thread.start()

    def _read(self, shard: str, position: StartPosition) -> None:
        reader = PollingReader(self._kinesis, self._stream, shard, position, settings=_SETTINGS, stop=self._stop)
        try:
            while not self._stop.is_set():
                page = reader.next_page()
                for record in page.records():
                    self._put(record)
                if page.end_of_shard:
                    self._put((_ENDED, shard))
                    return
        except Stopped:
            return
        finally:
            reader.close()

    def _put(self, item: Record | tuple[str, str]) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.2)
                return
            except queue.Full:
                continue


def format_record(record: Record, stream: str, as_json: bool, *, named: bool = False) -> str:
    """One line: ``[stream] shard sequence[/sub-sequence] key data`` (the stream when ``named``: a tail of
    several streams) or a JSON object."""
    try:
        text, binary = record.data.decode(), False
    except UnicodeDecodeError:
        text, binary = base64.b64encode(record.data).decode(), True
    if as_json:
        body: dict[str, Any] = {
            "stream": stream,
            "shard_id": record.shard_id,
            "sequence_number": record.sequence_number,
            "partition_key": record.partition_key,
            "sub_sequence_number": record.sub_sequence_number,
            "explicit_hash_key": record.explicit_hash_key,
            "approximate_arrival_timestamp": record.approximate_arrival_timestamp.isoformat(),
            "data_base64" if binary else "data": text,
        }
        return json.dumps(body)
    position = record.sequence_number
    if record.sub_sequence_number is not None:  # a user record of a KPL aggregate
        position += f"/{record.sub_sequence_number}"
    line = f"{record.shard_id} {position} {record.partition_key} {'base64:' if binary else ''}{text}"
    return f"{stream} {line}" if named else line
