"""A client's caller on virtual time: ``next()`` in a loop (or ``process()``'s one worker), without a thread.

What a user's ``while (record := k.next()) is not None: handle(record)`` does, as steps the cluster
(:mod:`.cluster`) runs in order with the clients' other events: each step asks kinsumer's own
:class:`~kinsumer.delivery.delivery.Delivery` for records as ``next()`` does (auto mode: asking again counts the
record in hand processed) with a timeout of 0, hands each to the handler, and stops after ``chunk`` records; the
handler's time (``handle_time`` a record, virtual) passes before the next step, which asks again. With nothing to
hand over, the caller waits for records (:meth:`~kinsumer.delivery.delivery.Delivery.when_ready`, called as a
shard worker queues them) or, when records wait for their lease to be confirmed, looks again a little later,
as ``next()``'s own wait for the lease does.

With ``call="process"``, a step runs ``process()``'s one worker (kinsumer's
:class:`~kinsumer.handling.processor.Processor` on the caller's thread) over what is ready now, records
acknowledged as the handler returns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from kinsumer.delivery.delivery import Delivery
from kinsumer.errors import NoRecordWithin
from kinsumer.handling.options import Options, Origin
from kinsumer.handling.processor import Processor
from kinsumer.record import Record
from kinsumer.stats import StatReceiver

__all__ = ["Call", "SimConsumer"]

#: How a client takes its records.
Call = Literal["next", "process"]
#: Seconds (virtual) before a caller looks again at records whose lease must be confirmed first.
_LEASE_LOOK = 0.5


class SimConsumer:
    """One client's caller (see the module's description)."""

    def __init__(
        self,
        delivery: Delivery,
        handler: Callable[[Record], object],
        wake: Callable[[], None],
        *,
        call: Call = "next",
        handle_time: float = 0.0,
        chunk: int = 16,
        stats: StatReceiver | None = None,
        origin: Origin | None = None,
    ) -> None:
        """``wake``: called (from a shard worker's step) once records are queued while the caller waits."""
        self._delivery = delivery
        self._handler = handler
        self._wake = wake
        self._handle_time = handle_time
        self._chunk = chunk
        self.handled = 0
        self.closed = False
        self._processor = (
            Processor(
                delivery, handler, Options(), origin or Origin("stream", "sim", "client"), stats or StatReceiver()
            )
            if call == "process"
            else None
        )

    def step(self, now: float) -> float | None:
        """Hand over what is ready now (at most ``chunk`` records); when to step again (None: when woken)."""
        if self.closed:
            return None
        handled = self._by_process() if self._processor is not None else self._by_next()
        self.handled += handled
        if self.closed:
            return None
        if handled:
            return now + handled * self._handle_time
        if self._delivery.when_ready(self._wake):
            return None  # woken when records are queued
        return now + _LEASE_LOOK  # records are queued, but none may be handed over yet (a lease to confirm)

    def _by_next(self) -> int:
        handled = 0
        while handled < self._chunk:
            try:
                record = self._delivery.next_auto(self, 0.0)  # counts the record in hand processed
            except NoRecordWithin:
                break
            if record is None:
                self.closed = True
                break
            self._handler(record)
            handled += 1
        return handled

    def _by_process(self) -> int:
        assert self._processor is not None
        handled = self._processor.run_ready(self._chunk)
        if handled is None:
            self.closed = True
            return 0
        return handled
