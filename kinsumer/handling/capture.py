"""``process()``'s state of one capture of a shard, in one place, each field written by the one part that owns it.

A capture's deliveries are kept by its :class:`~kinsumer.delivery.progress.ShardProgress` (the delivery layer,
which knows nothing of ``process()``); what ``process()`` keeps of the same capture lives here, in one
:class:`CaptureHandling` the progress carries (its ``handling`` slot). It is made when the shard's worker
captures the shard, with the crash-loop guard (:func:`attach_guard`), or when ``process()`` first touches a
capture made without one (deliveries built by hand: :func:`handling_of`).
"""

from __future__ import annotations

import threading

from .. import clock
from ..delivery.progress import ShardProgress
from .guard import ShardGuard

__all__ = ["CaptureHandling", "attach_guard", "guard_of", "handling_of"]


class CaptureHandling:
    """What ``process()`` keeps of one capture (see the module's description); who writes each field says so."""

    __slots__ = ("_announced", "calls", "expired", "failed", "guard", "retrying")

    def __init__(self, guard: ShardGuard | None = None) -> None:
        #: The crash-loop guard (:mod:`.guard`), set at the capture by the shard's worker; None without one.
        self.guard = guard
        #: The handler calls under way on the capture's records: when each began (monotonic, on
        #: :mod:`kinsumer.clock`), by the identity of its record (or batch). Written by the worker that makes
        #: the call (:mod:`.fast_path`, :mod:`.attempts`, :mod:`.batches`), one item at a time, without a lock.
        self.calls: dict[int, float] = {}
        #: A failing handler is being called again: the attempts so far (None: it is not). :mod:`.attempts`.
        self.retrying: int | None = None
        #: Records sent to the sink as too old (``max_record_age``). :mod:`.attempts`.
        self.expired = 0
        #: A record failed for good (RecordFailed): nothing more of the capture is handled in this process; the
        #: shard's next owner tries the record again. :mod:`.shard_jobs`.
        self.failed = False
        self._announced = False  # on_assigned was called: :meth:`announce`, :meth:`take_announced`

    def announce(self) -> bool:
        """``process()`` tells ``on_assigned`` of the capture (:mod:`.shard_jobs`, under its take lock): True the
        first time, when the hook is to be called."""
        if self._announced:
            return False
        self._announced = True
        return True

    def take_announced(self) -> bool:
        """The capture ends (its worker, once): True if ``on_assigned`` was called, so ``on_revoked`` or ``on_lost``
        is to be called too; the next ask says False."""
        announced, self._announced = self._announced, False
        return announced

    def oldest_call_start(self) -> float | None:
        """When (monotonic) the oldest handler call under way began; None if none is."""
        try:
            return min(list(self.calls.values()), default=None)
        except RuntimeError:  # changed while copied (another thread): the next look sees it
            return None

    def oldest_call(self) -> float | None:
        """Seconds the oldest handler call under way has run; None if none is."""
        started = self.oldest_call_start()
        return None if started is None else max(0.0, clock.monotonic() - started)


_making = threading.Lock()


def handling_of(progress: ShardProgress) -> CaptureHandling:
    """``process()``'s state of the capture ``progress`` keeps the deliveries of (made on first use)."""
    state = progress.handling
    if state is None:
        with _making:  # two workers of one capture (ordering by key) make one
            state = progress.handling
            if state is None:
                state = progress.handling = CaptureHandling()
    assert isinstance(state, CaptureHandling)
    return state


def attach_guard(progress: ShardProgress, guard: ShardGuard) -> None:
    """Make ``guard`` the crash-loop guard of the capture (its worker, as it captures the shard)."""
    handling_of(progress).guard = guard


def guard_of(progress: ShardProgress) -> ShardGuard | None:
    """The capture's crash-loop guard; None for a capture made without one (deliveries built by hand)."""
    state = progress.handling
    return state.guard if isinstance(state, CaptureHandling) else None
