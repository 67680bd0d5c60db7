"""The attempt rule, in one place: a handler's calls on one record, the backoff between them, and the sink.

A call that fails is counted (``handler_failed``) and noted in the shard's row for operators;
before ``max_attempts`` the next call waits ``backoff`` seconds, doubled each time up to
``max_backoff`` (the later records of the shard wait too; with ``ordering="key"``, of its key);
after the last, the record becomes a :class:`~.failure.Failure` and goes to the dead-letter sink,
tried like a handler; without a sink, or when the sink fails too, :class:`~kinsumer.RecordFailed`
is raised and the record stays unacknowledged. A wait ends early when the consumer stops or the
shard is being given up (by key: once it was released, see ``Processor``): the
record is then *left* (not handled here; the shard's next owner delivers it).

With ``max_record_age``, a record older than that when its turn comes (before each call, the first
or a retry) goes to the sink as ``expired`` without a call (:meth:`Attempts.expired`). With ``decode``,
a record the decoder cannot decode goes to the sink as ``decode`` at once (:mod:`.decoding`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Literal

from .. import clock
from ..delivery.progress import ShardProgress
from ..errors import RecordFailed
from ..failure import Failure, Reason, describe
from ..record import Record
from ..stats import GuardedStats, StatReceiver
from ..waiting import sleep_unless
from .capture import guard_of, handling_of
from .decoding import Undecodable
from .options import Options, Origin
from .timeouts import HandlerTimedOut

__all__ = ["Attempts", "Outcome", "SpanIds"]

log = logging.getLogger("kinsumer.process")

_now = clock.wall  # the clock a record's age is read on (a module global: tests set their own)

#: A span's trace and span IDs (hex), or (None, None)
SpanIds = tuple[str | None, str | None]

#: How handling a record ended: done (acknowledge it), or left (not handled here: its shard's next owner will).
Outcome = Literal["done", "left"]


class Attempts:
    """Calls ``call(record)`` until the record is done (see the module's description)."""

    def __init__(
        self,
        options: Options,
        origin: Origin,
        stats: StatReceiver,
        call: Callable[[Record], object],
        section: Callable[[], AbstractContextManager[None]],
        woken: threading.Event,
        cut_short: Callable[[ShardProgress], bool],
        tracing: tuple[Callable[[Record, int], object], Callable[[], SpanIds]] | None = None,
    ) -> None:
        """``call``: the handler on one record; ``section``: the handler section a call runs in (beside
        others, see :class:`~.scheduler.Scheduler`); ``cut_short(progress)``: a wait before the next
        call on a record of that capture ends, leaving the record (``process()`` ends, the consumer
        stops, the shard is being given up); ``woken``: set when one may have to. ``tracing``: the
        handler as ``traced(record, attempt)`` (in a span, :mod:`.tracing`) and the IDs of the span of the
        last failed call, for the Failure."""
        self._options = options
        self._origin = origin
        self._stats = stats
        self._call = call
        self._section = section
        self._woken = woken
        self._cut_short = cut_short
        self._traced: Callable[[Record, int], object] | None = None
        self._failed_span: Callable[[], SpanIds] | None = None
        if tracing is not None:
            self._traced, self._failed_span = tracing
        #: None without ``max_record_age``: the callers skip the check (a record's age costs a clock read)
        self.max_age = options.max_record_age
        #: the receiver counts records handed over, and records done: the callers skip the per-record calls if not
        self.stats = stats
        self.wants_deliveries = self.wants_handled = True
        #: ... and takes them a run at a time (records_delivered, records_handled): the fast path counts a run
        self.deliveries_per_run = self.handled_per_run = False
        if isinstance(stats, GuardedStats):
            self.wants_deliveries, self.wants_handled = stats.wants_deliveries, stats.wants_handled
            self.deliveries_per_run, self.handled_per_run = stats.deliveries_per_run, stats.handled_per_run

    def until_done(
        self, record: Record, progress: ShardProgress, *, exclusive: bool = False, first: int = 1
    ) -> Outcome:
        """Call the handler until the record is done (``first``: the number of this call); ``exclusive``:
        alone in the process (the crash-loop guard's careful mode)."""
        attempt = first - 1
        while True:
            attempt += 1
            if self.max_age is not None and self.expired(record, progress, attempt - 1):
                return "done"
            calls, traced = handling_of(progress).calls, self._traced
            try:
                if exclusive:
                    started = calls[id(record)] = clock.monotonic()
                    self._call(record) if traced is None else traced(record, attempt)
                else:
                    with self._section():
                        started = calls[id(record)] = clock.monotonic()
                        self._call(record) if traced is None else traced(record, attempt)
            except Undecodable as exc:
                self.undecodable(record, progress, attempt, exc.error)
                return "done"
            except Exception as exc:  # noqa: BLE001 - the handler's failure: tried again, then the sink
                calls.pop(id(record), None)  # not under way while it waits for the next call
                reason = self.count(exc, progress)
                outcome = self.failed(record, progress, attempt, describe(exc), type(exc).__name__, reason)
                if outcome is not None:
                    return outcome
            else:
                self.retried(progress, attempt)
                if self.wants_handled:
                    self._stats.record_handled(progress.shard_id, clock.monotonic() - started)
                return "done"
            finally:
                calls.pop(id(record), None)  # a call that raised past Exception (HandlerStuck, Ctrl-C) too

    def count(self, error: Exception, progress: ShardProgress) -> Reason:
        """Count a failed call (a timeout too); the reason it gives its record if it is the last."""
        self._stats.handler_failed(progress.shard_id, type(error).__name__)
        if isinstance(error, HandlerTimedOut):
            self._stats.handler_timed_out(progress.shard_id, error.timeout)
            if error.too_many is not None:  # the client leaves; the record goes back
                raise error.too_many
            return "timeout"
        return "raised"

    def expired(self, record: Record, progress: ShardProgress, calls: int = 0) -> bool:
        """True if ``record`` is older than ``max_record_age``: it went to the sink (``calls``: the handler's
        calls on it so far) and is done. Its age is counted from its arrival in the stream."""
        max_age = self.max_age
        if max_age is None:
            return False
        age = _now() - record.approximate_arrival_timestamp.timestamp()
        if age <= max_age:
            return False
        handling_of(progress).expired += 1
        self._stats.record_expired(progress.shard_id, age)
        self.retried(progress, calls + 1)  # after a failed call, its note goes
        why = f"{age:.1f} s old when its turn came, older than max_record_age ({max_age:g} s)"
        self.exhausted(Failure(record, calls, "expired", why, *self._origin.of(record)), progress)
        return True

    def undecodable(self, record: Record, progress: ShardProgress, attempt: int, error: Exception) -> None:
        """Call ``attempt`` found ``record`` undecodable (``error``: what the decoder raised): to the sink at once
        (see :mod:`.decoding`)."""
        self.retried(progress, attempt)  # a decoder that failed only now: the note of earlier calls goes
        trace_id, span_id = (None, None) if self._failed_span is None else self._failed_span()
        failure = Failure(record, attempt - 1, "decode", describe(error), *self._origin.of(record), trace_id, span_id)
        self.exhausted(failure, progress)

    def after_first(self, record: Record, progress: ShardProgress, error: Exception) -> Outcome:
        """The handler's first call on ``record`` (made by the caller) raised ``error``: go on as
        :meth:`until_done` does."""
        if isinstance(error, Undecodable):
            self.undecodable(record, progress, 1, error.error)
            return "done"
        reason = self.count(error, progress)
        outcome = self.failed(record, progress, 1, describe(error), type(error).__name__, reason)
        if outcome is not None:
            return outcome
        return self.until_done(record, progress, exclusive=True, first=2)

    def failed(
        self, record: Record, progress: ShardProgress, attempt: int, error: str, note: str, reason: Reason = "raised"
    ) -> Outcome | None:
        """Call ``attempt`` on ``record`` failed (``error``: for its Failure; ``note``: for the shard's row).
        None: call again, after the backoff; "done": it went to the sink; "left": the wait was cut short."""
        if attempt >= self._options.max_attempts:
            self.retried(progress, attempt)
            trace_id, span_id = (None, None) if self._failed_span is None else self._failed_span()
            failure = Failure(record, attempt, reason, error, *self._origin.of(record), trace_id, span_id)
            self.exhausted(failure, progress)
            return "done"
        return None if self._retry_later(progress, attempt, note) else "left"

    def exhausted(self, failure: Failure, progress: ShardProgress) -> None:
        """A record failed for good: to the sink (tried again like a handler), else RecordFailed."""
        sink = self._options.dead_letter
        if sink is None:
            raise RecordFailed(failure)
        attempt = 0
        while True:
            attempt += 1
            try:
                sink(failure)
            except Exception as exc:
                if attempt >= self._options.max_attempts or not self.pause(self._options.delay(attempt), progress):
                    raise RecordFailed(failure, describe(exc)) from exc
                continue
            self._stats.dead_lettered(progress.shard_id, failure.reason)
            log.warning("a record of %s went to the dead-letter sink (%s after %d attempts): %s",
                        progress.shard_id, failure.reason, failure.attempts, failure.error)  # fmt: skip
            return

    def pause(self, seconds: float, progress: ShardProgress) -> bool:
        """Wait before trying again; False if the wait was cut short (see the constructor)."""
        return sleep_unless(seconds, lambda: self._cut_short(progress), self._woken)

    @staticmethod
    def retried(progress: ShardProgress, attempts: int) -> None:
        """A record is done after ``attempts`` calls: if it was retried, the note of it goes."""
        handling_of(progress).retrying = None
        guard = guard_of(progress) if attempts > 1 else None
        if guard is not None:
            guard.note_retrying(None)

    def _retry_later(self, progress: ShardProgress, attempt: int, note: str) -> bool:
        """Count a failed call and wait before the next; False if the consumer stops or the shard goes."""
        handling_of(progress).retrying = attempt
        guard = guard_of(progress)
        if guard is not None:
            guard.note_retrying(attempt, note)
        self._stats.handler_retried(progress.shard_id)
        delay = self._options.delay(attempt)
        log.info("a record of %s failed (attempt %d of %d); trying again in %.2g s",
                 progress.shard_id, attempt, self._options.max_attempts, delay)  # fmt: skip
        if self.pause(delay, progress):
            return True
        handling_of(progress).retrying = None
        return False
