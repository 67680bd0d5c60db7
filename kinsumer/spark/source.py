"""The PySpark Python Data Source ``kinsumer``: ``spark.readStream`` and ``spark.read``.

The options are checked when the DataFrame is defined (``load()``), so a mistake fails there,
with a message naming the option. Streaming: :mod:`.stream_reader`; a bounded batch read of
what the stream holds now: :mod:`.batch_reader`.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource

from .batch_reader import KinsumerBatchReader
from .options import SourceOptions
from .rows import SCHEMA
from .stream_reader import KinsumerStreamReader

__all__ = ["KinsumerDataSource"]


class KinsumerDataSource(DataSource):
    """``spark.readStream.format("kinsumer").option("streamName", ...).load()`` (or ``spark.read``)."""

    @classmethod
    def name(cls) -> str:
        return "kinsumer"

    def schema(self) -> str:
        # called at load(): check the options there, before any query starts (batch or stream
        # is not known yet; the batch-only rules are checked in reader())
        SourceOptions.from_options(self.options)
        return SCHEMA

    def streamReader(self, schema: Any) -> KinsumerStreamReader:
        return KinsumerStreamReader(SourceOptions.from_options(self.options))

    def reader(self, schema: Any) -> KinsumerBatchReader:
        return KinsumerBatchReader(SourceOptions.from_options(self.options, batch=True))
