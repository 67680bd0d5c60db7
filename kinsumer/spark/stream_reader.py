"""``spark.readStream.format("kinsumer")``: plans micro-batches on the driver, reads shards on the executors.

Driver: ``initialOffset`` / ``latestOffset`` / ``partitions`` list shards, read the batch
ledger and probe idle shards (:mod:`.probe`); they never read the records a batch holds.
Executors: ``read`` reads its shards' shares of a batch (:mod:`.shard_range`), concurrently,
with GetRecords or, given ``consumerName``, with enhanced fan-out (the driver registers the
consumer; idle shards are still probed with GetRecords).
One input partition per ``shardsPerTask`` shards that a batch reads.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import attrs
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from ..aws.kinesis import ShardInfo, created_at, ensure_stream_active, list_shards
from ..aws.stream_consumers import ensure_stream_consumer, stream_arn
from ..aws.tables import create_table
from .batch_ends import BatchEnds, BatchLedger
from .clients import clients, s3_client
from .data_loss import DataLossCheck
from .offsets import TRIM_HORIZON, BatchOffset, ShardEnd, at_timestamp
from .options import SourceOptions
from .path_ledger import PathLedger
from .planning import Limits, plan_next, shards_to_probe, task_groups
from .probe import Prober
from .shard_range import ShardRange, read_shard_ranges

try:  # pyspark >= 4.2: admission control and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - pyspark 4.0 / 4.1: one batch for availableNow, no read limits
    ReadAllAvailable = ReadLimit = ReadMaxRows = None  # type: ignore[assignment,misc]
    SupportsTriggerAvailableNow = object  # type: ignore[assignment,misc]

__all__ = ["KinsumerStreamReader", "ShardPartition"]

_LISTING_TTL = 1.0  # seconds a ListShards answer is reused by the driver
_KEPT_BATCHES = 2  # ledger items kept for batches before the newest (a restart replays the newest)

log = logging.getLogger("kinsumer.spark")


class ShardPartition(InputPartition):
    """The shards one task reads in one batch (pickled to an executor)."""

    def __init__(self, index: int, run: str, ranges: list[ShardRange]) -> None:
        super().__init__(index)
        self.run = run
        self.ranges = ranges


class KinsumerStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches on the driver and reads shards on the executors."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        initial = TRIM_HORIZON
        if options.initial_position == "LATEST":  # pinned now, so a replay means the same records
            initial = at_timestamp(dt.datetime.now(dt.UTC))
        elif options.at_timestamp is not None:
            initial = at_timestamp(options.at_timestamp)
        self._initial = initial
        self._run = uuid.uuid4().hex
        self._last: BatchOffset | None = None  # pyspark < 4.2 calls latestOffset() without a start
        self._listing: tuple[float, list[ShardInfo]] = (-_LISTING_TTL, [])
        self._ends: tuple[int, dict[str, ShardEnd]] = (-1, {})
        self._until: int | None = None  # Trigger.AvailableNow: the cut, epoch ms
        self._prober: Prober | None = None
        self._checked = False  # the stream exists and the ledger table too
        self._identity: str | None = None  # the stream's, learnt once per query run (a restart learns it again)
        self._consumer: str | None = None  # the ARN of the fan-out consumer (consumerName), once registered
        self._lag: dict[str, Any] | None = None  # how far behind the tip the last batch read ended (the progress)
        self._data_loss = DataLossCheck(lambda: clients(options)[0], options.stream, options.fail_on_data_loss)

    # ----------------------------------------------------------------- driver

    def initialOffset(self) -> dict[str, Any]:
        if not self._checked:  # Spark may ask twice
            self._stream()  # the stream exists: before making a table for it
            if self._options.metadata_path is None:
                create_table(clients(self._options)[1], self._options.table, "Key")
            self._consumer_arn()  # registered before the first batch, so a problem shows at the start
            self._checked = True
        return BatchOffset(run=self._run, batch=-1, initial=self._initial, stream=self._stream()).to_json()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read what arrived before now, in as many batches as the limits need."""
        self._until = int(time.time() * 1000)

    def getDefaultReadLimit(self) -> Any:
        total = self._options.max_records_per_trigger
        return ReadMaxRows(total) if total is not None else ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        current = BatchOffset.from_json(start) if start is not None else self._last
        if current is None:
            current = BatchOffset.from_json(self.initialOffset())
        current = self._on_this_stream(current)
        ends = self._recorded_ends(current)
        self._note_lag(current.batch, ends)
        listing = self._list_shards()
        probed = {}
        idle = shards_to_probe(current, ends, self._until)
        if idle:
            probed = self._probe(idle)
        following = plan_next(current, ends, listing, probed, self._limits(limit), self._until)
        if following is None:  # nothing new: no batch
            return start if start is not None else current.to_json()
        self._ledger(current.run).forget(current.batch - _KEPT_BATCHES)
        self._last = following
        return following.to_json()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """Shown as ``latestOffset`` in each micro-batch's progress: how far behind the stream the query is.

        ``millisBehindLatest``: the largest MillisBehindLatest at the end of the last batch's reads (the
        shard and batch named), as Spark's Kafka source reports offsets behind latest. The Python Data
        Source API has no custom source metrics (PySpark 4.0 to 4.3), so this is where it fits.
        ``dataLoss``: the data losses of this query run, once there was one (failOnDataLoss false).
        """
        loss = self._data_loss.progress()
        return self._lag if loss is None else {**(self._lag or {}), "dataLoss": loss}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[ShardPartition]:
        batch = BatchOffset.from_json(end)
        self._last = batch
        if start == end or batch.batch < 0:
            return []
        if batch.foreign(self._stream()):  # a replay after the stream was created again: its records are gone
            log.warning(
                "batch %d was planned on an earlier stream %s (created %s): it reads nothing",
                batch.batch, self._options.stream, created_at(batch.stream),
            )  # fmt: skip
            return []
        planned = self._ledger(batch.run)
        recorded = {} if planned.plan(batch.batch) else planned.ends(batch.batch)  # planned before: a replay
        opts = self._options
        listing = self._list_shards()
        closed = {s.shard_id for s in listing if s.closed}  # read those to their end
        prior = self._recorded_ends(BatchOffset.from_json(start)) if batch.batch > 0 else {}
        starts = self._data_loss.starts({shard: batch.shards[shard] for shard in batch.read}, listing, prior)
        ranges = [
            ShardRange(
                opts.stream,
                shard,
                batch.batch,
                starts[shard],
                batch.limit,
                opts.read_time_budget,
                closed=shard in closed,
                until=batch.until,
                recorded=recorded[shard].position if shard in recorded else None,
                consumer=self._consumer_arn(),
            )
            for shard in batch.read
        ]
        groups = task_groups(ranges, opts.shards_per_task)
        return [ShardPartition(i, batch.run, group) for i, group in enumerate(groups)]

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: ledger items are forgotten as later batches are planned."""

    def _stream(self) -> str:
        """The identity of the stream (``ARN@creation ms``); StreamNotFound if it is not readable."""
        if self._identity is None:
            self._identity = ensure_stream_active(clients(self._options)[0], self._options.stream)
        return self._identity

    def _consumer_arn(self) -> str | None:
        """The ARN of the enhanced fan-out consumer ``consumerName`` (registered if absent); None: polling."""
        name = self._options.consumer_name
        if name is not None and self._consumer is None:
            self._consumer = ensure_stream_consumer(clients(self._options)[0], stream_arn(self._stream()), name)
        return self._consumer

    def _on_this_stream(self, offset: BatchOffset) -> BatchOffset:
        """``offset`` if its positions belong to the current stream; else a restart of every shard.

        Offsets written before the identity was recorded count as the current stream's.
        """
        stream = self._stream()
        if offset.stream is None:
            return attrs.evolve(offset, stream=stream)
        if not offset.foreign(stream):
            return offset
        log.warning(
            "the offsets of stream %s belong to an earlier stream of that name (created %s); this one was "
            "created %s: every shard starts from the query's initial position %s",
            self._options.stream, created_at(offset.stream), created_at(stream), offset.initial,
        )  # fmt: skip
        self._prober = None  # its iterators are the earlier stream's
        self._consumer = None  # a consumer belongs to one stream
        self._listing = (-_LISTING_TTL, [])
        return offset.restarted(stream)

    def _note_lag(self, batch: int, ends: Mapping[str, ShardEnd]) -> None:
        """Keep (and log, once per batch) how far behind the tip the reads of ``batch`` ended."""
        known = {shard: end.behind for shard, end in ends.items() if end.behind is not None}
        if not known or (self._lag is not None and self._lag["batch"] == batch):
            return
        shard = max(sorted(known), key=lambda s: known[s])
        self._lag = {"batch": batch, "millisBehindLatest": known[shard], "shard": shard}
        log.info("batch %d: %s ended %d ms behind the tip of the stream (the furthest of %d shards read)",
                 batch, shard, known[shard], len(known))  # fmt: skip

    def _limits(self, limit: Any) -> Limits:
        total = self._options.max_records_per_trigger
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            total = int(limit.max_rows)
        elif ReadAllAvailable is not None and isinstance(limit, ReadAllAvailable):
            total = None
        return Limits(self._options.max_records_per_shard, total)

    def _probe(self, positions: Mapping[str, str]) -> dict[str, bool]:
        if self._prober is None:
            kinesis = clients(self._options)[0]
            self._prober = Prober(kinesis, self._options.stream, self._options.idle_batch_interval)
        return self._prober.probe(positions, positions, self._until)

    def _ledger(self, run: str) -> BatchLedger:
        return ledger(self._options, run)

    def _recorded_ends(self, offset: BatchOffset) -> dict[str, ShardEnd]:
        if offset.batch < 0:
            return {}
        if self._ends[0] != offset.batch:  # a batch's ends are final once it ran: read them once
            self._ends = (offset.batch, self._ledger(offset.run).ends(offset.batch))
        return self._ends[1]

    def _list_shards(self) -> list[ShardInfo]:
        listed_at, listing = self._listing
        if time.monotonic() - listed_at >= _LISTING_TTL:
            listing = list_shards(clients(self._options)[0], self._options.stream)
            self._listing = (time.monotonic(), listing)
        return listing

    # ----------------------------------------------------------------- executors

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, ShardPartition)
        kinesis = clients(self._options)[0]
        for _, batches in read_shard_ranges(kinesis, ledger(self._options, partition.run), partition.ranges):
            yield from batches


def ledger(options: SourceOptions, run: str) -> BatchLedger:
    """The batch ledger of ``run``: at ``metadataPath`` if set, else the DynamoDB table."""
    path = options.metadata_path
    if path is not None:
        return PathLedger(path, run, s3_client(options) if path.startswith("s3://") else None)
    return BatchEnds(clients(options)[1], options.table, run)
