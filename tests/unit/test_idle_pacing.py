"""The pace of an idle shard's reads (ReaderSettings.delay): full rate, then slower up to
idle_poll_interval, then, after LONG_IDLE_AFTER seconds at that pace, slower still up to
max_idle_poll_interval."""

from __future__ import annotations

import itertools
import math

from hypothesis import example, given
from hypothesis import strategies as st

from kinsumer import Config
from kinsumer.reading.reader import IDLE_AFTER, LONG_IDLE_AFTER, ReaderSettings

throttles = st.floats(0.2, 3.0)
factors = st.floats(1.0, 50.0)


@st.composite
def settings(draw: st.DrawFn) -> ReaderSettings:
    throttle = draw(throttles)
    idle = throttle * draw(factors)
    longest = draw(st.none() | st.builds(lambda f: idle * f, factors))
    return ReaderSettings(throttle_delay=throttle, idle_poll_interval=idle, max_idle_poll_interval=longest)


def test_the_default_schedule_slows_down_to_5_s_after_a_minute_at_the_idle_interval() -> None:
    cfg = Config()
    pace = ReaderSettings(cfg.throttle_delay, cfg.max_records_per_call, cfg.idle_poll_interval,
                          cfg.effective_max_idle_poll_interval)  # fmt: skip
    assert [pace.delay(n) for n in range(70)] == [0.25] * 4 + [0.5] + [1.0] * 60 + [2.0, 4.0, 5.0, 5.0, 5.0]


@given(settings(), st.integers(0, 10**12))
def test_a_wait_lies_between_the_throttle_and_the_longest_wait_however_long_the_shard_was_idle(
    pace: ReaderSettings, empty_reads: int
) -> None:
    wait = pace.delay(empty_reads)
    assert pace.throttle_delay <= wait <= pace.longest_wait
    assert math.isfinite(wait)


def _reads(pace: ReaderSettings) -> int:
    """Enough empty reads to reach the longest wait, and some at it."""
    return math.ceil((IDLE_AFTER + LONG_IDLE_AFTER) / pace.throttle_delay) + 100


@given(settings())
def test_waits_never_shrink_and_at_most_double_while_reads_come_back_empty(pace: ReaderSettings) -> None:
    waits = [pace.delay(n) for n in range(_reads(pace))]
    for before, after in itertools.pairwise(waits):
        assert before <= after <= 2 * before
    assert waits[-1] == pace.longest_wait  # reached, and kept


@given(settings())
@example(ReaderSettings(throttle_delay=0.2, idle_poll_interval=0.4, max_idle_poll_interval=0.8))  # CI, 2026-11-28
def test_a_shard_idle_for_less_than_long_idle_after_at_the_idle_interval_is_never_read_later_than_it(
    pace: ReaderSettings,
) -> None:
    waits = [pace.delay(n) for n in range(_reads(pace))]
    idle = pace.idle_poll_interval
    full_rate = [w for w in waits if w == pace.throttle_delay]
    # the sums allow for float rounding: 150 waits of 0.4 s add up to 59.99999999999985
    assert math.fsum(full_rate) >= IDLE_AFTER - 1e-9  # a second at the full rate
    if pace.longest_wait > idle:
        first_longer = next(n for n, w in enumerate(waits) if w > idle)
        at_idle = [w for w in waits[:first_longer] if w == idle]
        assert math.fsum(at_idle) >= LONG_IDLE_AFTER - 1e-9
    else:
        assert max(waits) == idle  # no max_idle_poll_interval (or equal): idle_poll_interval bounds every wait
