"""Offsets of the Spark source: the start positions of a micro-batch. Pure, no I/O.

An offset names batch N and where each of its shards starts; the executors record where
each shard *ended* in batch N (see ``batch_ends``), and the driver turns those ends into
the offset of batch N+1. Spark compares offsets as JSON text, so every dict is built in
sorted key order.

Position strings: ``TRIM_HORIZON``, ``AT_TIMESTAMP:<epoch ms>``, ``AFTER:<sequence number>``,
``AFTER:<sequence number>:<sub-sequence>`` (after that user record of a KPL aggregate) and,
for a recorded end only, ``SHARD_END``.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from ..aws.kinesis import ShardInfo
from ..errors import ConfigError
from ..reading.frontier import consumable_frontier
from ..reading.position import StartPosition

__all__ = [
    "SHARD_END",
    "TRIM_HORIZON",
    "BatchOffset",
    "ShardEnd",
    "Stop",
    "after",
    "after_record",
    "at_timestamp",
    "end_index",
    "follows",
    "next_offset",
    "passed_end",
    "to_start_position",
]

TRIM_HORIZON = "TRIM_HORIZON"
SHARD_END = "SHARD_END"


class Stop(enum.Enum):
    """Why a shard's read in a batch ended where it did (SHARD_END aside)."""

    MORE = "more"  # at the batch's limit or time budget: the shard has more
    TIP = "tip"  # at the tip of the stream: nothing more until new records come
    TARGET = "target"  # at the batch's ``until`` cut (Trigger.AvailableNow): nothing more for this query run


@attrs.frozen
class ShardEnd:
    """Where one shard's read in one batch ended, and why."""

    position: str
    stop: Stop = Stop.MORE  # ends recorded before stops were recorded: assume more
    #: How far the shard's tip was ahead of the read's last page (MillisBehindLatest), if the service said.
    behind: int | None = attrs.field(default=None, eq=False)
    #: The records the read handed over (as recorded in the ledger; None where not known).
    count: int | None = attrs.field(default=None, eq=False)


def after(sequence_number: str, sub_sequence: int | None = None) -> str:
    """After a record, or after user record ``sub_sequence`` of an aggregate."""
    return f"AFTER:{sequence_number}" if sub_sequence is None else f"AFTER:{sequence_number}:{sub_sequence}"


def after_record(record: Mapping[str, Any]) -> str:
    """After ``record`` (as the reader hands records on: a user record has a ``SubSequenceNumber``)."""
    return after(record["SequenceNumber"], record.get("SubSequenceNumber"))


def end_index(records: Sequence[Mapping[str, Any]], end: str) -> int | None:
    """The index of the last of ``records`` that a recorded end ``AFTER:...`` covers; None if none.

    ``AFTER:<seq>:<sub>`` names one user record; ``AFTER:<seq>`` a whole Kinesis record, so
    every user record of an aggregate at that sequence number (ends recorded before the source
    deaggregated still replay).
    """
    kind, _, value = end.partition(":")
    if kind != "AFTER":
        return None
    sequence_number, _, sub_sequence = value.partition(":")
    found = None
    for i, record in enumerate(records):
        if record["SequenceNumber"] != sequence_number:
            if found is not None:
                break
            continue
        if not sub_sequence or str(record.get("SubSequenceNumber")) == sub_sequence:
            found = i
    return found


def follows(position: str) -> int | None:
    """The sequence number a position ``AFTER:<seq>[:<sub>]`` follows; None for any other position."""
    kind, _, value = position.partition(":")
    return int(value.partition(":")[0]) if kind == "AFTER" else None


def passed_end(records: Sequence[Mapping[str, Any]], end: str) -> bool:
    """Whether ``records`` (a page of a shard) hold one after the record a recorded end ``AFTER:...``
    names: a replay that has not found its end there will not find it (retention trimmed it)."""
    after = follows(end)
    return after is not None and bool(records) and int(records[-1]["SequenceNumber"]) > after


def at_timestamp(when: dt.datetime) -> str:
    return f"AT_TIMESTAMP:{int(when.timestamp() * 1000)}"


