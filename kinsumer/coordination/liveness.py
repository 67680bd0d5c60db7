"""This client's heartbeat chain, and what it tells about the shards it owns. No I/O.

Other clients take a shard from its owner only once the owner's heartbeat is
``client_record_max_age`` old (or the owner released it). So while this client's heartbeats
keep landing, every lease it holds stays its own without any write to the lease's row: an
idle shard writes nothing. A heartbeat vouches for half the max age from when it started
(the other half is the margin for clock skew and slow calls). A heartbeat that lands after
that — the process was paused, or cut off from DynamoDB — starts a new *epoch*: others may
have taken shards meanwhile, so each lease must confirm with a conditional write before its
records are handed on again (:class:`~.lease.ShardLease`).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

from ..clock import monotonic

__all__ = ["Liveness"]

#: Told, after each heartbeat, the epoch and until when (monotonic) the client counts as live.
Listener = Callable[[int, float], None]


class Liveness:
    """The heartbeat chain of one client: its epoch and until when it is fresh."""

    def __init__(self, max_age: float, clock: Callable[[], float] = monotonic) -> None:
        self._fresh_for = max_age / 2
        self._clock = clock
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []
        #: Increases whenever the chain broke (and at the first heartbeat).
        self.epoch = 0
        #: Monotonic time until which the other clients count this one as live, with a margin.
        self.fresh_until = -math.inf
        #: Monotonic time the last heartbeat that landed started (-inf: none yet).
        self.last_beat = -math.inf

    def now(self) -> float:
        return self._clock()

    def heartbeat_done(self, started: float) -> None:
        """A heartbeat that started at ``started`` (monotonic) was written."""
        with self._lock:
            if self._clock() >= self.fresh_until:  # landed late (or the first): a new epoch
                self.epoch += 1
            self.fresh_until = started + self._fresh_for
            self.last_beat = max(self.last_beat, started)
            epoch, fresh_until, listeners = self.epoch, self.fresh_until, list(self._listeners)
        for listener in listeners:
            listener(epoch, fresh_until)

    def fresh(self) -> bool:
        """The other clients count this one as live (and will for a while)."""
        return self._clock() < self.fresh_until

    def subscribe(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def unsubscribe(self, listener: Listener) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)
