"""``process()``'s one worker stepped without waiting (``Processor.run_ready``: the simulator's caller, tests/sim):
what is ready is handled in order; a run whose lease must be confirmed first is kept, not given back, and goes on
once it is; nothing is handled after a handoff revoked the shard."""

from __future__ import annotations

import math

from kinsumer import clock
from kinsumer.delivery.delivery import Delivery
from kinsumer.delivery.progress import ShardProgress
from kinsumer.handling.options import Options, Origin
from kinsumer.handling.processor import Processor
from kinsumer.record import Record
from kinsumer.stats import StatReceiver
from tests.unit.test_delivery import delivery, push, record


def _ready(count: int, fresh_until: float = math.inf) -> tuple[Processor, Delivery, ShardProgress, list[str]]:
    """A processor over a delivery of one shard holding ``count`` records, its lease fresh until ``fresh_until``;
    the sequence numbers its handler is called with."""
    handled: list[str] = []
    d = delivery(buffer_size=64)  # chunks of 4 records

    def handle(r: Record) -> None:
        handled.append(r.sequence_number)

    processor = Processor(d, handle, Options(), Origin("stream", "app", "me"), StatReceiver())
    progress = d.open_shard("s", None)
    progress.fresh_until = fresh_until
    push(d, progress, [record(i) for i in range(count)])
    return processor, d, progress, handled


def test_what_is_ready_is_handled_in_order_and_nothing_waits() -> None:
    processor, _, progress, handled = _ready(10)
    assert processor.run_ready(100) == 10
    assert handled == [str(i) for i in range(10)]
    assert processor.run_ready(100) == 0  # nothing ready: it returns at once
    assert progress.checkpoint == ("9", None)


def test_a_run_whose_lease_is_not_confirmed_is_kept_until_it_is() -> None:
    processor, d, progress, handled = _ready(5, clock.monotonic() - 1.0)  # the heartbeat is late: not known ours
    assert processor.run_ready(100) == 0 and handled == []
    assert len(d._queue) == 1  # its first chunk (4) taken, kept; the rest waits
    progress.fresh_until = math.inf  # a commit confirmed it
    assert processor.run_ready(100) == 5  # the run kept: given back, its records would come again from no one
    assert handled == [str(i) for i in range(5)] and progress.checkpoint == ("4", None)


def test_a_kept_run_of_a_shard_revoked_meanwhile_is_given_back() -> None:
    processor, d, progress, handled = _ready(5, clock.monotonic() - 1.0)
    assert processor.run_ready(100) == 0
    d.start_hand_off(progress)
    assert processor.run_ready(100) == 0 and handled == []  # the shard's next owner delivers them
    assert progress.all_acknowledged()  # the handoff waits for none of them


def test_at_most_about_so_many_records_a_step_a_run_at_a_time() -> None:
    processor, _, _, handled = _ready(20)
    first = processor.run_ready(1)  # one run: a chunk of the queue
    assert first == 4 and handled == ["0", "1", "2", "3"]
    assert processor.run_ready(100) == 16 and handled == [str(i) for i in range(20)]
