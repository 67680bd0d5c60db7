"""The clock seam: the system's clocks by default, an installed one inside its block only."""

import threading
import time

import pytest

from kinsumer import clock, waiting
from kinsumer.aws.tables import now_ms
from kinsumer.coordination.liveness import Liveness


class Fixed:
    def __init__(self) -> None:
        self.now, self.slept = 5.0, 0.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return 1_800_000_000.0 + self.now

    def sleep(self, seconds: float) -> None:
        self.slept += seconds
        self.now += seconds


def test_the_system_clocks_are_read_unless_a_clock_is_installed() -> None:
    before = time.monotonic()
    assert before <= clock.monotonic() <= time.monotonic()
    assert abs(clock.now_ms() - time.time() * 1000) < 1000
    fixed = Fixed()
    with clock.installed(fixed):
        assert clock.monotonic() == 5.0 and clock.wall() == 1_800_000_005.0
        assert now_ms() == 1_800_000_005_000  # the table code's epoch ms
        clock.sleep(2.5)
        assert fixed.slept == 2.5 and clock.monotonic() == 7.5
        liveness = Liveness(max_age=8.0)
        liveness.heartbeat_done(clock.monotonic())
        assert liveness.fresh()
        fixed.now += 4.0
        assert not liveness.fresh()
    assert clock.monotonic() >= before


def test_one_clock_at_a_time() -> None:
    with clock.installed(Fixed()), pytest.raises(RuntimeError), clock.installed(Fixed()):
        pass
    assert clock.monotonic() > 0


def test_the_waits_let_time_pass_on_an_installed_clock_instead_of_blocking() -> None:
    """kinsumer.waiting's waits read the installed clock: with nobody else to end them (one thread runs
    everything), the deadline's time passes at once; a wait without end there is a bug, said so."""
    fixed = Fixed()
    condition, event, lock = threading.Condition(), threading.Event(), threading.Lock()
    with clock.installed(fixed):
        deadline = waiting.Deadline(3.0)
        assert deadline.at == 8.0 and deadline.remaining() == 3.0 and not deadline.passed()
        with condition:
            assert not waiting.wait_condition(condition, lambda: False, deadline)
        assert fixed.now == 8.0 and deadline.passed() and deadline.remaining() == 0.0
        assert not waiting.wait_event(event, 2.0) and fixed.now == 10.0
        with lock:  # held: taking it again within 1.5 s fails once that time passed
            assert not waiting.acquire(lock, waiting.Deadline(1.5)) and fixed.now == 11.5
        with condition:
            assert waiting.wait_condition(condition, lambda: True, waiting.Deadline(None))  # ready: no wait
            with pytest.raises(RuntimeError, match="without a deadline"):
                waiting.wait_condition(condition, lambda: False, waiting.Deadline(None))
    deadline = waiting.Deadline(0.05)  # the system's clock again: a real, sliced wait
    with condition:
        assert not waiting.wait_condition(condition, lambda: False, deadline)
    assert deadline.passed() and deadline.at <= time.monotonic()
