"""The clock seam: the system's clocks by default, an installed one inside its block only."""

import time

import pytest

from kinsumer import clock
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
