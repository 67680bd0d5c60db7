"""``spark.read.format("kinsumer")``: a bounded read of what the stream holds now.

For backfills and notebooks. When the read is planned, the driver takes the time as the cut;
each shard of each stream named (one partition each, closed shards included) is read on an executor from the
starting position up to the first record that arrived at or after the cut, or its end, or
the tip of the stream. Page by page, so an executor holds one page at a time. No ledger: a
retried task reads the same records again (unless retention trimmed some meanwhile).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from ..aws.kinesis import list_shards, stream_exists
from ..errors import ConfigError, StreamNotFound
from ..reading.kpl import HashRange
from ..reading.polling import PollingReader
from ..reading.position import StartPosition
from ..reading.reader import outside_rule
from .clients import clients
from .options import SourceOptions
from .rows import page_rows

__all__ = ["KinsumerBatchReader"]


class ShardSlice(InputPartition):
    """One shard of ``stream``, read up to ``until`` (epoch ms)."""

    def __init__(
        self, index: int, stream: str, shard: str, until: int, closed: bool, hash_range: HashRange | None = None
    ) -> None:
        super().__init__(index)
        self.stream = stream
        self.shard = shard
        self.until = until
        self.closed = closed  # read to its end, not just to an empty page
        self.hash_range = hash_range  # from the listing: to find the KPL user records outside it


class KinsumerBatchReader(DataSourceReader):
    """Reads every shard of the streams, each up to the time the read was planned."""

    def __init__(self, options: SourceOptions) -> None:
        if options.initial_position == "LATEST":
            rule = "LATEST reads nothing in a batch read: use TRIM_HORIZON or AT_TIMESTAMP"
            raise ConfigError("option startingPosition", rule, "LATEST")
        self._options = options

    def partitions(self) -> list[ShardSlice]:
        kinesis = clients(self._options)[0]
        for stream in self._options.streams:
            if not stream_exists(kinesis, self._options.ref(stream)):
                raise StreamNotFound(self._options.ref(stream))
        until = int(time.time() * 1000)
        shards = [
            (stream, shard)
            for stream in self._options.streams
            for shard in sorted(list_shards(kinesis, self._options.ref(stream)), key=lambda s: s.shard_id)
        ]
        return [
            ShardSlice(i, stream, shard.shard_id, until, shard.closed, shard.hash_range)
            for i, (stream, shard) in enumerate(shards)
        ]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, ShardSlice)
        opts = self._options
        start = StartPosition.trim_horizon()
        if opts.at_timestamp is not None:
            start = StartPosition.at_timestamp(opts.at_timestamp)
        outside = outside_rule(partition.stream, partition.shard, partition.hash_range, opts.drop_outside_shard)
        reader = PollingReader(clients(opts)[0], opts.ref(partition.stream), partition.shard, start, outside=outside)
        while True:
            page = reader.next_page()
            rows, cut = page_rows(page.raw, partition.stream, partition.shard, partition.until)
            if rows.num_rows:
                yield rows
            if cut or page.end_of_shard or (page.at_tip and not partition.closed):
                return
