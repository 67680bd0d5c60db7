"""``kinsumer produce``: test records, uniquely numbered JSON, at a steady rate.

Each record is a JSON object ``{"id": n, "key": "key-<n % keys>", "ts": "<ISO 8601 UTC time>"}`` (and a
``"pad"`` of ``x`` that brings it to ``size`` bytes, if it is shorter), written with ``key-<n % keys>`` as its
partition key. The ids run from ``first_id`` up, one each, so a reader can tell what it missed or saw twice.
:class:`~kinsumer.writing.writer.RecordWriter` writes them: full PutRecords calls, refused entries sent
again, and with ``aggregate`` > 1 KPL aggregates of that many user records per shard (kinsumer's own
aggregation, :mod:`kinsumer.writing.aggregation`). The demo, the tests and the benchmarks use it too.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ..aws.retry import Stopped
from ..writing.aggregation import MAX_RECORD_BYTES
from ..writing.writer import MAX_CALL_RECORDS, RecordWriter

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient

__all__ = ["make_record", "produce"]

_REQUEST_BYTES = 4_000_000  # the user records of one batch at most (a PutRecords call carries 5 MiB)
_RETRY_TIMEOUT = 600.0  # seconds a batch's refused records are sent again before WriteError


def make_record(record_id: int, keys: int, size: int) -> tuple[bytes, str]:
    """Record ``record_id``: its data, ``{"id", "key", "ts"}`` as JSON padded to at least ``size`` bytes,
    and its partition key."""
    key = f"key-{record_id % keys}"
    body: dict[str, object] = {"id": record_id, "key": key, "ts": dt.datetime.now(dt.UTC).isoformat()}
    data = json.dumps(body)
    if len(data) < size:
        body["pad"] = "x" * max(0, size - len(data) - 11)  # 11: the bytes of `, "pad": ""`
        data = json.dumps(body)
    return data.encode(), key


def _batches(count: int | None, start: int, size: int) -> Iterator[range]:
    next_id = start
    while count is None or next_id < start + count:
        end = next_id + size if count is None else min(next_id + size, start + count)
        yield range(next_id, end)
        next_id = end


def produce(
    kinesis: KinesisClient,
    stream: str,
    *,
    count: int | None,
    rate: float | None = None,
    keys: int = 100,
    size: int = 100,
    first_id: int = 0,
    stop: threading.Event | None = None,
    on_batch: Callable[[range], None] = lambda ids: None,
    aggregate: int = 1,
) -> int:
    """Write ``count`` records (None: until ``stop`` is set) at up to ``rate`` records/s; the count written.

    Records go in batches; ``on_batch`` is called with the ids of each batch once every record of it is in
    the stream (entries PutRecords refuses are sent again, with a backoff that a ``stop`` cuts short; after
    10 minutes of refusals, :class:`~kinsumer.WriteError`). With ``aggregate`` > 1, the records are KPL
    aggregates of up to ``aggregate`` user records each, per shard (fewer if they would pass a Kinesis
    record's 1 MiB); ``count`` and ``rate`` count user records.
    """
    if aggregate < 1:
        raise ValueError(f"aggregate must be at least 1 user record per Kinesis record, not {aggregate}")
    stop = stop or threading.Event()

    def backoff(seconds: float) -> None:
        if stop.wait(seconds):
            raise Stopped("PutRecords")

    writer = RecordWriter(
        kinesis, stream, aggregate=aggregate > 1, aggregate_bytes=MAX_RECORD_BYTES,
        aggregate_records=aggregate if aggregate > 1 else None, retry_timeout=_RETRY_TIMEOUT, sleep=backoff,
    )  # fmt: skip
    started, written = time.monotonic(), 0
    per_batch = max(1, min(MAX_CALL_RECORDS * aggregate, _REQUEST_BYTES // (size + 60)))
    if rate:  # a second's worth at most: a low rate writes a few records a second, not a burst a minute
        per_batch = min(per_batch, max(1, int(rate)))
    for ids in _batches(count, first_id, per_batch):
        if stop.is_set():
            break
        try:
            for record_id in ids:
                data, key = make_record(record_id, keys, size)
                writer.put(data, key)  # sends a call once it is full
            writer.flush()
        except Stopped:  # during a backoff
            break
        written += len(ids)
        on_batch(ids)
        if rate:  # pace: the batch's share of a second at `rate`
            stop.wait(max(0.0, started + written / rate - time.monotonic()))
    return written
