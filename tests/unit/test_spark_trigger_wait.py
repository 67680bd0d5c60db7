"""minRecordsPerTrigger / maxTriggerDelay: when a planned micro-batch waits. Pure: a clock and a count injected."""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("pyspark")  # the package kinsumer.spark imports it

from kinsumer.spark.offsets import BatchOffset, Stop
from kinsumer.spark.trigger_wait import TriggerWait, to_count

RECORDS, DELAY, INTERVAL = 100, 30.0, 1.0
PLANNED = {"s": BatchOffset(run="r", batch=3, initial="TRIM_HORIZON", shards={"s-0": "AFTER:5", "s-1": "TRIM_HORIZON"})}


class World:
    """A fake clock and a stream whose available records the test sets; it notes every count."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.available = 0
        self.counts: list[tuple[float, dict[tuple[str, str], str], int]] = []

    def count(self, positions: Mapping[tuple[str, str], str], wanted: int) -> int:
        self.counts.append((self.now, dict(positions), wanted))
        return self.available

    def wait(self) -> TriggerWait:
        return TriggerWait(RECORDS, DELAY, INTERVAL, self.count, clock=lambda: self.now)


#: One call of latestOffset: time passes, the planning finds something (or not), records available.
steps = st.lists(
    st.tuples(st.floats(0, 12, allow_nan=False), st.booleans(), st.integers(0, 2 * RECORDS)), min_size=1, max_size=60
)


@given(steps)
def test_a_batch_runs_exactly_when_enough_records_were_counted_or_the_delay_passed(calls: list) -> None:
    world, since, checked = World(), None, -math.inf  # what the test saw: the last batch (or first look), last count
    wait = world.wait()
    for advance, planned, available in calls:
        world.now += advance
        world.available = available
        counts_before = len(world.counts)
        result = wait.admit(PLANNED if planned else None)
        counted = len(world.counts) > counts_before
        if not planned:
            assert result is None and not counted
        elif since is None:
            assert result is PLANNED and not counted, "the run's first look never waits"
        elif world.now - since >= DELAY:
            assert result is PLANNED and not counted, "the delay passed: the batch runs, without a count"
        elif counted:
            assert world.now - checked >= INTERVAL, "a count at most once per interval"
            assert world.counts[-1][1:] == (to_count(PLANNED), RECORDS)
            assert (result is PLANNED) == (available >= RECORDS)
            checked = world.now
        else:
            assert result is None, "no count, no batch before the delay"
            assert world.now - checked < INTERVAL, "a check was due and did not come"
        if since is None or result is not None:
            since = world.now
        if result is not None:
            checked = -math.inf  # a new wait: its first check comes at once


def test_the_delay_counts_from_the_runs_first_look_even_when_it_found_nothing() -> None:
    world = World()
    wait = world.wait()
    assert wait.admit(None) is None  # the run starts on an idle stream
    world.now += DELAY - 0.5
    world.available = 1
    assert wait.admit(PLANNED) is None  # one record: it waits
    world.now += 0.5
    assert wait.admit(PLANNED) is PLANNED  # the delay since the first look
    world.now += 0.1
    assert wait.admit(PLANNED) is None  # a new wait from that batch


def test_after_a_long_idle_spell_the_next_record_runs_at_once_then_batches_are_a_delay_apart() -> None:
    world = World()
    wait = world.wait()
    assert wait.admit(PLANNED) is PLANNED  # first look
    world.now += 10 * DELAY
    assert wait.admit(None) is None  # idle: nothing to run
    world.available = 1
    assert wait.admit(PLANNED) is PLANNED  # the delay ran out long ago
    world.now += DELAY / 2
    assert wait.admit(PLANNED) is None
    world.available = RECORDS
    world.now += INTERVAL
    assert wait.admit(PLANNED) is PLANNED  # enough records: no need to wait for the delay


def test_the_shards_counted_are_those_with_something_to_read() -> None:
    offset = BatchOffset(
        run="r",
        batch=1,
        initial="TRIM_HORIZON",
        shards={"a": "AFTER:1", "b": "AFTER:2", "c": "AFTER:3", "d": "TRIM_HORIZON"},
        unread={"b": Stop.TIP.value, "c": Stop.MORE.value, "d": Stop.TARGET.value},
    )
    other = BatchOffset(run="r.t", batch=1, initial="TRIM_HORIZON", shards={"a": "AFTER:9"}, unread={"a": "tip"})
    # read in the batch, or left for later with more; of every stream
    assert to_count({"s": offset, "t": other, "u": attrs.evolve(other, unread={})}) == {
        ("s", "a"): "AFTER:1",
        ("s", "c"): "AFTER:3",
        ("u", "a"): "AFTER:9",
    }
