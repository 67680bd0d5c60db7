"""The clocks the coordination reads: monotonic time, epoch time, and the retries' sleep.

Production reads the system's clocks through these functions (``time.monotonic``, ``time.time_ns``,
``time.sleep``: one global look-up more than calling them directly). A simulator that drives the
coordination on virtual time (``tests/sim/cluster.py``) installs a clock of its own for the length of a
``with installed(clock):`` block, process-wide: the coordination code then reads virtual time, and a
retry's backoff advances it instead of sleeping. The membership rounds, the heartbeat, the leader, the
table code, the shard workers' capture, handoff and waits and the commit clock read time through here. A
lease's freshness (``fresh_until``) is compared on the same clock where records are handed over
(:func:`monotonic_source`, bound when the delivery is made), and the record path's waits (the polling
reader's pace, the delivery's deadlines, ``process()``'s retries) go through :mod:`kinsumer.waiting`, which
reads this clock: the simulator runs records too. tests/unit/test_time_sources.py keeps the list of the
direct uses left from growing.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Protocol

__all__ = [
    "Clock", "installed", "is_installed", "monotonic", "monotonic_source", "now_ms", "now_ns", "sleep", "wait", "wall",
]  # fmt: skip


class Clock(Protocol):
    """What a clock installed in place of the system's gives."""

    def monotonic(self) -> float:
        """Seconds, never going backwards (as ``time.monotonic``)."""
        ...

    def wall(self) -> float:
        """Epoch seconds (as ``time.time``)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Let ``seconds`` pass (as ``time.sleep``)."""
        ...


_installed: Clock | None = None


def monotonic() -> float:
    clock = _installed
    return time.monotonic() if clock is None else clock.monotonic()


def monotonic_source() -> Callable[[], float]:
    """The monotonic clock in effect now, to bind once where it is read per record: ``time.monotonic`` itself
    (not one call more), or the installed clock's."""
    clock = _installed
    return time.monotonic if clock is None else clock.monotonic


def wall() -> float:
    clock = _installed
    return time.time() if clock is None else clock.wall()


def now_ms() -> int:
    """Wall-clock time as integer epoch milliseconds: the unit of kinsumer's times, and of the LastUpdate of its
    client rows and metadata items."""
    clock = _installed
    return time.time_ns() // 1_000_000 if clock is None else int(clock.wall() * 1000)


def now_ns() -> int:
    """Wall-clock time as integer epoch nanoseconds: the unit of LastUpdate in the checkpoints table, as the
    Go library writes it (see :mod:`kinsumer.aws.stored`)."""
    clock = _installed
    return time.time_ns() if clock is None else int(clock.wall() * 1000) * 1_000_000


def sleep(seconds: float) -> None:
    clock = _installed
    if clock is None:
        time.sleep(seconds)
    else:
        clock.sleep(seconds)


def wait(event: threading.Event, seconds: float) -> bool:
    """Wait until ``event`` is set or ``seconds`` passed; whether it is set (as ``event.wait``). On an
    installed clock the time passes at once (nobody else runs meanwhile to set it)."""
    clock = _installed
    if clock is None:
        return event.wait(seconds)
    if not event.is_set():
        clock.sleep(seconds)
    return event.is_set()


def is_installed() -> bool:
    """A clock is installed in place of the system's (a simulation runs)."""
    return _installed is not None


@contextlib.contextmanager
def installed(clock: Clock) -> Iterator[Clock]:
    """Read ``clock`` instead of the system's until the block ends (one at a time: a simulator's)."""
    global _installed  # noqa: PLW0603 - the one switch of the seam
    if _installed is not None:
        raise RuntimeError("a clock is installed already")
    _installed = clock
    try:
        yield clock
    finally:
        _installed = None
