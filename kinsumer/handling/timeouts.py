"""``process()``'s ``timeout``: a handler call that runs longer is a failed attempt (reason ``timeout``).

A sync call cannot be killed. With a ``timeout``, each worker calls its handler on a thread of its
own (its *caller*) and waits up to ``timeout`` seconds. A call that takes longer is abandoned: its
record counts a failed attempt at once and the shard goes on; the caller thread is left to finish
the call in the background (its late return or raise is logged and ignored) and the worker takes a
new one. The abandoned calls still running are *stuck*: at most ``max_stuck`` of them (the
processing's ``concurrency`` times ``max_attempts``: every worker's record timing out on every
attempt). One more, and :class:`~kinsumer.HandlerStuck` ends ``process()``, whose client then leaves
(its shards go to the others); a supervisor restarts the process.

An async handler (``aprocess()``) is cancelled at its timeout instead (:mod:`kinsumer.asyncio_front`).
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import HandlerStuck
from ..failure import describe
from ..record import Record

__all__ = ["HandlerTimedOut", "TimedHandler", "call_abandoned"]

log = logging.getLogger("kinsumer.process")


class HandlerTimedOut(Exception):
    """A handler call ran longer than ``timeout``: a failed attempt, reason ``timeout``. ``too_many``: the
    stuck calls, when there are more than allowed (then :class:`~kinsumer.HandlerStuck` ends ``process()``)."""

    def __init__(self, timeout: float, too_many: HandlerStuck | None = None) -> None:
        self.timeout = timeout
        self.too_many = too_many
        super().__init__(f"the handler ran longer than timeout ({timeout:g} s)")


class _Call:
    """One handler call handed to a caller thread."""

    __slots__ = ("abandoned", "args", "context", "done", "error", "result", "shard_id", "started")

    def __init__(self, args: tuple[Any, ...], shard_id: str) -> None:
        self.args = args
        self.context = contextvars.copy_context()  # the worker's (its span is the handler's current one)
        self.shard_id = shard_id
        self.started = time.monotonic()
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.abandoned = False  # it went past its timeout: the record was tried again without it

    def outcome(self) -> Any:
        """What the call returned, or raise what it raised."""
        if self.error is not None:
            raise self.error
        return self.result


class _Caller:
    """A thread that makes a worker's handler calls, one at a time."""

    def __init__(self, function: Callable[..., Any], ended: Callable[[_Caller, _Call], None]) -> None:
        self._function = function
        self._ended = ended  # told of a call that ended after it was abandoned
        self._cond = threading.Condition()
        self._call: _Call | None = None
        self.abandoned = False
        self._thread = threading.Thread(target=self._loop, name="kinsumer-handler-call", daemon=True)
        self._thread.start()

    def start(self, call: _Call) -> None:
        with self._cond:
            self._call = call
            self._cond.notify()

    def abandon(self, call: _Call, then: Callable[[], None]) -> bool:
        """``call`` went past its timeout: unless it has just ended (False), it finishes in the background and
        the thread ends after it. ``then()`` runs first, before the thread can see it abandoned."""
        with self._cond:
            if call.done.is_set():
                return False
            self.abandoned = call.abandoned = True
            then()
            return True

    def retire(self) -> None:
        """No more calls (its worker ended): the thread ends."""
        with self._cond:
            self.abandoned = True
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._call is None and not self.abandoned:
                    self._cond.wait()
                call, self._call = self._call, None
            if call is None:
                return
            _running.call = call
            try:
                call.result = call.context.run(self._function, *call.args)
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting worker (or logged if abandoned)
                call.error = exc
            with self._cond:
                abandoned = self.abandoned
                call.done.set()
            if abandoned:
                self._ended(self, call)
                return


class TimedHandler:
    """``function`` called on each worker's caller thread, waited for up to ``timeout`` seconds."""

    def __init__(
        self, function: Callable[..., Any], timeout: float, max_stuck: int, shard_of: Callable[..., str]
    ) -> None:
        """``shard_of(*args)``: the shard a call is for (for the logs and HandlerStuck)."""
        self._function = function
        self.timeout = timeout
        self._max_stuck = max_stuck
        self._shard_of = shard_of
        self._local = threading.local()
        self._lock = threading.Lock()
        self._callers: list[_Caller] = []
        self._stuck: dict[_Caller, _Call] = {}

    def __call__(self, *args: Any) -> Any:
        caller: _Caller | None = getattr(self._local, "caller", None)
        if caller is None:
            caller = self._local.caller = _Caller(self._function, self._late)
            with self._lock:
                self._callers.append(caller)
        call = _Call(args, self._shard_of(*args))
        caller.start(call)
        if call.done.wait(self.timeout):
            return call.outcome()
        if not caller.abandon(call, lambda: self._count_stuck(caller, call)):
            return call.outcome()  # it ended just now
        self._local.caller = None
        raise HandlerTimedOut(self.timeout, self._too_many(call))

    def _count_stuck(self, caller: _Caller, call: _Call) -> None:
        with self._lock:
            self._callers.remove(caller)
            self._stuck[caller] = call

    def stuck(self) -> list[tuple[str, float]]:
        """The calls past their timeout still running: (shard, seconds since the call began), oldest first."""
        now = time.monotonic()
        with self._lock:
            calls = list(self._stuck.values())
        return sorted(((c.shard_id, now - c.started) for c in calls), key=lambda item: -item[1])

    def close(self) -> None:
        """``process()`` ends: the idle caller threads end (stuck ones end when their call does)."""
        with self._lock:
            callers, self._callers = self._callers, []
        for caller in callers:
            caller.retire()

    def _too_many(self, call: _Call) -> HandlerStuck | None:
        """The call was abandoned: HandlerStuck if more are stuck now than allowed."""
        now = time.monotonic()
        with self._lock:
            stuck = sorted((c.shard_id, now - c.started) for c in self._stuck.values())
        log.warning("a handler call on a record of %s ran longer than %g s: abandoned (%d stuck now, at most %d)",
                    call.shard_id, self.timeout, len(stuck), self._max_stuck)  # fmt: skip
        return HandlerStuck(stuck, self._max_stuck) if len(stuck) > self._max_stuck else None

    def _late(self, caller: _Caller, call: _Call) -> None:
        """An abandoned call ended: logged, ignored."""
        with self._lock:
            self._stuck.pop(caller, None)
        outcome = "returned" if call.error is None else f"raised {describe(call.error)}"
        log.warning("a handler call on a record of %s that timed out %s after %.1f s; ignored",
                    call.shard_id, outcome, time.monotonic() - call.started)  # fmt: skip


_running = threading.local()  # a caller thread's call (the last it made)


def call_abandoned() -> Callable[[], bool] | None:
    """For a handler call made under ``process()``'s ``timeout``, asked on its own thread: a function saying
    whether kinsumer abandoned the call (it ran past the timeout; the record was tried again meanwhile); None for
    a call made without a timeout. The testing kit's ledger asks it, so that the late return of an abandoned
    call does not count as a record kinsumer handed out twice."""
    call: _Call | None = getattr(_running, "call", None)
    return None if call is None else (lambda: call.abandoned)


def shard_of_record(record: Record) -> str:
    return record.shard_id


def shard_of_batch(records: list[Record]) -> str:
    return records[0].shard_id if records else ""