def to_start_position(position: str) -> StartPosition:
    """The GetShardIterator position a position string stands for."""
    kind, _, value = position.partition(":")
    if kind == "AFTER":
        sequence_number, _, sub_sequence = value.partition(":")
        return StartPosition.after(sequence_number, int(sub_sequence) if sub_sequence else None)
    if kind == "AT_TIMESTAMP":
        return StartPosition.at_timestamp(dt.datetime.fromtimestamp(int(value) / 1000, dt.UTC))
    if position == TRIM_HORIZON:
        return StartPosition.trim_horizon()
    raise ConfigError("start position", "must be TRIM_HORIZON, AT_TIMESTAMP:<ms> or AFTER:<sequence number>", position)


@attrs.frozen
class BatchOffset:
    """Batch ``batch`` of run ``run`` starts each shard of ``shards`` at its position.

    ``done`` lists the shards read to their end that ListShards still returns (so they are
    not picked up again); ``initial`` is where newly consumable shards start. ``unread``
    names the shards the batch does not read, with what is known of them (a :class:`Stop`
    value); ``until`` is the Trigger.AvailableNow cut (epoch ms): records that arrived at
    or after it are left for the next query run. ``stream`` is the identity of the stream
    the positions belong to (``ARN@creation ms``; None in offsets written before it was
    recorded): positions of an earlier stream of the same name are never applied.
    """

    run: str
    batch: int
    initial: str
    shards: Mapping[str, str] = attrs.field(factory=dict)
    done: tuple[str, ...] = ()
    limit: int = 0  # records per shard in this batch; 0: no limit
    unread: Mapping[str, str] = attrs.field(factory=dict)
    until: int | None = None
    stream: str | None = None

    @property
    def read(self) -> list[str]:
        """The shards this batch reads, in order."""
        return [shard for shard in sorted(self.shards) if shard not in self.unread]

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "batch": self.batch,
            "done": sorted(self.done),
            "initial": self.initial,
            "limit": self.limit,
            "run": self.run,
            "shards": {shard: self.shards[shard] for shard in sorted(self.shards)},
        }
        if self.unread:  # only when set, so offsets written before these fields read back the same
            data["unread"] = {shard: self.unread[shard] for shard in sorted(self.unread)}
        if self.until is not None:
            data["until"] = self.until
        if self.stream is not None:
            data["stream"] = self.stream
        return dict(sorted(data.items()))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BatchOffset:
        return cls(
            run=str(data["run"]),
            batch=int(data["batch"]),
            initial=str(data["initial"]),
            shards=dict(data.get("shards", {})),
            done=tuple(data.get("done", ())),
            limit=int(data.get("limit", 0)),
            unread=dict(data.get("unread", {})),
            until=None if data.get("until") is None else int(data["until"]),
            stream=None if data.get("stream") is None else str(data["stream"]),
        )

    def foreign(self, stream: str) -> bool:
        """The positions belong to another incarnation of the stream (``stream``: the current one)."""
        return self.stream is not None and self.stream != stream

    def restarted(self, stream: str) -> BatchOffset:
        """This offset on the stream ``stream``, with nothing of an earlier stream's progress.

        The next batch starts every shard of ``stream`` that has no parent at ``initial``.
        """
        return BatchOffset(run=self.run, batch=self.batch, initial=self.initial, limit=self.limit, stream=stream)


def next_offset(start: BatchOffset, ends: Mapping[str, ShardEnd], listing: Iterable[ShardInfo]) -> BatchOffset:
    """The offset of the batch after ``start``, given where its shards ended.

    A shard without a recorded end starts where it started (it produced nothing). A shard
    that reached SHARD_END is dropped and remembered as done; its children join once every
    parent is done (or trimmed from the stream), so per-key order survives resharding.
    """
    listing = list(listing)
    listed = {s.shard_id for s in listing}
    positions = dict(start.shards)
    done = set(start.done)
    for shard, shard_end in ends.items():
        end = shard_end.position
        if shard not in positions:
            continue
        if end == SHARD_END:
            done.add(shard)
            del positions[shard]
        else:
            positions[shard] = end
    done &= listed  # a shard trimmed from the stream needs no remembering
    for shard in consumable_frontier(listing, done):
        positions.setdefault(shard, start.initial)
    return attrs.evolve(start, batch=start.batch + 1, shards=positions, done=tuple(sorted(done)), unread={})
