"""Run.offer: the one rule for handing a record over (next*(), process()'s one worker and its workers use it)."""

from __future__ import annotations

import datetime as dt
import math

from hypothesis import given
from hypothesis import strategies as st

from kinsumer import Record
from kinsumer.delivery.progress import HANDED, HELD, STALE, Run, ShardProgress
from kinsumer.reading.position import Position

NOW = dt.datetime(2026, 12, 6, tzinfo=dt.UTC)


def run_of(count: int) -> Run:
    records = [Record(b"x", "k", str(i), "s", NOW, NOW) for i in range(count)]
    return Run(ShardProgress("s", None), records, 0)


@given(
    at=st.integers(0, 4),
    revoked=st.booleans(),
    paused=st.booleans(),
    fresh_for=st.sampled_from([-1.0, 0.0, 5.0, math.inf]),
    gate=st.sampled_from([None, True, False]),
)
def test_a_record_goes_out_only_within_its_run_of_a_kept_running_fresh_shard_the_gate_lets_through(
    at: int, revoked: bool, paused: bool, fresh_for: float, gate: bool | None
) -> None:
    run = run_of(3)
    run.handed = min(at, 3)
    progress = run.progress
    progress.paused, progress.fresh_until = paused, 100.0 + fresh_for
    if revoked:
        progress.revoke()
    asked: list[Position] = []

    def let(position: Position) -> bool:
        asked.append(position)
        return bool(gate)

    offered = run.offer(at, 100.0, None if gate is None else let)
    if at >= 3 or revoked or paused:
        assert offered is HELD and asked == []
    elif fresh_for <= 0:
        assert offered is STALE and asked == []  # the gate is not asked before the lease is fresh
    elif gate is False:
        assert offered is HELD and asked == [(str(at), None)]
    else:
        assert offered is HANDED
    assert run.handed == (at + 1 if offered is HANDED else min(at, 3))  # it moves only for a record handed


def test_a_shard_revoked_while_the_gate_decides_keeps_its_record() -> None:
    """handed moves before the last look at revoked: a handoff that revoked meanwhile sees the record held."""
    run = run_of(2)

    def revoke_meanwhile(position: Position) -> bool:
        run.progress.revoke()
        return True

    assert run.offer(0, 0.0, revoke_meanwhile) is HELD and run.handed == 0
