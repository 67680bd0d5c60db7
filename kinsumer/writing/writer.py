"""Writing records to a stream with PutRecords: full calls, failed entries retried, nothing dropped.

:class:`RecordWriter` takes records one at a time and sends them in calls of up to 500 records
and 5 MiB, in the order given; a record of more than 1 MiB, on a stream that takes one (its
``MaxRecordSizeInKiB``, read once, when the first such record comes), goes in a call of its own.
A call that fails as a whole with a transient fault (throttling, 5xx, a lost connection) is
retried; entries that a call answers with a throughput or internal error are sent again, alone,
with exponential backoff and jitter, until they are in or ``retry_timeout`` has passed (then
:class:`~kinsumer.WriteError`); an entry refused for good (a KMS key that cannot be used, say)
raises at once. A record that cannot be a Kinesis record of the stream (more data and key than the
stream's limit, an empty or over-long partition key, a bad explicit hash key) is refused before
anything is sent, with an error naming its partition key.

Retried entries go after the entries that succeeded with them, as with the KPL: per-key order
holds except around a partial failure.

With ``aggregate``, records are packed into KPL aggregates (:mod:`.aggregation`) of up to
``aggregate_bytes`` (and, if given, ``aggregate_records`` user records) per shard of the stream (its
open shards' hash ranges, listed once), so each user record still lands in the shard its key maps
to; a record too big for an aggregate goes as a plain record. An aggregate stays within 1 MiB
whatever the stream's limit, so that every consumer of the stream can read it (the KPL's and
KCL's of before large records too).
"""

from __future__ import annotations

import bisect
import random
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import botocore.exceptions

from ..aws.error_codes import error_code, error_message, is_not_found
from ..aws.kinesis import LARGEST_RECORD_BYTES, described_max_record_bytes, list_shards
from ..aws.retry import retry_call
from ..aws.stream_ref import StreamRef
from ..errors import StreamNotFound, WriteError
from ..stats import StatReceiver
from .aggregation import MAX_KEY_CHARS, MAX_RECORD_BYTES, AggregateBuilder, Entry, hash_of

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient

__all__ = ["DEFAULT_AGGREGATE_BYTES", "MAX_CALL_BYTES", "MAX_CALL_RECORDS", "RecordWriter"]

#: A PutRecords call holds at most this many records, of at most this many bytes (data and keys).
MAX_CALL_RECORDS = 500
MAX_CALL_BYTES = 5 * 1024 * 1024
#: The KPL's default AggregationMaxSize.
DEFAULT_AGGREGATE_BYTES = 51_200
_MAX_HASH = 2**128 - 1
_RETRIED = frozenset({"ProvisionedThroughputExceededException", "InternalFailure", "KMSThrottlingException"})
_BACKOFF_FIRST = 0.1  # seconds before the first resend of failed entries
_BACKOFF_MAX = 5.0
_MAX_BUILDERS = 100  # aggregates being filled at once (one per shard): 5 MiB at most with the default size


