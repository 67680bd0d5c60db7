"""Waits on a caller's thread that a signal can always interrupt.

CPython runs signal handlers in the main thread only, and the operating system may hand a
process's signal to any of its threads. A main thread asleep in an untimed lock wait is then
not woken: Ctrl-C would go unnoticed until a record arrives, which on an idle stream is never.
So every wait that can happen on a caller's thread (``next*()``, ``stop()``) sleeps at most
:data:`WAKE` seconds at a time, and the interpreter handles a pending signal in between.
"""

from __future__ import annotations

import threading
import time

__all__ = ["WAKE", "join_thread", "slice_of", "wait_event"]

#: The longest a caller's thread sleeps in one go (seconds).
WAKE = 0.2


def slice_of(remaining: float | None) -> float:
    """How long to sleep now, of ``remaining`` seconds (None: no limit)."""
    return WAKE if remaining is None else max(0.0, min(WAKE, remaining))


def join_thread(thread: threading.Thread, timeout: float | None) -> bool:
    """``thread.join(timeout)`` in slices (None: no limit); True if it ended."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while thread.is_alive():
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return False
        thread.join(slice_of(remaining))
    return True


def wait_event(event: threading.Event, timeout: float) -> bool:
    """``event.wait(timeout)`` in slices; True if it is set."""
    deadline = time.monotonic() + timeout
    while not event.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        event.wait(slice_of(remaining))
    return True
