"""``spark.readStream.format("kinsumer")``: plans micro-batches on the driver, reads shards on the executors.

Driver: ``initialOffset`` / ``latestOffset`` / ``partitions`` list shards, read the batch
ledger and probe idle shards (:mod:`.probe`), for each stream of the query
(:mod:`.stream_side`); they never read the records a batch holds.
Executors: ``read`` reads its shards' shares of a batch (:mod:`.shard_range`), concurrently,
with GetRecords or, given ``consumerName``, with enhanced fan-out (the driver registers the
consumer; idle shards are still probed with GetRecords).
One input partition per ``shardsPerTask`` shards that a batch reads, of any of the streams.

Several streams (``streamName`` a list): each has an offset and ledger items of its own
(:mod:`.query_offset`); a stream named by a restarted query and not by its checkpoint starts at
the starting position, and one no longer named fails the query unless ``dropRemovedStreams``.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from ..aws.tables import create_table
from ..errors import ConfigError
from .batch_ends import BatchLedger
from .clients import clients
from .offsets import TRIM_HORIZON, BatchOffset, ShardEnd, Stop, at_timestamp
from .options import SourceOptions
from .planning import Limits, plan_streams, shards_to_probe, task_groups
from .query_offset import QueryOffset, stream_run
from .shard_range import ShardRange, read_shard_ranges
from .stream_side import StreamSide, ledger
from .trigger_wait import RecordCounter, TriggerWait

try:  # pyspark >= 4.2: admission control and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - pyspark 4.0 / 4.1: one batch for availableNow, no read limits
    ReadAllAvailable = ReadLimit = ReadMaxRows = ReadMinRows = None  # type: ignore[assignment,misc]
    SupportsTriggerAvailableNow = object  # type: ignore[assignment,misc]

__all__ = ["KinsumerStreamReader", "ShardPartition", "ledger"]

_KEPT_BATCHES = 2  # ledger items kept for batches before the newest (a restart replays the newest)

log = logging.getLogger("kinsumer.spark")


class ShardPartition(InputPartition):
    """The shards one task reads in one batch (pickled to an executor)."""

    def __init__(self, index: int, ranges: list[ShardRange]) -> None:
        super().__init__(index)
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
        self._last: QueryOffset | None = None  # pyspark < 4.2 calls latestOffset() without a start
        self._sides: dict[str, StreamSide] = {}
        self._until: int | None = None  # Trigger.AvailableNow: the cut, epoch ms
        self._wait: TriggerWait | None = None  # minRecordsPerTrigger
        self._checked = False  # the streams exist and the ledger table too
        self._progress: dict[str, Any] | None = None  # what the last batch read (the progress's latestOffset)

    # ----------------------------------------------------------------- driver

    def initialOffset(self) -> dict[str, Any]:
        streams = self._options.streams
        if not self._checked:  # Spark may ask twice
            for name in streams:  # each stream exists: before making a table for them
                self._side(name).identity()
            if self._options.metadata_path is None:
                create_table(clients(self._options)[1], self._options.table, "Key")
            for name in streams:  # registered before the first batch, so a problem shows at the start
                self._side(name).consumer_arn()
            self._checked = True
        offsets = {
            name: BatchOffset(
                run=self._run if len(streams) == 1 else stream_run(self._run, name),
                batch=-1,
                initial=self._initial,
                stream=self._side(name).identity(),
            )
            for name in streams
        }
        return QueryOffset.start(self._run, offsets).to_json()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read what arrived before now, in as many batches as the limits need."""
        self._until = int(time.time() * 1000)

    def getDefaultReadLimit(self) -> Any:
        total, least = self._options.max_records_per_trigger, self._options.min_records_per_trigger
        if total is not None:  # Python has no CompositeReadLimit: the minimum stays with the options
            return ReadMaxRows(total)
        return ReadMinRows(least) if least is not None else ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        current = self._offset(start) if start is not None else self._last
        if current is None:
            current = self._offset(self.initialOffset())
        current = self._these_streams(current)
        sides = {name: self._side(name) for name in current.streams}
        ends = {name: sides[name].recorded_ends(offset) for name, offset in current.streams.items()}
        self._note_progress(current, ends)
        until = self._until
        listings = {name: side.list_shards() for name, side in sides.items()}
        probed = {
            name: sides[name].probe(shards_to_probe(offset, ends[name], until), until)
            for name, offset in current.streams.items()
        }
        planned = self._admit(plan_streams(current.streams, ends, listings, probed, self._limits(limit), until), limit)
        if planned is None:  # nothing new: no batch
            return start if start is not None else current.to_json()
        for offset in current.streams.values():
            ledger(self._options, offset.run).forget(offset.batch - _KEPT_BATCHES)
        following = current.with_streams(planned)
        self._last = following
        return following.to_json()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """Shown as ``latestOffset`` in each micro-batch's progress: what the batch before it read, how far behind.

        Spark asks right after ``latestOffset``, so the figures are those of the batch before the
        one planned: ``records`` read by it (``batch``), ``shardsRead``, ``shardsAtTip`` (their reads
        ended at the tip of the stream), and ``millisBehindLatest``: the largest MillisBehindLatest at
        the end of its reads (the ``stream`` and ``shard`` named), as Spark's Kafka source reports
        offsets behind latest; per stream under ``streams`` when the query reads several. The Python
        Data Source API has no custom source metrics (PySpark 4.0 to 4.3), so this is where it fits.
        ``dataLoss``: the data losses of this query run, once there was one (failOnDataLoss false).
        """
        losses = {name: loss for name, side in sorted(self._sides.items()) if (loss := side.data_loss.progress())}
        if not losses:
            return self._progress
        return {**(self._progress or {}), "dataLoss": _data_loss_figures(losses)}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[ShardPartition]:
        query = self._offset(end)
        self._last = query
        if start == end or query.batch < 0:
            return []
        previous = self._offset(start).streams if start else {}
        ranges = [
            part
            for name, offset in query.streams.items()
            for part in self._side(name).ranges(offset, previous.get(name))
        ]
        groups = task_groups(ranges, self._options.shards_per_task)
        return [ShardPartition(i, group) for i, group in enumerate(groups)]

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: ledger items are forgotten as later batches are planned."""

    def _side(self, name: str) -> StreamSide:
        if name not in self._sides:
            self._sides[name] = StreamSide(self._options, name)
        return self._sides[name]

    def _offset(self, data: Mapping[str, Any]) -> QueryOffset:
        return QueryOffset.from_json(data, self._options.stream)

    def _these_streams(self, current: QueryOffset) -> QueryOffset:
        """``current`` on the streams the options name now: each on its current incarnation, new ones added.

        A stream the checkpoint reads and the options no longer name fails the query, unless
        ``dropRemovedStreams``: then it is left where it was.
        """
        wanted = self._options.streams
        removed = sorted(set(current.streams) - set(wanted))
        if removed and not self._options.drop_removed_streams:
            rule = (
                f"no longer names {', '.join(removed)}, which this query's checkpoint reads: name it again, "
                "or set dropRemovedStreams to true to stop reading it (its unread records stay unread)"
            )
            raise ConfigError("option streamName", rule, ",".join(wanted))
        if removed:
            log.warning("the query no longer reads %s (dropRemovedStreams): their unread records stay unread",
                        ", ".join(removed))  # fmt: skip
        streams = {}
        for name, offset in current.streams.items():
            if name in wanted:
                streams[name] = self._side(name).on_this_stream(offset)
                if streams[name].stream != offset.stream and offset.stream is not None:
                    self._wait = None  # its counting iterators are the earlier stream's
        for name in wanted:
            if name not in streams:
                log.info("stream %s joins the query at batch %d, from %s", name, current.batch + 1, self._initial)
                streams[name] = BatchOffset(
                    run=current.stream_run(name), batch=current.batch, initial=self._initial,
                    stream=self._side(name).identity(),
                )  # fmt: skip
        return current.with_streams(streams)

    def _note_progress(self, current: QueryOffset, ends: Mapping[str, Mapping[str, ShardEnd]]) -> None:
        """Keep (and log, once per batch) what the reads of ``current``'s batch did."""
        batch = current.batch
        if batch < 0 or (self._progress is not None and self._progress["batch"] == batch):
            return
        if not any(ends.values()):
            return
        progress: dict[str, Any] = {"batch": batch, **_read_figures(ends)}
        if len(current.streams) > 1:
            progress["streams"] = {name: _read_figures({name: ends[name]}) for name in sorted(ends) if ends[name]}
        self._progress = progress
        log.info("batch %d: %d records from %d shards (%d at the tip); furthest behind the tip: %s ms (%s %s)",
                 batch, progress["records"], progress["shardsRead"], progress["shardsAtTip"],
                 progress.get("millisBehindLatest"), progress.get("stream"), progress.get("shard"))  # fmt: skip

    def _admit(self, following: dict[str, BatchOffset] | None, limit: Any) -> dict[str, BatchOffset] | None:
        """``following``, or None while it waits for minRecordsPerTrigger records (:mod:`.trigger_wait`).

        Not for Trigger.AvailableNow (everything present runs: Spark ends the query at the first
        trigger without a batch) nor when Spark asks for all that is available (Trigger.Once).
        """
        least = self._options.min_records_per_trigger
        all_available = ReadAllAvailable is not None and isinstance(limit, ReadAllAvailable)
        if least is None or self._until is not None or all_available:
            return following
        if self._wait is None:
            interval = self._options.idle_batch_interval
            count = RecordCounter(clients(self._options)[0], interval, self._options.ref)
            self._wait = TriggerWait(least, self._options.max_trigger_delay, interval, count)
        return self._wait.admit(following)

    def _limits(self, limit: Any) -> Limits:
        total = self._options.max_records_per_trigger
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            total = int(limit.max_rows)
        elif ReadAllAvailable is not None and isinstance(limit, ReadAllAvailable):
            total = None
        return Limits(self._options.max_records_per_shard, total)

    # ----------------------------------------------------------------- executors

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, ShardPartition)
        kinesis = clients(self._options)[0]
        ledgers: dict[str, BatchLedger] = {}

        def ledger_of(part: ShardRange) -> BatchLedger:
            if part.run not in ledgers:
                ledgers[part.run] = ledger(self._options, part.run)
            return ledgers[part.run]

        for _, batches in read_shard_ranges(kinesis, ledger_of, partition.ranges):
            yield from batches


