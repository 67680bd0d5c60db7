"""Writing to Kinesis from Spark: ``df.write.format("kinsumer")`` and ``df.writeStream.format("kinsumer")``.

Each task writes its rows with a :class:`~kinsumer.writing.writer.RecordWriter` (PutRecords of up
to 500 records / 5 MiB, refused entries sent again with backoff, nothing dropped, KPL aggregates
with ``aggregate``) and returns how much it wrote; the driver logs the batch's totals.

Columns: ``data`` (binary or string), ``partition_key`` (string), and optionally
``explicit_hash_key`` (string, a decimal hash key); other columns are not written.

At least once: a task that Spark runs again (it failed, or its executor was lost) writes its
rows again, and the rows its first attempt wrote stay in the stream. A consumer that needs each
row once keeps a deterministic id in the data and skips ids it has seen.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from ..errors import ConfigError
from ..writing.writer import RecordWriter
from .clients import kinesis_client
from .sink_options import SinkOptions

try:  # pyspark >= 4.1: rows handed over as Arrow batches
    from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter
except ImportError:  # pragma: no cover - pyspark 4.0: rows one by one
    DataSourceArrowWriter = DataSourceWriter  # type: ignore[misc,assignment]
    DataSourceStreamArrowWriter = DataSourceStreamWriter  # type: ignore[misc,assignment]

__all__ = ["KinesisStreamWriter", "KinesisWriter", "TaskWrote", "sink_columns"]

log = logging.getLogger("kinsumer.spark")

_COLUMNS = {"data": (BinaryType, StringType), "partition_key": (StringType,), "explicit_hash_key": (StringType,)}


@dataclass
class TaskWrote(WriterCommitMessage):
    """What one task wrote: user records, Kinesis records, PutRecords calls, entries sent again."""

    records: int
    entries: int
    calls: int
    retried: int


def sink_columns(schema: StructType, overwrite: bool) -> tuple[str, ...]:
    """The columns the sink writes, checked: ``data``, ``partition_key``, and ``explicit_hash_key`` if present."""
    if overwrite:
        raise ConfigError("mode", "a stream can only be appended to: use mode('append')", "overwrite")
    types = {field.name: field.dataType for field in schema.fields}
    for name in ("data", "partition_key"):
        if name not in types:
            have = ", ".join(types) or "none"
            raise ConfigError(f"column {name}", f"is required to write to Kinesis (the DataFrame has: {have})", None)
    for name, allowed in _COLUMNS.items():
        if name in types and not isinstance(types[name], allowed):
            kinds = " or ".join(kind.typeName() for kind in allowed)
            raise ConfigError(f"column {name}", f"must be {kinds}", types[name].simpleString())
    return tuple(name for name in _COLUMNS if name in types)


class _Writing:
    """What both writers do: write a task's rows, sum up the tasks."""

    def __init__(self, options: SinkOptions, columns: Sequence[str]) -> None:
        self._options = options
        self._columns = tuple(columns)

    def write(self, iterator: Iterator[Any]) -> TaskWrote:
        opts = self._options
        writer = RecordWriter(
            kinesis_client(opts.region, opts.endpoint_url), opts.stream, aggregate=opts.aggregate,
            aggregate_bytes=opts.aggregate_bytes, retry_timeout=opts.retry_timeout,
        )  # fmt: skip
        hashes = "explicit_hash_key" in self._columns
        for item in iterator:
            if isinstance(item, pa.RecordBatch):
                data = item.column("data").to_pylist()
                keys = item.column("partition_key").to_pylist()
                hash_keys = item.column("explicit_hash_key").to_pylist() if hashes else [None] * len(keys)
                writer.put_all(zip(data, keys, hash_keys, strict=True))
            else:  # a Row (pyspark 4.0)
                writer.put(item["data"], item["partition_key"], item["explicit_hash_key"] if hashes else None)
        writer.flush()
        return TaskWrote(writer.records, writer.entries, writer.calls, writer.retried)

    def _summary(self, messages: Sequence[Any], what: str) -> None:
        wrote = [m for m in messages if isinstance(m, TaskWrote)]
        log.info(
            "%s: %d records written to %s (%d Kinesis records, %d PutRecords calls, %d entries sent again)",
            what, sum(m.records for m in wrote), self._options.stream, sum(m.entries for m in wrote),
            sum(m.calls for m in wrote), sum(m.retried for m in wrote),
        )  # fmt: skip

    def _aborted(self, messages: Sequence[Any], what: str) -> None:
        written = sum(m.records for m in messages if isinstance(m, TaskWrote))
        log.warning("%s failed; %d records its finished tasks wrote stay in %s", what, written, self._options.stream)


class KinesisWriter(_Writing, DataSourceArrowWriter):
    """``df.write.format("kinsumer")``: a batch DataFrame into a stream."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self._summary(messages, "the write")

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self._aborted(messages, "the write")


class KinesisStreamWriter(_Writing, DataSourceStreamArrowWriter):
    """``df.writeStream.format("kinsumer")``: each micro-batch into a stream."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._summary(messages, f"batch {batchId}")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._aborted(messages, f"batch {batchId}")
