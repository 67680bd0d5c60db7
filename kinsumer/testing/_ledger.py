"""The ledger: what a fleet's handlers did with the records put, checked against kinsumer's promises.

:meth:`Ledger.wrap` wraps a user's handler for one client; each call that returns is one handling (the
dead-letter sink's calls, through :meth:`Ledger.wrap_sink`, count as handlings too). The fleet tells it of each
client's captures (``shard_gained``, a handoff's verdict, ``shard_lost``: :class:`~kinsumer.StatReceiver`
calls), of a shard taken from a client found silent, of crashes, and of the lifecycle hooks
(:meth:`Ledger.wrap_hook`). :meth:`Ledger.report` holds it against the records put (the stream's records as
:class:`~kinsumer.testing.LocalKinesis` stores them, KPL aggregates as their user records) and says:

- which records were never handled (lost: kinsumer promises none, ever);
- which were handled more than once, and why that is allowed (:data:`~kinsumer.testing.Reason`: the earlier
  capture ended in a crash, a handoff that timed out, or the shard taken from a silent client; with manual
  checkpoints, :meth:`Ledger.wrap_manual`, the record was past the checkpoints called when its shard moved) or not
  (a clean handoff, a clean stop: kinsumer promises no duplicate then; with manual checkpoints, a record
  checkpointed before its shard moved);
- order: each record's first handling, per shard in the shard's order, and per partition key in the order the
  records were put (across splits and merges: children after their parents);
- the lifecycle hooks per client and shard: ``on_assigned`` before a capture's first record, ``on_revoked``
  after its last is done;
- which records were handled only in captures that ended without a clean handoff (stranded: state a handler
  kept of them in memory is gone, and they are not delivered again).

Without the fleet's events (a ledger used alone), each client holds each shard in one capture.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import attrs

from ..delivery.progress import Checkpoint
from ..failure import Failure
from ..handling.batches import first_failed
from ..handling.timeouts import call_abandoned
from ..record import Record
from ._capture import Capture, Handling, Reason, RecordKey, repeat_reason
from ._report import HookViolation, Report, build_report
from ._stream import StoredRecord

__all__ = ["Ledger"]

_CHECK_EVERY = 0.25  # seconds between two calls of wait_for()'s check while it waits

#: A call begun: its capture, its tick, and (under ``process()``'s ``timeout``) whether kinsumer abandoned it.
_Started = tuple[Capture, int, "Callable[[], bool] | None"]


class Ledger:
    """Records each handling of a fleet's clients, their captures and crashes (thread-safe)."""

    def __init__(self, *, shard_order: bool = True) -> None:
        """``shard_order``: each shard's records are handled in the shard's order (False: per key only, as
        ``process(ordering="key")`` with several workers promises; the report then checks per key only)."""
        self._shard_order = shard_order
        self._lock = threading.Condition()
        self._tick = 0
        self._handlings: list[Handling] = []
        self._captures: dict[tuple[str, str], list[Capture]] = {}
        self._crashed: set[str] = set()  # crashed: its captures end so
        self._dead: set[str] = set()  # crashed and cut off: its handler is no longer called, nothing counts
        self._orphans: list[HookViolation] = []
        self._hooks = False
        self._distinct: set[RecordKey] = set()
        self._gates: dict[str, threading.Event] = {}  # a paused client's is clear: its calls wait

    def _next(self) -> int:
        self._tick += 1
        return self._tick

    # ----------------------------------------------------------------- wrapping the user's callables

    def wrap(self, client: str, handler: Callable[..., object], *, batches: bool = False) -> Callable[..., object]:
        """``handler`` for ``client``, recording each call that returns (not one that raises: it will be retried).
        The record is the call's last argument (``process(decode=...)`` passes the value first); with ``batches``
        (``process_batches()``'s handler) the records of its list, counted up to the first it returned as failed
        (those after go again, as kinsumer hands them back). Once ``client`` crashed, the handler is no longer
        called: the process is gone."""

        def handle(*args: Any) -> object:
            records = _records_of(args[-1], batches)
            started = self._begin(client, records)
            if started is None:
                return None if records else handler(*args)
            result = handler(*args)
            self._did(client, records, result, started, batches)
            return result

        return handle

    def wrap_async(
        self, client: str, handler: Callable[..., Awaitable[object]], *, batches: bool = False
    ) -> Callable[..., Awaitable[object]]:
        """An async ``handler`` (``aprocess()``'s, or ``aprocess_batches()``'s with ``batches``) for ``client``,
        recorded as :meth:`wrap` records its. A paused client's call waits on its event loop, as the process's
        would."""

        async def handle(*args: Any) -> object:
            records = _records_of(args[-1], batches)
            started = self._begin(client, records)
            if started is None:
                return None if records else await handler(*args)
            result = await handler(*args)
            self._did(client, records, result, started, batches)
            return result

        return handle

    def wrap_manual(
        self, client: str, handler: Callable[[Record, Checkpoint], object]
    ) -> Callable[[Record, Checkpoint], object]:
        """A manual-checkpoint ``handler`` (``handler(record, checkpoint)``, a loop over
        ``next_record_with_checkpointer()``) for ``client``: each call that returns is a handling, as with
        :meth:`wrap`; the record counts as delivered when the call begins, and the ``checkpoint`` the handler gets
        (a :class:`~kinsumer.Checkpoint` still) records its calls: whether each came while the capture held the
        shard, so that it counted. Once ``client`` crashed, neither the handler nor a checkpoint does anything."""

        def handle(record: Record, checkpoint: Checkpoint) -> object:
            delivered = self._delivered(client, record, checkpoint)
            if delivered is None:
                return None
            started, noted = delivered
            result = handler(record, noted)
            self._did(client, [record], result, started, batches=False)
            return result

        return handle

    def wrap_manual_async(
        self, client: str, handler: Callable[[Record, Checkpoint], Awaitable[object]]
    ) -> Callable[[Record, Checkpoint], Awaitable[object]]:
        """An async manual-checkpoint ``handler`` (a loop over ``anext_record_with_checkpointer()``) for ``client``,
        recorded as :meth:`wrap_manual` records its (the checkpoint stays a plain call)."""

        async def handle(record: Record, checkpoint: Checkpoint) -> object:
            delivered = self._delivered(client, record, checkpoint)
            if delivered is None:
                return None
            started, noted = delivered
            result = await handler(record, noted)
            self._did(client, [record], result, started, batches=False)
            return result

        return handle

    def _delivered(self, client: str, record: Record, checkpoint: Checkpoint) -> tuple[_Started, _Noted] | None:
        """Manual mode: ``record`` is delivered to ``client``'s handler with ``checkpoint``: the call begun (see
        :meth:`_begin`; None: the handler is not called) and the checkpoint to give it, which the ledger records."""
        started = self._begin(client, [record])
        if started is None:
            return None
        capture, key = started[0], _key(record)
        with self._lock:
            capture.deliver(key)
        return started, _Noted.of(checkpoint, lambda ack: self._checkpoint(client, capture, key, ack))

    def _checkpoint(self, client: str, capture: Capture, key: RecordKey, ack: Callable[[], bool]) -> None:
        """The checkpoint of ``key``, delivered in ``capture``, is called: ``ack()`` calls kinsumer's and says
        whether it counted (the capture held the shard). A paused client's call waits; a dead one's does nothing."""
        if not self._through(client):
            return
        if ack():
            with self._lock:
                if client not in self._dead:
                    capture.checkpoint(key)

    def wrap_sink(self, client: str, sink: Callable[[Failure], object]) -> Callable[[Failure], object]:
        """The dead-letter ``sink`` for ``client``: each call that returns counts its record as handled."""

        def dead_letter(failure: Failure) -> object:
            started = self._begin(client, [failure.record])
            if started is None:
                return None
            result = sink(failure)
            self._done(client, failure.record, started, dead_lettered=True)
            return result

        return dead_letter

    def _begin(self, client: str, records: list[Record]) -> _Started | None:
        """A call on ``records`` (all of one shard) begins: its capture and tick (and, under ``process()``'s
        ``timeout``, how to learn whether kinsumer abandoned it); None if there is none to record (no record) or
        nothing more of ``client`` is called (it crashed, meanwhile too: a paused one waits here)."""
        if not records:
            return None
        started = self._start(client, records[0].shard_id)
        if started is None or not self._through(client):
            return None
        return (*started, call_abandoned())

    def _did(self, client: str, records: list[Record], result: object, started: _Started, batches: bool) -> None:
        """The call on ``records`` returned ``result``: record what it did (a batch call: up to its first failed)."""
        first = first_failed(result, records) if batches else None
        for record in records if first is None else records[:first]:
            self._done(client, record, started, dead_lettered=False)

    def wrap_hook(self, client: str, hook: str, function: Callable[[str], object] | None) -> Callable[[str], object]:
        """``process()``'s lifecycle ``hook`` (``on_assigned``, ``on_revoked``, ``on_lost``) for ``client``:
        records the call, then calls ``function`` (if given). Not called once ``client`` crashed."""
        if hook not in ("on_assigned", "on_revoked", "on_lost"):
            raise ValueError(f"hook: one of on_assigned, on_revoked, on_lost, not {hook!r}")
        with self._lock:
            self._hooks = True

        def call(shard_id: str) -> object:
            if not self._through(client):
                return None
            go, ending = self._hooked(client, hook, shard_id)
            if not go:
                return None
            try:
                return None if function is None else function(shard_id)
            finally:
                if ending is not None:
                    self._hook_returned(ending)

        return call

    # ----------------------------------------------------------------- events

    def gained(self, client: str, shard_id: str) -> None:
        """``client`` captured ``shard_id`` (``StatReceiver.shard_gained``)."""
        with self._lock:
            capture = Capture(client, shard_id, self._next())
            if client in self._crashed:
                capture.end("crash")
            self._captures.setdefault((client, shard_id), []).append(capture)

    def lost(self, client: str, shard_id: str) -> None:
        """``client``'s capture of ``shard_id`` ended (``StatReceiver.shard_lost``)."""
        with self._lock:
            capture = self._current(client, shard_id)
            if capture.closed is None:
                capture.closed = self._next()
            self._lock.notify_all()

    def handoff(self, client: str, shard_id: str, clean: bool) -> None:
        """``client``'s handoff of ``shard_id`` ended (``StatReceiver.handoff``): timed out unless ``clean``."""
        if not clean:
            self._ended(client, shard_id, "handoff timed out")

    def taken(self, client: str, shard_id: str) -> None:
        """Another client took ``shard_id`` from ``client`` without a release (it found ``client`` silent)."""
        self._ended(client, shard_id, "taken")

    def crash(self, client: str, cut: Callable[[], object] = lambda: None) -> None:
        """``client`` crashed: the captures it holds end so; ``cut()`` is called (the fleet cuts its connections
        there), and from then on its handler and hooks are no longer called and nothing it does counts."""
        with self._lock:
            self._crashed.add(client)
            for (owner, _), captures in self._captures.items():
                for capture in captures:
                    if owner == client and capture.closed is None:
                        capture.end("crash")
        cut()
        with self._lock:
            self._dead.add(client)
            self._gates.setdefault(client, threading.Event()).set()  # a paused process dies too
            self._lock.notify_all()

    def pause(self, client: str) -> None:
        """``client``'s process is stopped: a call of its handler, sink or hooks waits (after the ledger noted
        when it was made) until :meth:`resume` or a crash."""
        with self._lock:
            self._gates.setdefault(client, threading.Event()).clear()

    def resume(self, client: str) -> None:
        with self._lock:
            self._gates.setdefault(client, threading.Event()).set()

    def _through(self, client: str) -> bool:
        """Wait while ``client`` is paused; False if it died meanwhile (nothing more of it is called)."""
        with self._lock:
            gate = self._gates.get(client)
        if gate is not None:
            gate.wait()
        return not self.crashed(client)

    def crashed(self, client: str) -> bool:
        with self._lock:
            return client in self._dead

    def _ended(self, client: str, shard_id: str, reason: Reason) -> None:
        with self._lock:
            self._current(client, shard_id).end(reason)
            self._lock.notify_all()

    def _current(self, client: str, shard_id: str) -> Capture:
        """The latest capture of ``shard_id`` by ``client`` (lock held); one made if there is none."""
        captures = self._captures.setdefault((client, shard_id), [])
        if not captures:
            captures.append(Capture(client, shard_id, self._next()))
        return captures[-1]

    def _start(self, client: str, shard_id: str) -> tuple[Capture, int] | None:
        with self._lock:
            if client in self._dead:
                return None
            return self._current(client, shard_id), self._next()

    def _done(self, client: str, record: Record, started: _Started, dead_lettered: bool) -> None:
        key = _key(record)
        capture, tick, abandoned = started
        with self._lock:
            if client not in self._dead:
                handling = Handling(
                    key, record.partition_key, client, capture, tick, self._next(), dead_lettered, abandoned
                )
                self._handlings.append(handling)
                self._distinct.add(key)
                self._lock.notify_all()

    def _hooked(self, client: str, hook: str, shard_id: str) -> tuple[bool, Capture | None]:
        """Record ``hook`` for ``shard_id``: whether to call it (not if ``client`` is dead), and for an end hook the
        capture it ends (its return is recorded too)."""
        with self._lock:
            if client in self._dead:
                return False, None
            if hook == "on_assigned":
                capture = self._current(client, shard_id)
                if capture.assigned is not None:
                    capture.assigned_again = True
                else:
                    capture.assigned = self._next()
                return True, None
            # an end hook runs on a thread of its own: it ends the earliest announced capture not yet ended
            captures = self._captures.get((client, shard_id), [])
            announced = next((c for c in captures if c.assigned is not None and c.end_hook is None), None)
            if announced is None:  # every capture announced has had its end hook
                self._orphans.append(HookViolation(client, shard_id, f"{hook} without on_assigned"))
            else:
                announced.end_hook = (hook, self._next())
            return True, announced

    def _hook_returned(self, capture: Capture) -> None:
        with self._lock:
            capture.end_hook_returned = self._next()

    # ----------------------------------------------------------------- reading it

    def held(self, client: str) -> list[str]:
        """The shards ``client`` holds now (captured, not given up), by ID."""
        with self._lock:
            return sorted(s for (c, s), cs in self._captures.items() if c == client and cs[-1].closed is None)

    @property
    def distinct(self) -> int:
        """How many different records were handled."""
        with self._lock:
            return len(self._distinct)

    def wait_for(self, count: int, timeout: float, check: Callable[[], None] | None = None) -> None:
        """Wait until ``count`` different records were handled; TimeoutError after ``timeout`` seconds. ``check``,
        if given, is called every :data:`_CHECK_EVERY` s meanwhile, to raise what the wait would never end for (a
        client's ``process()`` that raised: see :meth:`~kinsumer.testing.Fleet.wait_handled`)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self._distinct) < count:
                if check is not None:
                    check()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{len(self._distinct)} of {count} records handled after {timeout:g} s")
                self._lock.wait(left if check is None else min(left, _CHECK_EVERY))

    def wait_settled(self, timeout: float) -> bool:
        """Wait until every repeat nothing allows yet involves only captures whose end is known (a timed-out
        handoff is told after the release, so the next owner may handle first); False after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not self._settled():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(min(left, 0.1))
        return True

    def _settled(self) -> bool:
        last: dict[RecordKey, Handling] = {}
        for h in self._handlings:
            earlier = last.get(h.key)
            if (
                earlier is not None
                and repeat_reason(earlier, h) is None
                and not (earlier.capture.settled and h.capture.settled)
            ):
                return False
            last[h.key] = h
        return True

    def report(self, put: Iterable[StoredRecord]) -> Report:
        """The handlings against the records ``put`` (:meth:`LocalKinesis.records`)."""
        with self._lock:
            handlings, orphans, hooks = list(self._handlings), list(self._orphans), self._hooks
            captures = [c for cs in self._captures.values() for c in cs]
            return build_report(put, handlings, captures, orphans, hooks, self._shard_order)


