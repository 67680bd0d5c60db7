"""This client's heartbeat, on a thread of its own.

The heartbeat is what keeps every lease of the client alive (:mod:`.liveness`): if it lands
late, the other clients take the client's shards. So it runs alone, every
``shard_check_frequency``, and nothing else the client does can delay it: not a slow
membership round (a scan of many client rows, the leader's listing of thousands of shards),
not the shards' reads and writes, which run on pools of their own. A round that must announce
something at once (a new shard cache) asks for a beat now.

The first heartbeat (which claims the client's row, see :mod:`.identity`) is written by the
coordinator's first round on the caller's thread, so that its errors raise from ``run()``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from .. import clock
from ..waiting import join_thread
from . import clients_table
from .clients_table import Headline
from .identity import taken_over
from .runtime import Runtime

__all__ = ["Heartbeat"]

log = logging.getLogger("kinsumer.coordinator")


class Heartbeat:
    """Writes the client's row every period, and whenever asked; tells the liveness each time."""

    def __init__(
        self, runtime: Runtime, cache_version: Callable[[], int], headline: Callable[[], Headline | None]
    ) -> None:
        self._rt = runtime
        self._cache_version = cache_version
        self._headline = headline  # what the leader's row says of the roster (:mod:`.roster`)
        self._period = runtime.config.shard_check_frequency
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self.leaving = False  # the row says Leaving: the client hands its shards off
        #: The cache version the last heartbeat announced.
        self.announced = 0
        self._thread = threading.Thread(target=self._loop, name="kinsumer-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def beat_now(self) -> None:
        """Write a heartbeat at once (a new cache version, or leaving, to announce)."""
        self._wake.set()

    def stop(self, timeout: float) -> None:
        """No more heartbeats once the one under way (if any) is written. Idempotent."""
        self._stopping.set()
        self._wake.set()
        if self._thread.ident is not None:
            join_thread(self._thread, timeout)

    def beat(self, deadline: float) -> None:
        """One heartbeat, its transient faults retried until ``deadline`` (monotonic)."""
        rt = self._rt
        version, leaving, headline = self._cache_version(), self.leaving, self._headline()
        started = rt.liveness.now()
        holder = rt.call(
            lambda: clients_table.heartbeat(
                rt.dynamodb, rt.tables.clients, rt.client_id, rt.client_name, rt.instance, version,
                leaving=leaving, reading=rt.config.reading, streams=rt.stream_names, headline=headline,
            ),
            "PutItem",
            deadline=deadline,
            should_stop=self._stopping.is_set,
        )  # fmt: skip
        if holder is not None:
            raise taken_over(rt.client_id, holder)
        rt.liveness.heartbeat_done(started)
        self.announced = version

    @property
    def asked(self) -> bool:
        """A beat was asked for (:meth:`beat_now`) and the loop has not woken up for it yet."""
        return self._wake.is_set()

    def _loop(self) -> None:
        next_beat: float | None = clock.monotonic() + self._period
        while next_beat is not None:
            self._wake.wait(max(0.0, next_beat - clock.monotonic()))
            next_beat = self.step()

    def step(self) -> float | None:
        """What the loop does when it wakes up (its time came, or a beat was asked for): a beat; when the next
        is due (monotonic), or None once the loop ends (a stop, or a failure reported to the runtime)."""
        self._wake.clear()
        if self._stopping.is_set():
            return None
        next_beat = clock.monotonic() + self._period
        try:
            self.beat(next_beat)
        except Exception as exc:  # noqa: BLE001
            if self._stopping.is_set():
                return None
            if not self._rt.retry_later(exc, "the heartbeat"):
                self._rt.fail(exc, "the heartbeat")
                return None
        return next_beat
