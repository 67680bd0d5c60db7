"""A shard's phase: its transitions (a table, and random walks through it) and what is derived from it."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinsumer.delivery import phase as phase_module
from kinsumer.delivery.phase import Phase, PhaseError, ShardPhase

P = Phase
ERR = None  # refused: PhaseError

Mutator = Callable[[ShardPhase], object]
MUTATORS: dict[str, Mutator] = {
    "captured": ShardPhase.captured,
    "reached_end": ShardPhase.reached_end,
    "revoke": ShardPhase.revoke,
    "released": lambda p: p.released(finished=False),
    "released finished": lambda p: p.released(finished=True),
    "lost": ShardPhase.lost,
}

#: Each phase's next phase under each mutator (ERR: refused), written out once more, apart from the module.
EXPECTED: dict[Phase, dict[str, Phase | None]] = {
    P.CAPTURING: {"captured": P.READING, "reached_end": ERR, "revoke": P.CALLED_OFF,
                  "released": ERR, "released finished": ERR, "lost": ERR},
    P.CALLED_OFF: {"captured": P.HANDING_OFF, "reached_end": ERR, "revoke": P.CALLED_OFF,
                   "released": ERR, "released finished": ERR, "lost": ERR},
    P.READING: {"captured": ERR, "reached_end": P.FINISHING, "revoke": P.HANDING_OFF,
                "released": P.RELEASED, "released finished": P.FINISHED, "lost": P.LOST},
    P.FINISHING: {"captured": ERR, "reached_end": ERR, "revoke": P.HANDING_OFF,
                  "released": P.RELEASED, "released finished": P.FINISHED, "lost": P.LOST},
    P.HANDING_OFF: {"captured": ERR, "reached_end": P.HANDING_OFF, "revoke": P.HANDING_OFF,
                    "released": P.RELEASED, "released finished": P.FINISHED, "lost": P.LOST},
    P.RELEASED: {"captured": ERR, "reached_end": ERR, "revoke": P.RELEASED,
                 "released": ERR, "released finished": ERR, "lost": ERR},
    P.FINISHED: {"captured": ERR, "reached_end": ERR, "revoke": P.FINISHED,
                 "released": ERR, "released finished": ERR, "lost": ERR},
    P.LOST: {"captured": ERR, "reached_end": P.LOST, "revoke": P.LOST,
             "released": ERR, "released finished": ERR, "lost": ERR},
}  # fmt: skip

#: A way to each phase from a new one.
PATHS: dict[Phase, list[str]] = {
    P.CAPTURING: [],
    P.CALLED_OFF: ["revoke"],
    P.READING: ["captured"],
    P.FINISHING: ["captured", "reached_end"],
    P.HANDING_OFF: ["captured", "revoke"],
    P.RELEASED: ["captured", "revoke", "released"],
    P.FINISHED: ["captured", "reached_end", "released finished"],
    P.LOST: ["captured", "lost"],
}

OWNED = {P.READING, P.FINISHING, P.HANDING_OFF}
HANDING_OUT = {P.CAPTURING, P.READING, P.FINISHING}


def in_phase(target: Phase) -> ShardPhase:
    phase = ShardPhase()
    for name in PATHS[target]:
        MUTATORS[name](phase)
    assert phase.value is target
    return phase


def apply(phase: ShardPhase, name: str) -> tuple[Phase | None, object]:
    """The phase after mutator ``name`` (None: refused, and the phase unchanged), and what it returned."""
    before = phase.value
    try:
        returned = MUTATORS[name](phase)
    except PhaseError:
        assert phase.value is before
        return None, None
    return phase.value, returned


def assert_derived(phase: ShardPhase) -> None:
    assert phase.owned == (phase.value in OWNED)
    assert phase.revoked == (phase.value not in HANDING_OUT)
    assert phase.stopping.is_set() == phase.revoked


def test_the_table_of_transitions() -> None:
    for start, row in EXPECTED.items():
        for name, expected in row.items():
            phase = in_phase(start)
            after, returned = apply(phase, name)
            assert after is expected, f"{start.name} --{name}--> {after}, not {expected}"
            assert_derived(phase)
            if name == "revoke" and after is not None:
                assert returned is (after is not start)  # True if it changed the phase
            if name == "reached_end" and after is not None:
                assert returned is (after is P.FINISHING)


def test_the_module_draws_the_same_table() -> None:
    """The table in kinsumer/delivery/phase.py's description says what the code does."""
    doc = phase_module.__doc__ or ""
    header, *lines = [line.split() for line in doc.splitlines() if line.strip().startswith(("captured ", "CAPT",
                      "CALLED", "READ", "FINISH", "HAND", "RELEASED ", "LOST "))]  # fmt: skip
    assert header == ["captured", "reached_end", "revoke", "released", "lost"]
    drawn = {}
    for start, *cells in lines:
        drawn[P[start]] = [c for c in cells if c != "*"]
    for start, row in EXPECTED.items():
        same = {"-": start, "!": None}
        cells = [same.get(c, P[c] if c in P.__members__ else c) for c in drawn[start]]
        assert cells == [row[name] for name in ("captured", "reached_end", "revoke", "released", "lost")], start
        assert row["released finished"] is (P.FINISHED if cells[3] is P.RELEASED else ERR)  # the table's *


@given(st.lists(st.sampled_from(sorted(MUTATORS)), max_size=12))
def test_any_sequence_follows_the_table_and_revoked_never_comes_back(names: list[str]) -> None:
    phase = ShardPhase()
    revoked = False
    for name in names:
        before = phase.value
        after, _ = apply(phase, name)
        assert after is EXPECTED[before][name]
        assert_derived(phase)
        assert phase.revoked or not revoked  # once revoked, for good
        revoked = phase.revoked
    last = phase.value
    assert not phase.ended.is_set()
    phase.end()  # the worker's coroutine is over, in whatever phase
    assert phase.ended.is_set() and phase.value is last


@pytest.mark.parametrize("first", ["revoke", "lost"])
def test_a_revoke_and_a_loss_from_two_threads_end_lost_whichever_comes_first(first: str) -> None:
    phase = in_phase(P.READING)
    second = "lost" if first == "revoke" else "revoke"
    go = threading.Barrier(2)

    def run(name: str) -> None:
        go.wait(10)
        MUTATORS[name](phase)

    threads = [threading.Thread(target=run, args=(name,)) for name in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert phase.value is P.LOST and phase.revoked and phase.stopping.is_set() and not phase.owned
