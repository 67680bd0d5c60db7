"""The PySpark Python Data Source ``kinsumer``: ``spark.readStream`` and ``spark.read``; writing with :mod:`.sink`.

The options are checked when the DataFrame is defined (``load()``), so a mistake fails there,
with a message naming the option. Streaming: :mod:`.stream_reader`; a bounded batch read of
what the stream holds now: :mod:`.batch_reader`.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource

from ..errors import ConfigError
from .batch_reader import KinsumerBatchReader
from .options import SourceOptions
from .rows import SCHEMA
from .sink import KinesisStreamWriter, KinesisWriter, sink_columns
from .sink_options import SinkOptions
from .stream_reader import KinsumerStreamReader

__all__ = ["KinsumerDataSource"]


class KinsumerDataSource(DataSource):
    """``spark.readStream.format("kinsumer").option("streamName", ...).load()`` (or ``spark.read``);
    ``df.writeStream.format("kinsumer")`` (or ``df.write``) with columns ``data`` and ``partition_key``."""

    @classmethod
    def name(cls) -> str:
        return "kinsumer"

    def schema(self) -> str:
        # called at load(): check the options there, before any query starts (batch or stream
        # is not known yet; the batch-only rules are checked in reader())
        self._options()
        return SCHEMA

    def streamReader(self, schema: Any) -> KinsumerStreamReader:
        return KinsumerStreamReader(self._options())

    def reader(self, schema: Any) -> KinsumerBatchReader:
        return KinsumerBatchReader(self._options(batch=True))

    def writer(self, schema: Any, overwrite: bool) -> KinesisWriter:
        try:
            return KinesisWriter(SinkOptions.from_options(self.options), sink_columns(schema, overwrite))
        except ConfigError as exc:
            raise exc.with_traceback(None) from None  # as _options() does

    def streamWriter(self, schema: Any, overwrite: bool) -> KinesisStreamWriter:
        try:
            return KinesisStreamWriter(SinkOptions.from_options(self.options), sink_columns(schema, overwrite))
        except ConfigError as exc:
            raise exc.with_traceback(None) from None  # as _options() does

    def _options(self, batch: bool = False) -> SourceOptions:
        try:
            return SourceOptions.from_options(self.options, batch=batch)
        except ConfigError as exc:
            # Spark prints the traceback before the message: keep it to the frame that matters
            raise exc.with_traceback(None) from None
