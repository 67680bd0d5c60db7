"""Planning the next micro-batch on the driver. Pure, no I/O.

After batch N ran, each of its shards recorded where its read ended and why
(:class:`~.offsets.Stop`). A shard that stopped at a limit has more to read; one that
stopped at the tip of the stream is read again only once a probe (one GetRecords of at most
one record, on the driver) found something after its position; one that reached the
Trigger.AvailableNow cut is done for this query run. A batch is planned only when some
shard has something to read, so an idle stream costs a probe per shard now and then and no
empty micro-batches.

Tasks: a batch's shards are dealt out to tasks of at most ``shards_per_task`` shards each,
which a task reads concurrently (:func:`task_groups`).

Read limits: every shard read in a batch reads at most ``per_shard`` records; with a total
(``maxRecordsPerTrigger``), the batch's shards share it, so a batch never holds more.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

import attrs

from ..aws.kinesis import ShardInfo
from .offsets import BatchOffset, ShardEnd, Stop, next_offset

__all__ = ["Limits", "plan_next", "plan_streams", "shards_to_probe", "task_groups"]

T = TypeVar("T")


@attrs.frozen
class Limits:
    """How many records a batch may read: per shard, and in total (None: no total)."""

    per_shard: int
    total: int | None = None

    def share(self, shards: list[T], batch: int) -> tuple[list[T], int]:
        """The shards a batch reads and each one's limit.

        With fewer records in the total than shards, ``total`` shards read one record each,
        taken in turn from batch to batch so that none waits for ever.
        """
        if self.total is None or self.total >= len(shards):
            each = self.per_shard if self.total is None else min(self.per_shard, self.total // len(shards))
            return shards, each
        first = batch % len(shards)
        return (shards[first:] + shards[:first])[: self.total], 1


def _known_stops(current: BatchOffset, ends: Mapping[str, ShardEnd], until: int | None) -> dict[str, Stop]:
    """What is known of each shard of ``current`` after it ran (shards not named: more)."""
    stops: dict[str, Stop] = {}
    for shard in current.shards:
        if shard in current.unread:
            stop = Stop(current.unread[shard])
        elif shard in ends:
            stop = ends[shard].stop
        else:
            stop = Stop.MORE  # not read yet (the first batch) or no end recorded
        if stop is Stop.TARGET and current.until != until:
            stop = Stop.TIP  # reached another run's cut: look again
        stops[shard] = stop
    return stops


def shards_to_probe(current: BatchOffset, ends: Mapping[str, ShardEnd], until: int | None) -> dict[str, str]:
    """The shards of ``current`` that stopped at the tip, with the position a probe starts at."""
    return {
        shard: ends[shard].position if shard in ends else current.shards[shard]
        for shard, stop in sorted(_known_stops(current, ends, until).items())
        if stop is Stop.TIP
    }


def plan_next(
    current: BatchOffset,
    ends: Mapping[str, ShardEnd],
    listing: Iterable[ShardInfo],
    probed: Mapping[str, bool],
    limits: Limits,
    until: int | None = None,
) -> BatchOffset | None:
    """The batch after ``current``; None if no shard has anything to read.

    ``probed``: for shards at the tip, whether a probe found a record (before ``until``).
    """
    planned = plan_streams({"": current}, {"": ends}, {"": listing}, {"": probed}, limits, until)
    return None if planned is None else planned[""]


def plan_streams(
    current: Mapping[str, BatchOffset],
    ends: Mapping[str, Mapping[str, ShardEnd]],
    listings: Mapping[str, Iterable[ShardInfo]],
    probed: Mapping[str, Mapping[str, bool]],
    limits: Limits,
    until: int | None = None,
) -> dict[str, BatchOffset] | None:
    """The batch after ``current`` for each stream of a query (by name); None if no shard has anything to read.

    The streams' shards share the limits as one stream's would: a total is split over every
    shard with something to read, whatever its stream.
    """
    following: dict[str, BatchOffset] = {}
    stops: dict[str, dict[str, Stop]] = {}
    waiting: list[tuple[str, str]] = []
    for stream in sorted(current):
        following[stream], stops[stream] = _next_stops(
            current[stream], ends.get(stream, {}), listings.get(stream, ()), probed.get(stream, {}), until
        )
        waiting += [(stream, shard) for shard in sorted(stops[stream]) if stops[stream][shard] is Stop.MORE]
    if not waiting:
        return None
    read, limit = limits.share(waiting, next(iter(following.values())).batch)
    chosen = set(read)
    return {
        stream: attrs.evolve(
            offset,
            limit=limit,
            unread={shard: stop.value for shard, stop in stops[stream].items() if (stream, shard) not in chosen},
            until=until,
        )
        for stream, offset in following.items()
    }


def _next_stops(
    current: BatchOffset,
    ends: Mapping[str, ShardEnd],
    listing: Iterable[ShardInfo],
    probed: Mapping[str, bool],
    until: int | None,
) -> tuple[BatchOffset, dict[str, Stop]]:
    """The offset after ``current`` (limits not applied yet) and what is known of each of its shards."""
    known = _known_stops(current, ends, until)
    following = next_offset(current, ends, listing)
    stops: dict[str, Stop] = {}
    for shard in following.shards:
        stop = known.get(shard, Stop.MORE)  # a shard that just joined has everything to read
        if stop is Stop.TIP and shard in probed:
            stop = Stop.MORE if probed[shard] else (Stop.TIP if until is None else Stop.TARGET)
        stops[shard] = stop
    return following, stops


def task_groups(shards: Sequence[T], shards_per_task: int) -> list[list[T]]:
    """``shards`` dealt out to as few tasks as hold at most ``shards_per_task`` each, evenly (sizes differ by <= 1)."""
    tasks = math.ceil(len(shards) / shards_per_task)
    return [list(shards[i::tasks]) for i in range(tasks)]
