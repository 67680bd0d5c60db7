"""Retrying transient AWS faults: the one place tenacity is used.

Transient = throttling, 5xx answers, connection errors and timeouts. Everything else is
raised at once. No tenacity type leaves this module.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import TypeVar

import tenacity

from .. import clock
from ..stats import StatReceiver
from .error_codes import error_code, is_transient

__all__ = ["Stopped", "counted", "retry_call"]

log = logging.getLogger("kinsumer.retry")
T = TypeVar("T")


class Stopped(Exception):
    """Raised by :func:`retry_call` when the caller asked to stop while retrying."""


def retry_call(
    fn: Callable[[], T],
    *,
    operation: str,
    stats: StatReceiver,
    sleep: Callable[[float], None] = clock.sleep,
    should_stop: Callable[[], bool] = lambda: False,
    deadline: float | None = None,
    max_wait: float = 5.0,
    min_wait: float = 0.0,
    give_up_on: Callable[[BaseException], bool] | None = None,
) -> T:
    """Call ``fn`` until it succeeds or fails for good.

    Transient errors are retried with exponential backoff and full jitter, capped at
    ``max_wait`` seconds (and at least ``min_wait``), without limit unless ``deadline`` (a
    ``time.monotonic()`` value, as :func:`kinsumer.clock.monotonic` gives it) passes, in which case the
    last error is raised. A transient error for which ``give_up_on(error)``
    is true is raised as at the deadline (run() gives up so on an endpoint it never reached).
    ``should_stop()`` turning true ends the retries with :class:`Stopped`. ``sleep`` does the
    waiting, so a caller can keep other work (heartbeats, commits) going between attempts.

    Every transient fault is counted once in ``stats``: retried, or abandoned when a stop, the
    deadline or ``give_up_on`` ends the retries (the error raised then is marked: see :func:`counted`).
    """
    try:  # the usual case, without tenacity's machinery (a call of a busy reader costs less)
        return fn()
    except Exception as exc:
        if not is_transient(exc):
            raise
        if should_stop():
            _abandon(exc, operation, stats)
            raise Stopped(operation) from exc
        if _past(deadline) or (give_up_on is not None and give_up_on(exc)):
            _abandon(exc, operation, stats)
            raise
        code = error_code(exc)
        stats.error_retried(operation, code)
        log.debug("%s failed with %s (attempt 1); retrying", operation, code)
        sleep(min_wait + random.uniform(0, 0.1))  # tenacity's first wait below
    return _retrying(fn, operation, stats, sleep, should_stop, deadline, max_wait, min_wait, give_up_on)


def _past(deadline: float | None) -> bool:
    return deadline is not None and clock.monotonic() >= deadline


def _retrying(
    fn: Callable[[], T],
    operation: str,
    stats: StatReceiver,
    sleep: Callable[[float], None],
    should_stop: Callable[[], bool],
    deadline: float | None,
    max_wait: float,
    min_wait: float,
    give_up_on: Callable[[BaseException], bool] | None,
) -> T:
    """The attempts after a first one failed with a transient fault, through tenacity."""

    def give_up(state: tenacity.RetryCallState) -> bool:
        if should_stop() or _past(deadline):
            return True
        exc = state.outcome.exception() if state.outcome else None
        return give_up_on is not None and exc is not None and give_up_on(exc)

    def before_sleep(state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        code = error_code(exc) if exc else "unknown"
        stats.error_retried(operation, code)
        level = logging.WARNING if state.attempt_number >= 5 else logging.DEBUG
        log.log(level, "%s failed with %s (attempt %d); retrying", operation, code, state.attempt_number)

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(is_transient),
        wait=tenacity.wait_fixed(min_wait) + tenacity.wait_random_exponential(multiplier=0.1, max=max_wait),
        stop=give_up,
        sleep=sleep,
        before_sleep=before_sleep,
        reraise=True,
    )
    try:
        return retrying(fn)
    except Exception as exc:
        if not is_transient(exc):
            raise
        _abandon(exc, operation, stats)
        if should_stop():
            raise Stopped(operation) from exc
        raise  # the deadline passed, or give_up_on gave up


_COUNTED = "_kinsumer_counted"


def _abandon(exc: BaseException, operation: str, stats: StatReceiver) -> None:
    stats.error_abandoned(operation, error_code(exc))
    setattr(exc, _COUNTED, True)


def counted(exc: BaseException) -> bool:
    """True if :func:`retry_call` already counted ``exc`` (as abandoned: its deadline passed)."""
    return bool(getattr(exc, _COUNTED, False))
