"""process()'s timeout: a handler that hangs is a failed attempt; too many stuck calls and the client leaves."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any

import attrs
import pytest

from kinsumer import ConfigError, Failure, HandlerStuck, Record
from kinsumer.coordination import checkpoints_table
from tests.aws.test_process import FAST, QUICK, make, put, rid
from tests.helpers import CountingStats

TIMEOUT = 2.0  # long beside an instant handler call, even on a loaded machine


class Hanging:
    """A handler that hangs on the ``poison`` ids (until the test ends) and records the rest."""

    def __init__(self, poison: set[int], stop_after: int | None = None, k: Any = None) -> None:
        self.poison, self.stop_after, self.k = poison, stop_after, k
        self.lock = threading.Lock()
        self.calls: Counter[int] = Counter()
        self.done: list[Record] = []
        self.dead: list[Failure] = []
        self.release = threading.Event()

    def __call__(self, record: Record) -> None:
        with self.lock:
            self.calls[rid(record)] += 1
        if rid(record) in self.poison:
            self.release.wait(120)
            return
        with self.lock:
            self.done.append(record)
        self._maybe_stop()

    def sink(self, failure: Failure) -> None:
        with self.lock:
            self.dead.append(failure)
        self._maybe_stop()

    def _maybe_stop(self) -> None:
        with self.lock:
            finished = self.stop_after is not None and len(self.done) + len(self.dead) == self.stop_after
        if finished:
            threading.Thread(target=self.k.stop, daemon=True).start()


def test_a_record_whose_handler_hangs_times_out_max_attempts_times_then_goes_to_the_sink(kinesis: Any, db: Any) -> None:
    stats = CountingStats()
    k = make(kinesis, db, shards=1, config=attrs.evolve(FAST, stats=stats))
    produced = put(kinesis, 10)
    hanging = Hanging({5})
    hanging.stop_after, hanging.k = len(produced), k
    try:
        with k:
            k.process(hanging, timeout=TIMEOUT, max_attempts=3, dead_letter=hanging.sink, **QUICK)
    finally:
        hanging.release.set()
    (failure,) = hanging.dead
    assert (rid(failure.record), failure.reason, failure.attempts) == (5, "timeout", 3)
    assert failure.error == f"HandlerTimedOut: the handler ran longer than timeout ({TIMEOUT:g} s)"
    assert [rid(r) for r in hanging.done] == [i for i in produced if i != 5]  # the shard went on, in order
    assert hanging.calls[5] == 3
    assert stats.calls["handler_timed_out"] >= 3 and stats.calls["dead_lettered"] == 1


def test_more_stuck_calls_than_allowed_and_the_client_leaves_and_process_raises_handler_stuck(
    kinesis: Any, db: Any
) -> None:
    """concurrency 1 and max_attempts 1 allow one stuck call: record 3 hangs and goes to the sink, then
    record 7 hangs too: HandlerStuck, the shard released at the record before 7 (7 is delivered again)."""
    k = make(kinesis, db, shards=1)
    put(kinesis, 10)
    hanging = Hanging({3, 7})
    try:
        with k, pytest.raises(HandlerStuck) as raised:
            k.process(hanging, timeout=TIMEOUT, max_attempts=1, dead_letter=hanging.sink, **QUICK)
        assert k.status().state == "stopped"  # the client left
    finally:
        hanging.release.set()
    assert [rid(f.record) for f in hanging.dead] == [3]
    assert [rid(r) for r in hanging.done] == [0, 1, 2, 4, 5, 6]
    assert raised.value.bound == 1 and len(raised.value.stuck) == 2
    assert "2 handler calls are stuck past their timeout (at most 1 allowed)" in str(raised.value)
    (row,) = [checkpoints_table.CheckpointRow.from_item(i) for i in db.scan(TableName="app_checkpoints")["Items"]]
    six = next(r for r in hanging.done if rid(r) == 6)
    assert row.owner_id is None and row.sequence_number == six.sequence_number


def test_an_async_handler_is_cancelled_at_its_timeout(kinesis: Any, db: Any) -> None:
    k = make(kinesis, db, shards=1)
    produced = put(kinesis, 6)
    cancelled: list[int] = []
    done: list[int] = []
    dead: list[Failure] = []

    async def handler(record: Record) -> None:
        if rid(record) == 2:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.append(rid(record))
                raise
        done.append(rid(record))
        if len(done) + len(dead) == len(produced):
            threading.Thread(target=k.stop, daemon=True).start()

    async def sink(failure: Failure) -> None:
        dead.append(failure)

    async def main() -> None:
        async with k:
            await k.aprocess(handler, timeout=1.0, max_attempts=2, dead_letter=sink, **QUICK)

    asyncio.run(main())
    assert cancelled == [2, 2] and done == [0, 1, 3, 4, 5]
    assert [(rid(f.record), f.reason, f.attempts) for f in dead] == [(2, "timeout", 2)]


@pytest.mark.parametrize("value", [0, -1, "10s"])
def test_timeout_must_be_a_positive_number(kinesis: Any, db: Any, value: object) -> None:
    k = make(kinesis, db)
    with pytest.raises(ConfigError) as info:
        k.process(lambda r: None, timeout=value)  # type: ignore[arg-type]
    assert info.value.field == "timeout"