def _key(record: Record) -> RecordKey:
    return (record.shard_id, record.sequence_number, record.sub_sequence_number or 0)


@attrs.frozen
class _Noted(Checkpoint):
    """A record's :class:`~kinsumer.Checkpoint` whose calls go through the ledger: ``noted(ack)`` is called with
    the call of kinsumer's checkpoint, which says whether it counted (came while its capture held the shard).
    That is sure when the capture was released neither before the call nor after it; a release during the call
    leaves it unknown, and it is taken as not (the record, if handled again, counts as not checkpointed rather
    than as a fault)."""

    _noted: Callable[[Callable[[], bool]], object] = attrs.field(kw_only=True, repr=False, eq=False)

    @classmethod
    def of(cls, checkpoint: Checkpoint, noted: Callable[[Callable[[], bool]], object]) -> _Noted:
        fields: dict[str, Any] = {str(f.alias): getattr(checkpoint, f.name) for f in attrs.fields(Checkpoint)}
        return cls(**fields, noted=noted)

    def __call__(self) -> None:
        self._noted(self._ack)

    def _ack(self) -> bool:
        released_before = self._progress.released
        Checkpoint.__call__(self)
        return not released_before and not self._progress.released


def _records_of(argument: Any, batches: bool) -> list[Record]:
    """A handler call's records: its last argument; a batch handler's list, or with ``decode`` the records of its
    ``(value, record)`` pairs."""
    if not batches:
        return [argument]
    return [item[-1] if isinstance(item, tuple) else item for item in argument]