class RecordWriter:
    """Writes records to ``stream``, a name or an ARN (then every call names it by ARN; see the module's description).
    One per thread; call :meth:`flush` at the end."""

    def __init__(
        self,
        kinesis: KinesisClient,
        stream: str,
        *,
        aggregate: bool = False,
        aggregate_bytes: int = DEFAULT_AGGREGATE_BYTES,
        aggregate_records: int | None = None,
        retry_timeout: float = 600.0,
        stats: StatReceiver | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._kinesis = kinesis
        self._stream = stream
        self._params = StreamRef(stream, field="stream").params()
        self._aggregate = aggregate
        self._aggregate_bytes = aggregate_bytes
        if aggregate_records is not None and aggregate_records < 1:
            raise ValueError(f"aggregate_records must be at least 1 (or None: no limit), not {aggregate_records}")
        self._aggregate_records = aggregate_records
        self._retry_timeout = retry_timeout
        self._stats = stats or StatReceiver()
        self._sleep = sleep
        self._pending: list[Entry] = []
        self._pending_bytes = 0
        self._builders: dict[str, AggregateBuilder] = {}  # shard -> its aggregate being filled
        self._shards: tuple[list[int], list[str]] | None = None  # open shards: hash range starts, IDs
        self._limit: int | None = None  # the largest record the stream takes (described once, for a large record)
        #: User records written, Kinesis records written, PutRecords calls, entries sent again.
        self.records = self.entries = self.calls = self.retried = 0

    def put(self, data: bytes | str, partition_key: str, explicit_hash_key: str | None = None) -> None:
        """Write one record (sent once a call is full, or at :meth:`flush`)."""
        entry = _checked(data, partition_key, explicit_hash_key)
        large = entry.size > MAX_RECORD_BYTES
        if large:
            self._check_large(entry)
        if not self._aggregate:
            self._queue(entry)
            return
        shard = self._shard_of(hash_of(partition_key, explicit_hash_key))
        if large:  # never in an aggregate: after what the shard's aggregate holds, in a call of its own
            filling = self._builders.pop(shard, None)
            if filling is not None and len(filling):
                self._queue(filling.build())
            self._queue(entry)
            return
        builder = self._builders.get(shard)
        if builder is None:
            if len(self._builders) >= _MAX_BUILDERS:  # memory stays bounded on a stream of many shards
                self._queue_builders()
            builder = self._builders[shard] = AggregateBuilder(self._aggregate_bytes, self._aggregate_records)
        if not builder.add(partition_key, entry.data, explicit_hash_key):
            self._queue(builder.build())
            builder = self._builders[shard] = AggregateBuilder(self._aggregate_bytes, self._aggregate_records)
            builder.add(partition_key, entry.data, explicit_hash_key)

    def put_all(self, records: Iterable[tuple[bytes | str, str, str | None]]) -> None:
        """:meth:`put` each (data, partition key, explicit hash key)."""
        for data, key, hash_key in records:
            self.put(data, key, hash_key)

    def flush(self) -> None:
        """Send everything put so far; returns once Kinesis has taken it all."""
        self._queue_builders()
        if self._pending:
            self._send()

    def _queue_builders(self) -> None:
        for builder in self._builders.values():
            if len(builder):
                self._queue(builder.build())
        self._builders.clear()

    # ----------------------------------------------------------------- calls

    def _check_large(self, entry: Entry) -> None:
        """WriteError unless the stream takes a record of ``entry``'s size (its limit, described once)."""
        if self._limit is None:
            self._limit = retry_call(
                lambda: described_max_record_bytes(self._kinesis, self._stream),
                operation="DescribeStreamSummary", stats=self._stats, sleep=self._sleep,
            )  # fmt: skip
        if entry.size > self._limit:
            raise WriteError(
                f"the record of partition key {entry.partition_key!r} is {entry.size:,} bytes (data and partition "
                f"key): {self._stream} takes {self._limit:,} at most (its maximum record size); raise it with "
                "UpdateMaxRecordSize (up to 10 MiB), or write smaller records"
            )

    def _queue(self, entry: Entry) -> None:
        if entry.size > MAX_RECORD_BYTES:  # a large record: a call of its own, in its turn
            if self._pending:
                self._send()
            self._pending.append(entry)
            self._pending_bytes = entry.size
            self._send()
            return
        if len(self._pending) >= MAX_CALL_RECORDS or self._pending_bytes + entry.size > MAX_CALL_BYTES:
            self._send()
        self._pending.append(entry)
        self._pending_bytes += entry.size

    def _send(self) -> None:
        entries, self._pending, self._pending_bytes = self._pending, [], 0
        deadline = time.monotonic() + self._retry_timeout
        attempt = 0
        while True:
            failed = self._put_records(entries, deadline)
            self.entries += len(entries) - len(failed)
            self.records += sum(e.user_records for e in entries) - sum(e.user_records for e, _ in failed)
            if not failed:
                return
            codes = sorted({code for _, code in failed})
            for _, code in failed:
                self._stats.error_retried("PutRecords", code)
            if time.monotonic() >= deadline:
                raise WriteError(
                    f"{len(failed)} records were still refused by {self._stream} after {self._retry_timeout:g} s "
                    f"({', '.join(codes)}): a shard takes 1 MiB and 1,000 records a second; "
                    "add shards or write less at once"
                )
            self.retried += len(failed)
            self._sleep(random.uniform(0, min(_BACKOFF_MAX, _BACKOFF_FIRST * 2**attempt)))
            attempt += 1
            entries = [entry for entry, _ in failed]

    def _put_records(self, entries: list[Entry], deadline: float) -> list[tuple[Entry, str]]:
        """One PutRecords of ``entries`` (retried while it fails as a whole); the entries it refused, with why."""
        records = [entry.to_api() for entry in entries]

        def call() -> dict[str, Any]:
            return dict(self._kinesis.put_records(**self._params, Records=records))  # type: ignore[arg-type]

        try:
            response = retry_call(call, operation="PutRecords", stats=self._stats, sleep=self._sleep, deadline=deadline)
        except botocore.exceptions.ClientError as exc:
            if is_not_found(exc):
                raise StreamNotFound(self._stream) from exc
            raise WriteError(f"PutRecords to {self._stream} failed: {error_code(exc)}: {error_message(exc)}") from exc
        self.calls += 1
        failed = []
        for entry, result in zip(entries, response["Records"], strict=True):
            code = result.get("ErrorCode")
            if code is None:
                continue
            if code not in _RETRIED:
                raise WriteError(
                    f"{self._stream} refused the record of partition key {entry.partition_key!r}: "
                    f"{code}: {result.get('ErrorMessage', '')}"
                )
            failed.append((entry, str(code)))
        return failed

    # ----------------------------------------------------------------- shards

    def _shard_of(self, hash_key: int) -> str:
        """The open shard whose hash range holds ``hash_key`` (listed once)."""
        if self._shards is None:
            ranges = sorted(
                (shard.hash_range[0], shard.shard_id)
                for shard in list_shards(self._kinesis, self._stream)
                if not shard.closed and shard.hash_range is not None
            )
            self._shards = ([start for start, _ in ranges], [shard for _, shard in ranges])
        starts, ids = self._shards
        if not ids:  # no hash ranges listed: an aggregate per hash key still lands right
            return str(hash_key)
        return ids[max(0, bisect.bisect_right(starts, hash_key) - 1)]


def _checked(data: bytes | str, partition_key: str, explicit_hash_key: str | None) -> Entry:
    """The record as an entry, or WriteError naming its key if Kinesis cannot take it."""
    if not isinstance(partition_key, str) or not 1 <= len(partition_key) <= MAX_KEY_CHARS:
        shown = partition_key if not isinstance(partition_key, str) else repr(partition_key[:60])
        raise WriteError(f"a record's partition key must be 1 to {MAX_KEY_CHARS} characters, not {shown}")
    if isinstance(data, str):
        data = data.encode()
    elif not isinstance(data, bytes | bytearray | memoryview):
        raise WriteError(f"the record of partition key {partition_key!r} has no data (it is {data!r})")
    entry = Entry(bytes(data), partition_key, explicit_hash_key)
    if entry.size > LARGEST_RECORD_BYTES:
        raise WriteError(
            f"the record of partition key {partition_key!r} is {entry.size:,} bytes (data and partition key): "
            f"Kinesis takes {LARGEST_RECORD_BYTES:,} at most (on a stream whose maximum record size is raised to "
            "10 MiB)"
        )
    if explicit_hash_key is not None and not (explicit_hash_key.isdigit() and int(explicit_hash_key) <= _MAX_HASH):
        raise WriteError(
            f"the record of partition key {partition_key!r} has the explicit hash key {explicit_hash_key[:60]!r}: "
            "it must be a decimal number from 0 to 2**128 - 1"
        )
    return entry
