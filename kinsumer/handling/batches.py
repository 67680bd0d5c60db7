"""``process_batches()``: a shard's records gathered into a batch, and a batch's failures.

Up to ``max_records`` consecutive records of one capture of a shard are gathered for up to
``max_wait`` s. The handler returns None (all done) or the records that failed: the batch is done
up to the first of them, and the rest goes again (as Lambda's partial batch responses). A batch
whose handler raises is split in halves until the failing records are alone (as Lambda's bisect
on error); only those count attempts (:class:`~.attempts.Attempts`). With ``decode``, the records of a
batch that do not decode go to the sink before the handler is called, and the rest goes to it without
them (:mod:`.decoding`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..delivery.delivery import Taken
from ..errors import KinsumerError
from ..failure import Reason, describe
from ..record import Record
from ..stats import StatReceiver
from ..waiting import WAKE
from .attempts import Attempts
from .capture import handling_of
from .decoding import Undecodable
from .options import BatchHandler
from .scheduler import Scheduler

__all__ = ["Batches", "first_failed", "one_record"]


class _ReportedFailed(Exception):
    """A batch handler returned a record (handled alone) as failed."""


class Batches:
    """Gathers and handles one worker's batches (see the module's description)."""

    def __init__(
        self,
        handler: BatchHandler,
        attempts: Attempts,
        scheduler: Scheduler[Taken],
        stats: StatReceiver,
        take: Callable[[float], Taken | None],
        park: Callable[[Taken], None],
        take_lock: threading.Lock,
        stopping: threading.Event,
        *,
        max_records: int,
        max_wait: float,
        traced: Callable[[list[Record], int], object] | None = None,
    ) -> None:
        """``take(timeout)``: the delivery's next record, for the holder of ``take_lock``; ``park``: parks it
        in its lane; ``traced``: the handler as ``traced(records, attempt)``, in a span (:mod:`.tracing`)."""
        self._handler = handler
        self._traced = traced
        self._attempts = attempts
        self._scheduler = scheduler
        self._stats = stats
        self._take = take
        self._park = park
        self._take_lock = take_lock
        self._stopping = stopping
        self._max_records = max_records
        self._max_wait = max_wait

    def gather(self, lane: str, items: list[Taken]) -> list[Taken]:
        """Up to ``max_records`` records of the lane's capture of a shard, waiting up to ``max_wait`` s for
        more to come."""
        most, progress = self._max_records, items[0][1]
        deadline = time.monotonic() + self._max_wait
        while True:
            if len(items) < most:
                more = self._scheduler.more(lane, most - len(items))
                same = [taken for taken in more if taken[1] is progress]
                items = items + same
                if len(same) < len(more):  # a later capture of the shard: its records wait for the next job
                    self._scheduler.put_back(lane, more[len(same) :])
                    return items
            left = deadline - time.monotonic()
            if len(items) >= most or left <= 0 or self._stopping.is_set() or progress.phase.revoked:
                return items
            if self._take_lock.acquire(timeout=min(WAKE, left)):
                try:
                    taken = self._take(min(WAKE, left))
                    if taken is not None:  # parked as the taker: the next taker's records come after it
                        self._park(taken)  # this lane's too: behind what is parked
                finally:
                    self._take_lock.release()

    def handle(self, items: list[Taken]) -> int:
        """Handle ``items`` as a batch until every record is done; how many are (fewer only on a stop)."""
        return self._batch(items, 0, len(items), {}, set())

    def _batch(self, items: list[Taken], low: int, high: int, attempts: dict[int, int], gone: set[int]) -> int:
        """Handle ``items[low:high]`` as a batch until every record is done (partial failures retried from
        the first failed one, a raising batch split in halves); how many from ``low`` are done. ``gone``:
        the indexes of records that expired (done: they went to the sink), left out of every call."""
        at = low
        while at < high:
            live = self._live(items, at, high, attempts, gone)
            if not live:
                return high - low
            at = live[0]
            records = [items[i][0] for i in live]
            reason: Reason
            calls = handling_of(items[at][1]).calls
            try:
                with self._scheduler.section():
                    started = calls[id(records)] = time.monotonic()
                    try:
                        if self._traced is None:
                            result = self._handler(records)
                        else:  # the attempt of its first record
                            result = self._traced(records, attempts.get(at, 0) + 1)
                    finally:
                        calls.pop(id(records), None)
            except Undecodable as exc:  # the handler was not called: those records go to the sink, the rest again
                self._undecodable(items, live, exc, attempts, gone)
                continue
            except Exception as exc:  # noqa: BLE001 - split, or counted against the record alone
                reason = self._attempts.count(exc, items[at][1])
                if len(records) > 1:  # halves, until the failing records are alone
                    middle = live[len(live) // 2]
                    done = self._batch(items, at, middle, attempts, gone)
                    if done < middle - at:
                        return at - low + done
                    at = middle
                    continue
                error = describe(exc)
            else:
                reason = "raised"
                first = first_failed(result, records)
                self._handled(items, live if first is None else live[:first], time.monotonic() - started)
                if first is None:
                    _ack(items, live)
                    return high - low
                _ack(items, live[:first])  # done up to the first failed one; the rest goes again
                at = live[first]
                error = "the batch handler returned it as failed"
                self._stats.handler_failed(items[at][1].shard_id, "ReportedFailed")
            record, progress, _ = items[at]
            attempts[at] = count = attempts.get(at, 0) + 1
            outcome = self._attempts.failed(record, progress, count, error, error, reason)
            if outcome == "left":
                return at - low
            if outcome == "done":
                _ack(items, [at])
                at += 1
        return high - low

    def _undecodable(
        self, items: list[Taken], live: list[int], exc: Undecodable, attempts: dict[int, int], gone: set[int]
    ) -> None:
        """The records of ``live`` that ``decode`` could not decode: each to the sink, done, and gone."""
        for i in live:
            record, progress, token = items[i]
            error = exc.errors.get(id(record))
            if error is not None:
                self._attempts.undecodable(record, progress, attempts.get(i, 0) + 1, error)
                gone.add(i)
                progress.ack(token)

    def _handled(self, items: list[Taken], done: list[int], seconds: float) -> None:
        """Count the records at ``done``, which a batch call of ``seconds`` did."""
        if not self._attempts.wants_handled:
            return
        if self._attempts.handled_per_run:  # once per shard of the call
            counts: dict[str, int] = {}
            for i in done:
                shard_id = items[i][1].shard_id
                counts[shard_id] = counts.get(shard_id, 0) + 1
            for shard_id, count in counts.items():
                self._stats.records_handled(shard_id, count, seconds)
        else:
            for i in done:
                self._stats.record_handled(items[i][1].shard_id, seconds)

    def _live(self, items: list[Taken], low: int, high: int, attempts: dict[int, int], gone: set[int]) -> list[int]:
        """The indexes in ``low:high`` of records to hand to the handler: those not gone, after the ones that
        are too old now went to the sink (each done)."""
        if self._attempts.max_age is None:
            return [i for i in range(low, high) if i not in gone]
        live = []
        for i in range(low, high):
            if i in gone:
                continue
            record, progress, token = items[i]
            if self._attempts.expired(record, progress, attempts.get(i, 0)):
                gone.add(i)
                progress.ack(token)
            else:
                live.append(i)
        return live


def one_record(handler: Callable[..., object]) -> Callable[..., None]:
    """``handler`` called with a batch of one record, raising if it returns the record as failed (and
    the rest of the arguments: the attempt, for a traced handler)."""

    def call(record: Record, *more: int) -> None:
        if first_failed(handler([record], *more), [record]) is not None:
            raise _ReportedFailed("the batch handler returned it as failed")

    return call


def first_failed(result: object, records: list[Record]) -> int | None:
    """None if the batch handler's result says every record is done; else the index of the first failed one."""
    if result is None:
        return None
    if not isinstance(result, list | tuple | set | frozenset):
        raise KinsumerError(f"a batch handler must return None or the records that failed, not {type(result).__name__}")
    if not result:
        return None
    failed = {id(record) for record in result}
    for i, record in enumerate(records):
        if id(record) in failed:
            return i
    raise KinsumerError("the batch handler returned records that were not in its batch")


def _ack(items: list[Taken], indexes: list[int]) -> None:
    for i in indexes:
        _, progress, token = items[i]
        progress.ack(token)
