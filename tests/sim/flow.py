"""Records flowing through the simulation: the stream that keeps them, who writes them, and the ledger.

The stream is the testing kit's :class:`~kinsumer.testing.LocalKinesis` on the simulation's epoch clock
(arrival times, iterators that expire), read by kinsumer's own polling readers
(:func:`~kinsumer.reading.polling.polling_readers`, their pace on :mod:`kinsumer.clock`); the cluster's
producer puts records of a few partition keys, each with an ID of its own; the kit's
:class:`~kinsumer.testing._ledger.Ledger` hears each handling, each capture and handoff (the clients' stats
receivers) and each shard taken from a silent client, and says what was lost, repeated (and why) or out of order.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from kinsumer.reading.polling import polling_readers
from kinsumer.reading.reader import ReaderFactory
from kinsumer.stats import StatReceiver
from kinsumer.testing import LocalKinesis
from kinsumer.testing._ledger import Ledger
from kinsumer.testing._watch import fleet_stats

if TYPE_CHECKING:
    from kinsumer.coordination.runtime import Runtime
    from tests.sim.cluster import VirtualClock

__all__ = ["Flow"]


class Flow:
    """The records of a simulation (see the module's description)."""

    def __init__(
        self, clock: VirtualClock, shards: int, stream: str, rng: random.Random, *, validate: bool = True
    ) -> None:
        self.kinesis = LocalKinesis(clock=lambda: clock.epoch + clock.now, validate=validate)
        self.kinesis.add_stream(stream, shards)
        self.stream = stream
        self.ledger = Ledger()
        self.names: dict[str, str] = {}  # client ID -> its name in the ledger (its ID)
        self.rng = rng
        self.rate = 0.0  # records a second being put (0: none)
        self.keys = 100
        self.interval = 0.1
        self.put_count = 0
        self._owed = 0.0  # the fraction of a record the rate owes since the last put

    def readers(self, runtime: Runtime) -> ReaderFactory:
        """A client's shard readers: kinsumer's polling readers of the stream."""
        return polling_readers(self.kinesis, self.stream, runtime.reader_settings, runtime.stats)  # type: ignore[arg-type]

    def stats(self, client_id: str, inner: StatReceiver) -> StatReceiver:
        """The client's stats receiver: the ledger hears its captures and handoffs."""
        self.names[client_id] = client_id
        return fleet_stats(self.ledger, client_id, inner)

    def put(self, stream: str, at: float) -> None:
        """One PutRecords of what the rate owes for an interval: records of random keys, numbered."""
        self._owed += self.rate * self.interval
        count, self._owed = int(self._owed), self._owed - int(self._owed)
        entries = []
        for _ in range(count):
            entries.append({"Data": f"{self.put_count}".encode(), "PartitionKey": f"k{self.rng.randrange(self.keys)}"})
            self.put_count += 1
        for start in range(0, len(entries), 500):
            self.kinesis.put_records(StreamName=stream, Records=entries[start : start + 500])
