"""Waits, written once: a deadline, a wait for a condition, a lock taken within a deadline, a thread joined.

Time is read on :mod:`kinsumer.clock`, so that code waiting through here runs on a simulator's virtual time too
(tests/sim): there, with a clock installed, a wait that nothing can end meanwhile (one thread runs everything)
lets its time pass at once instead of blocking (:func:`kinsumer.clock.wait` does the same for an event).

And every wait that can happen on a caller's thread is interruptible. CPython runs signal handlers in the
main thread only, and the operating system may hand a process's signal to any of its threads. A main thread
asleep in an untimed lock wait is then not woken: Ctrl-C would go unnoticed until a record arrives, which on
an idle stream is never. So the waits here sleep at most :data:`WAKE` seconds at a time, and the interpreter
handles a pending signal in between.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

from . import clock

__all__ = [
    "WAKE", "Deadline", "acquire", "join_thread", "nap", "sleep_unless", "slice_of", "wait_condition", "wait_event",
]  # fmt: skip

#: The longest a caller's thread sleeps in one go (seconds).
WAKE = 0.2


def slice_of(remaining: float | None) -> float:
    """How long to sleep now, of ``remaining`` seconds (None: no limit)."""
    return WAKE if remaining is None else max(0.0, min(WAKE, remaining))


class Deadline:
    """A time on :func:`kinsumer.clock.monotonic`, ``timeout`` seconds from when it is made (None: never)."""

    __slots__ = ("at",)

    def __init__(self, timeout: float | None) -> None:
        self.at = math.inf if timeout is None else clock.monotonic() + timeout

    @property
    def endless(self) -> bool:
        return self.at == math.inf

    def remaining(self) -> float | None:
        """Seconds left (at least 0); None if it never comes."""
        return None if self.at == math.inf else max(0.0, self.at - clock.monotonic())

    def passed(self) -> bool:
        return clock.monotonic() >= self.at

    def slice(self) -> float:
        """How long to sleep now: what is left, at most :data:`WAKE`."""
        return slice_of(self.remaining())


def _virtual(deadline: Deadline) -> bool:
    """On an installed clock, let the deadline's time pass instead of blocking (True); a wait without end there
    is a bug of the simulation (nothing would ever end it)."""
    if not clock.is_installed():
        return False
    if deadline.endless:
        raise RuntimeError("a wait without a deadline on an installed clock: nothing would end it")
    left = deadline.remaining()
    if left:
        clock.sleep(left)
    return True


def nap(condition: threading.Condition, deadline: Deadline) -> None:
    """One wait of a loop that looks again at what it waits for (``condition``'s lock held): until ``condition``
    is notified, or at most :data:`WAKE` seconds of what is left."""
    if not _virtual(deadline):
        condition.wait(deadline.slice())


def wait_condition(condition: threading.Condition, ready: Callable[[], bool], deadline: Deadline) -> bool:
    """With ``condition``'s lock held: wait until ``ready()`` (looked at again on each notification and every
    :data:`WAKE` seconds); False at the deadline."""
    while not ready():
        if deadline.passed():
            return False
        nap(condition, deadline)
    return True


def acquire(lock: threading.Lock, deadline: Deadline, given_up: Callable[[], bool] = lambda: False) -> bool:
    """Take ``lock`` by the deadline; False if it came first, or ``given_up()`` turned true meanwhile."""
    while not lock.acquire(timeout=deadline.slice()):
        if given_up() or deadline.passed() or _virtual(deadline):
            return False
    return True


def sleep_unless(seconds: float, stop: Callable[[], bool], wake: threading.Event) -> bool:
    """Let ``seconds`` pass, looking at ``stop()`` whenever ``wake`` is set and every :data:`WAKE` seconds; False
    if it turned true first (a stop-aware sleep)."""
    deadline = Deadline(seconds)
    while not stop():
        if deadline.passed():
            return True
        if not _virtual(deadline):
            wake.wait(deadline.slice())
    return False


def join_thread(thread: threading.Thread, timeout: float | None) -> bool:
    """``thread.join(timeout)`` in slices (None: no limit); True if it ended."""
    deadline = Deadline(timeout)
    while thread.is_alive():
        if deadline.passed():
            return False
        thread.join(deadline.slice())
    return True


def wait_event(event: threading.Event, timeout: float) -> bool:
    """``event.wait(timeout)`` in slices; True if it is set."""
    deadline = Deadline(timeout)
    while not event.is_set():
        if deadline.passed() or _virtual(deadline):
            return event.is_set()
        event.wait(deadline.slice())
    return True
