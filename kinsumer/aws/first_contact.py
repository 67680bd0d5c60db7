"""run()'s first calls: an endpoint that never answered is given up on in seconds, not at the deadline.

``run()`` retries the transient faults of its first calls (DescribeTable, DescribeStreamSummary...)
until its deadline: a server that answered with 5xx or throttling, or whose connection broke, is
there and may recover. An endpoint never reached (:func:`~.error_codes.unreached`: a refused
connection, an unknown host, an untrusted certificate) most likely is a wrong URL or a server
that is not running; waiting 30 s for it only hides that. :class:`FirstContact` notes which
endpoints a start reached, and tells :func:`~.retry.retry_call` when to give up on one it never
reached: at once for an untrusted certificate or a host name the DNS does not know (trying again
gets the same answer); after ``patience`` seconds from the endpoint's first try for a refused
connection or a DNS that did not answer (a server restarting may be back within seconds). The
waits between those tries end with the patience (:meth:`FirstContact.wait`): the start gives up
on such an endpoint ``patience`` seconds and one call after it first tried it. Once an endpoint
was reached, its later faults are retried to the deadline, whatever they are.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from .error_codes import unreached

__all__ = ["FirstContact"]

T = TypeVar("T")


class FirstContact:
    """The endpoints one start reached, and its patience with those it did not (see the module's description).

    Thread-safe: one start's calls may run in parallel (its three DescribeTable do).
    """

    def __init__(self, patience: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._patience = patience
        self._clock = clock
        self._lock = threading.Lock()
        self._first_try: dict[str, float] = {}  # endpoint URL -> when the start first called it
        self._reached: set[str] = set()

    def watched(self, endpoint: str, fn: Callable[[], T]) -> Callable[[], T]:
        """``fn``, a call to ``endpoint``: each call of it is noted as a try of ``endpoint``, and as reaching it
        unless it fails with a fault of an endpoint never reached."""

        def call() -> T:
            with self._lock:
                self._first_try.setdefault(endpoint, self._clock())
            try:
                result = fn()
            except BaseException as exc:
                if unreached(exc) is None:
                    self._note_reached(endpoint)
                raise
            self._note_reached(endpoint)
            return result

        return call

    def gives_up(self, endpoint: str, exc: BaseException) -> bool:
        """Whether to stop retrying ``exc``, a transient fault of a call to ``endpoint``, now."""
        fault = unreached(exc)
        if fault is None:
            return False
        with self._lock:
            if endpoint in self._reached:
                return False
            if fault.lasting:
                return True
            first = self._first_try.setdefault(endpoint, self._clock())
            return self._clock() - first >= self._patience

    def wait(self, endpoint: str, seconds: float) -> float:
        """``seconds``, the wait before trying ``endpoint`` again, cut to the end of the patience while it was
        never reached (the try after it is the last)."""
        with self._lock:
            first = self._first_try.get(endpoint)
            if first is None or endpoint in self._reached:
                return seconds
            return max(0.0, min(seconds, first + self._patience - self._clock()))

    def _note_reached(self, endpoint: str) -> None:
        with self._lock:
            self._reached.add(endpoint)
