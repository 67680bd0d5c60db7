"""What the driver knows of one stream of a query: its identity, its shards, its probes, its consumer.

A query reads one stream or several (``streamName`` a list); :mod:`.stream_reader` keeps one
:class:`StreamSide` per stream and plans their batches together (:func:`~.planning.plan_streams`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

import attrs

from ..aws.kinesis import ShardInfo, created_at, ensure_stream_active, list_shards
from ..aws.stream_consumers import ensure_stream_consumer, stream_arn
from .batch_ends import BatchEnds, BatchLedger
from .clients import clients, s3_client
from .data_loss import DataLossCheck
from .offsets import BatchOffset, ShardEnd
from .options import SourceOptions
from .path_ledger import PathLedger
from .probe import Prober
from .shard_range import ShardRange

__all__ = ["StreamSide", "ledger"]

_LISTING_TTL = 1.0  # seconds a ListShards answer is reused by the driver

log = logging.getLogger("kinsumer.spark")


def ledger(options: SourceOptions, run: str) -> BatchLedger:
    """The batch ledger of ``run``: at ``metadataPath`` if set, else the DynamoDB table."""
    path = options.metadata_path
    if path is not None:
        return PathLedger(path, run, s3_client(options) if path.startswith("s3://") else None)
    return BatchEnds(clients(options)[1], options.table, run)


class StreamSide:
    """The driver's view of the stream ``name`` (made on the driver; never pickled)."""

    def __init__(self, options: SourceOptions, name: str) -> None:
        self._options = options
        self.name = name
        #: How its Kinesis calls name it: its ARN (streamARN), else its name.
        self.ref = options.ref(name)
        self._identity: str | None = None  # learnt once per query run (a restart learns it again)
        self._consumer: str | None = None  # the ARN of the fan-out consumer (consumerName), once registered
        self._listing: tuple[float, list[ShardInfo]] = (-_LISTING_TTL, [])
        self._ends: tuple[tuple[str, int], dict[str, ShardEnd]] = (("", -1), {})
        self._prober: Prober | None = None
        self.data_loss = self._data_loss_check()

    def _data_loss_check(self) -> DataLossCheck:
        return DataLossCheck(lambda: clients(self._options)[0], self.ref, self._options.fail_on_data_loss)

    def identity(self) -> str:
        """The identity of the stream (``ARN@creation ms``); StreamNotFound if it is not readable."""
        if self._identity is None:
            self._identity = ensure_stream_active(clients(self._options)[0], self.ref)
        return self._identity

    def consumer_arn(self) -> str | None:
        """The ARN of the enhanced fan-out consumer ``consumerName`` (registered if absent); None: polling."""
        name = self._options.consumer_name
        if name is not None and self._consumer is None:
            self._consumer = ensure_stream_consumer(clients(self._options)[0], stream_arn(self.identity()), name)
        return self._consumer

    def on_this_stream(self, offset: BatchOffset) -> BatchOffset:
        """``offset`` if its positions belong to the current stream; else a restart of every shard.

        Offsets written before the identity was recorded count as the current stream's.
        """
        stream = self.identity()
        if offset.stream is None:
            return attrs.evolve(offset, stream=stream)
        if not offset.foreign(stream):
            return offset
        log.warning(
            "the offsets of stream %s belong to an earlier stream of that name (created %s); this one was "
            "created %s: every shard starts from the query's initial position %s",
            self.name, created_at(offset.stream), created_at(stream), offset.initial,
        )  # fmt: skip
        self._prober = None  # its iterators are the earlier stream's
        self._consumer = None  # a consumer belongs to one stream
        self._listing = (-_LISTING_TTL, [])
        self.data_loss = self._data_loss_check()  # what it saw was the earlier stream's
        return offset.restarted(stream)

    def recorded_ends(self, offset: BatchOffset) -> dict[str, ShardEnd]:
        """Where the shards of ``offset``'s batch ended (a batch's ends are final once it ran: read once)."""
        if offset.batch < 0:
            return {}
        if self._ends[0] != (offset.run, offset.batch):
            self._ends = ((offset.run, offset.batch), ledger(self._options, offset.run).ends(offset.batch))
        return self._ends[1]

    def list_shards(self) -> list[ShardInfo]:
        listed_at, listing = self._listing
        if time.monotonic() - listed_at >= _LISTING_TTL:
            listing = list_shards(clients(self._options)[0], self.ref)
            self._listing = (time.monotonic(), listing)
        return listing

    def probe(self, positions: Mapping[str, str], until: int | None) -> dict[str, bool]:
        """For the shards of ``positions`` (at the tip) due for a probe: whether a record follows."""
        if not positions:
            return {}
        if self._prober is None:
            kinesis = clients(self._options)[0]
            self._prober = Prober(kinesis, self.ref, self._options.idle_batch_interval)
        return self._prober.probe(positions, positions, until)

    def ranges(self, offset: BatchOffset, previous: BatchOffset | None) -> list[ShardRange]:
        """The shard ranges batch ``offset`` reads on this stream; its ledger item planned (kept if it was).

        ``previous``: this stream's offset of the batch before (its ends say which shards fell far
        behind: :mod:`.data_loss` checks those, and every shard the query run reads first).
        """
        if not offset.read:
            return []
        if offset.foreign(self.identity()):  # a replay after the stream was created again: its records are gone
            log.warning(
                "batch %d was planned on an earlier stream %s (created %s): it reads nothing",
                offset.batch, self.name, created_at(offset.stream),
            )  # fmt: skip
            return []
        planned = ledger(self._options, offset.run)
        recorded = {} if planned.plan(offset.batch) else planned.ends(offset.batch)  # planned before: a replay
        listing = self.list_shards()
        closed = {s.shard_id for s in listing if s.closed}  # read those to their end
        ranges = {s.shard_id: s.hash_range for s in listing}
        prior = self.recorded_ends(previous) if previous is not None else {}
        positions = {shard: offset.shards[shard] for shard in offset.read}
        replays = {shard: end.position for shard, end in recorded.items() if shard in positions}
        starts = self.data_loss.starts(positions, listing, prior, replays)
        return [
            ShardRange(
                self.name,
                shard,
                offset.batch,
                starts[shard],
                offset.limit,
                self._options.read_time_budget,
                closed=shard in closed,
                until=offset.until,
                recorded=recorded[shard].position if shard in recorded else None,
                consumer=self.consumer_arn(),
                run=offset.run,
                hash_range=ranges.get(shard),
                drop_outside=self._options.drop_outside_shard,
                ref=self.ref,
            )
            for shard in offset.read
        ]
