"""The client's memory bound: bytes of records read from Kinesis and not yet taken by the caller.

Every shard reads into one :class:`ByteBudget`. Before a read, a shard asks for a
:class:`Ticket` for as many bytes as its page may hold (its estimate); the read goes once the
ticket is granted. Then the ticket is settled at the page's real size, and bytes are given
back as records leave the queue (taken by ``next*()``, dropped in a handoff, or never queued).
Tickets are granted in the order they were asked for (no shard starves), and whenever nothing
is buffered (so one page larger than the whole budget still goes). So the client holds at most
``limit`` bytes of record data, plus what the pages read under granted tickets exceed their
estimates by. No I/O: the shard workers wait for their grant on their own loop.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

__all__ = ["ByteBudget", "Ticket"]


class Ticket:
    """A request for ``amount`` bytes; ``granted`` once they are the holder's."""

    __slots__ = ("amount", "granted", "wake")

    def __init__(self, amount: int, wake: Callable[[], None]) -> None:
        self.amount = amount
        self.granted = False
        self.wake = wake


class ByteBudget:
    """At most ``limit`` bytes granted at once, granted first come first served."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("limit must be >= 1")
        self.limit = limit
        self._lock = threading.Lock()
        self._used = 0
        self._queue: deque[Ticket] = deque()

    @property
    def used(self) -> int:
        """Bytes granted and not given back."""
        return self._used

    @property
    def waiting(self) -> int:
        """Tickets not granted yet."""
        return len(self._queue)

    def request(self, amount: int, wake: Callable[[], None] = lambda: None) -> Ticket:
        """Ask for ``amount`` bytes: granted at once if they fit and nobody waits, else queued;
        ``wake`` is called (from whichever thread gives bytes back) when a queued ticket is granted."""
        ticket = Ticket(max(0, amount), wake)
        with self._lock:
            self._queue.append(ticket)
            granted = self._grant()
        for other in granted:
            if other is not ticket:
                other.wake()
        return ticket

    def cancel(self, ticket: Ticket) -> None:
        """Give up a ticket: its bytes come back if it was granted, else it leaves the queue."""
        with self._lock:
            if ticket.granted:
                ticket.granted = False
                self._used -= ticket.amount
            elif ticket in self._queue:
                self._queue.remove(ticket)
            ticket.amount = 0
            granted = self._grant()
        _wake(granted)

    def settle(self, ticket: Ticket, actual: int) -> None:
        """A granted ticket's read is done: it holds ``actual`` bytes from now on (given back with :meth:`free`)."""
        with self._lock:
            if not ticket.granted:
                raise ValueError("settle() of a ticket that was not granted")
            self._used += actual - ticket.amount
            ticket.granted = False  # its bytes are the records' now
            ticket.amount = 0
            granted = self._grant()
        _wake(granted)

    def free(self, amount: int) -> None:
        """``amount`` bytes of records left the buffer."""
        if amount <= 0:
            return
        with self._lock:
            self._used -= amount
            granted = self._grant()
        _wake(granted)

    def _grant(self) -> list[Ticket]:
        """Grant queued tickets in order while they fit, or while nothing is held (lock held)."""
        granted = []
        queue = self._queue
        while queue and (self._used + queue[0].amount <= self.limit or self._used <= 0):
            ticket = queue.popleft()
            ticket.granted = True
            self._used += ticket.amount
            granted.append(ticket)
        return granted


def _wake(tickets: list[Ticket]) -> None:
    for ticket in tickets:
        ticket.wake()
