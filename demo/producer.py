"""Writing test records: uniquely numbered JSON records at a steady rate. Used by the demo,
the tests, the benchmarks and ``kinsumer produce`` (from a checkout)."""

from __future__ import annotations

import datetime as dt
import functools
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from kinsumer.aws.retry import Stopped, retry_call
from kinsumer.stats import StatReceiver

from .aggregation import aggregated_entries

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient

__all__ = ["produce", "test_record"]

BATCH = 500  # records per PutRecords call: the Kinesis maximum
_REQUEST_BYTES = 4_000_000  # what a PutRecords call carries at most here (Kinesis allows 5 MB)


def test_record(record_id: int, keys: int, size: int) -> dict[str, Any]:
    """One PutRecords entry: {"id", "key", "ts"} as JSON, padded to at least ``size`` bytes."""
    key = f"key-{record_id % keys}"
    body = {"id": record_id, "key": key, "ts": dt.datetime.now(dt.UTC).isoformat()}
    data = json.dumps(body)
    if len(data) < size:
        body["pad"] = "x" * (size - len(data) - 10)
        data = json.dumps(body)
    return {"Data": data.encode(), "PartitionKey": key}


def _put(kinesis: KinesisClient, stream: str, entries: list[Any], stop: threading.Event) -> bool:
    """PutRecords until every entry is in (rejected ones again, after a backoff). False: stopped."""
    attempt = 0
    while entries:
        try:
            answer = retry_call(
                functools.partial(kinesis.put_records, StreamName=stream, Records=entries),
                operation="PutRecords",
                stats=StatReceiver(),
                should_stop=stop.is_set,
            )
        except Stopped:
            return False
        entries = [e for e, r in zip(entries, answer["Records"], strict=True) if "ErrorCode" in r]
        if entries and stop.wait(min(0.05 * 2**attempt, 2.0)):  # throttled entries: back off first
            return False
        attempt += 1
    return True


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
    """Write ``count`` records (None: until ``stop`` is set) at up to ``rate`` records/s.

    Entries PutRecords rejects are written again, so every id in a reported batch is in the
    stream. ``on_batch`` is called with the ids of each batch written. Returns the count.
    With ``aggregate`` > 1 the records are user records packed ``aggregate`` to a Kinesis
    record in the KPL's format (see :mod:`demo.aggregation`); ``count`` and ``rate`` count
    user records.
    """
    stop = stop or threading.Event()
    started, written = time.monotonic(), 0
    per_call = min(BATCH * aggregate, _REQUEST_BYTES // (size + 60))  # a PutRecords request: 5 MB at most
    for ids in _batches(count, first_id, per_call):
        if stop.is_set():
            break
        entries = [test_record(i, keys, size) for i in ids]
        if aggregate > 1:
            users = [(e["PartitionKey"], e["Data"], None) for e in entries]
            entries = list(aggregated_entries(users, aggregate))
        if not _put(kinesis, stream, entries, stop):
            break
        written += len(ids)
        on_batch(ids)
        if rate:  # pace: the batch's share of a second at `rate`
            stop.wait(max(0.0, started + written / rate - time.monotonic()))
    return written