def _data_loss_figures(losses: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The data losses of the query run's streams (each stream's :meth:`DataLossCheck.progress`), as one."""
    keys = ("expired", "shards", "trimmed")
    total: dict[str, Any] = {key: sum(loss[key] for loss in losses.values()) for key in keys}
    if len(losses) == 1:
        [(stream, loss)] = losses.items()
        total["last"] = {**loss["last"], "stream": stream}
    else:  # each stream's own, with its last loss
        total["streams"] = dict(losses)
    return total


def _read_figures(ends: Mapping[str, Mapping[str, ShardEnd]]) -> dict[str, Any]:
    """Records, shards read and shards at the tip in a batch's recorded ends, and the largest lag."""
    read = {(stream, shard): end for stream, by_shard in ends.items() for shard, end in by_shard.items()}
    figures: dict[str, Any] = {
        "records": sum(end.count or 0 for end in read.values()),
        "shardsRead": len(read),
        "shardsAtTip": sum(end.stop is Stop.TIP for end in read.values()),
    }
    behind = {key: end.behind for key, end in read.items() if end.behind is not None}
    if behind:
        stream, shard = max(sorted(behind), key=lambda key: behind[key] or 0)
        figures.update(millisBehindLatest=behind[stream, shard], shard=shard, stream=stream)
    return figures
