"""A shard revoked between a holder's look at ``revoked`` and its taking the record: nothing goes out that
the handoff did not wait for.

The handoff revokes the shard, then waits until every record handed out is acknowledged; it counts a
record of a run as handed out once the run's ``handed`` says so. A holder that looked at ``revoked``
(False), then was overtaken by the handoff before it moved ``handed`` on, handed the record out after
the handoff had found nothing outstanding and released the shard: its next owner delivered it again
(seen once in ``make demo``: one duplicate after clean handoffs). Here the handoff comes at that very
moment, from inside the crash-loop guard's ``hand()`` (``process()``'s one-worker path; ``next()``
takes the same steps, in the same order, without a seam to come in by).
"""

from __future__ import annotations

import datetime as dt
import threading

from kinsumer import Record, StatReceiver
from kinsumer.delivery.delivery import Delivery
from kinsumer.delivery.progress import ShardProgress
from kinsumer.handling.capture import attach_guard
from kinsumer.handling.options import Options, Origin
from kinsumer.handling.processor import Processor
from kinsumer.handling.shard_jobs import _Unguarded
from kinsumer.reading.position import Position
from kinsumer.stats import GuardedStats
from tests.helpers import wait_until

SHARD = "shardId-000000000000"


def records(count: int) -> list[Record]:
    now = dt.datetime.now(dt.UTC)
    return [Record(b"%d" % i, "k", str(1000 + i), SHARD, now, now) for i in range(count)]


class Handoff:
    """A handoff, as the shard's worker makes it: revoke; once nothing handed out is outstanding, release
    (the checkpoint the next owner starts after)."""

    def __init__(self, delivery: Delivery, progress: ShardProgress) -> None:
        self.delivery, self.progress = delivery, progress
        self.began = False
        self.dropped = 0
        self.released: Position | None = None
        self.done = threading.Event()

    def begin(self) -> None:
        if not self.began:
            self.began = True
            self.dropped = self.delivery.start_hand_off(self.progress)
            self.try_to_end()

    def try_to_end(self) -> None:
        if self.began and not self.done.is_set() and self.progress.all_acknowledged():
            self.released = self.delivery.end_hand_off(self.progress, self.dropped).checkpoint
            self.done.set()


class HandoffInHand(_Unguarded):
    """A guard whose ``hand()`` lets the handoff begin before it says yes."""

    def __init__(self, handoff: Handoff) -> None:
        self.handoff = handoff

    def hand(self, position: Position) -> bool:
        self.handoff.begin()
        return True


def delivery_with(count: int) -> tuple[Delivery, ShardProgress, Handoff]:
    delivery = Delivery(100, GuardedStats(StatReceiver()))
    progress = delivery.open_shard(SHARD, None)
    handoff = Handoff(delivery, progress)
    delivery.offer(progress, records(count), 0, lambda: None)
    return delivery, progress, handoff


def test_process_hands_out_nothing_the_handoff_did_not_wait_for() -> None:
    delivery, progress, handoff = delivery_with(3)
    attach_guard(progress, HandoffInHand(handoff))  # type: ignore[arg-type]
    handled: list[Record] = []
    stats = GuardedStats(StatReceiver())
    processor = Processor(delivery, handled.append, Options(), Origin("s", "app", "me"), stats)
    running = threading.Thread(target=processor.run, daemon=True)
    running.start()
    try:
        wait_until(lambda: handoff.began, 10, "the handoff to begin")
        wait_until(lambda: (handoff.try_to_end(), handoff.done.is_set())[1], 10, "the handoff to end")
    finally:
        delivery.close()
        running.join(10)
    assert not running.is_alive()
    final = -1 if handoff.released is None else int(handoff.released[0])
    after = [r.sequence_number for r in handled if int(r.sequence_number) > final]
    assert not after, f"handed out after the release at {handoff.released}: {after}"
