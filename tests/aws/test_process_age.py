"""process()'s max_record_age: records too old when their turn comes go to the sink as "expired", unseen.

The age is measured against ``kinsumer.handling.attempts._now``, which these tests replace with a clock
of their own: frozen between the arrivals of the old and the new records, or moved on by a handler.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import attrs
import pytest

from kinsumer import ConfigError, Failure, Record, RecordFailed
from kinsumer.coordination import checkpoints_table
from kinsumer.handling import attempts
from tests.aws.test_process import FAST, QUICK, Handled, make, put, rid
from tests.helpers import CountingStats, wait_until

MAX_AGE = 1.0


def old_then_new(kinesis: Any, old: int, new: int) -> tuple[list[int], list[int], float]:
    """Put ``old`` records, then ``new`` ones a moment later; a time at which, with ``MAX_AGE``, every
    old record is too old and no new one is (arrival timestamps are kept to the millisecond)."""
    olds = put(kinesis, old)
    after_old = time.time()
    wait_until(lambda: time.time() > after_old + 0.2, 5, "a gap between the old and the new records")
    news = put(kinesis, new, first=old)
    return olds, news, after_old + 0.1 + MAX_AGE


def old_ones_expired(kinesis: Any, old: int, new: int, monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[int]]:
    """:func:`old_then_new`, with the records' clock frozen where the old ones are too old, the new ones not."""
    olds, news, frozen = old_then_new(kinesis, old, new)
    monkeypatch.setattr(attempts, "_now", lambda: frozen)
    return olds, news


@pytest.mark.parametrize("concurrency", [1, 3])
def test_records_older_than_max_record_age_go_to_the_sink_as_expired_and_the_handler_never_sees_them(
    kinesis: Any, db: Any, monkeypatch: pytest.MonkeyPatch, concurrency: int
) -> None:
    stats = CountingStats()
    k = make(kinesis, db, config=attrs.evolve(FAST, stats=stats))
    olds, news = old_ones_expired(kinesis, 12, 20, monkeypatch)
    handled = Handled(k, len(olds) + len(news))
    with k:
        k.process(handled, dead_letter=handled.sink, max_record_age=MAX_AGE, concurrency=concurrency, **QUICK)
    assert sorted(rid(r) for r in handled.done) == news  # every new record handled, no old one
    assert sorted(rid(f.record) for f in handled.dead) == olds and not any(handled.calls[i] for i in olds)
    for failure in handled.dead:
        assert (failure.reason, failure.attempts, failure.stream) == ("expired", 0, "clicks")
        assert "older than max_record_age (1 s)" in failure.error, failure.error
    assert handled.in_order()
    assert stats.calls["record_expired"] == len(olds) == stats.calls["dead_lettered"]
    assert all(age > MAX_AGE for age in stats.expired_ages)


def test_a_record_that_expires_while_it_waits_for_a_retry_goes_to_the_sink_with_its_calls_counted(
    kinesis: Any, db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One shard: record 5 fails once, and the clock moves on by an hour meanwhile; its retry finds it
    too old, and so are the records after it (this time, each before its first call)."""
    k = make(kinesis, db, shards=1)
    produced = put(kinesis, 12)
    clock = [time.time() + 5.0]  # every record is younger than max_record_age until record 5 fails
    monkeypatch.setattr(attempts, "_now", lambda: clock[0])

    def fail_once(i: int, attempt: int) -> bool:
        if i == 5 and attempt == 1:
            clock[0] += 3600
            return True
        return False

    handled = Handled(k, len(produced), fail=fail_once)
    with k:
        k.process(handled, dead_letter=handled.sink, max_record_age=60, **QUICK)
    assert [rid(r) for r in handled.done] == list(range(5))
    assert [(rid(f.record), f.reason, f.attempts) for f in handled.dead] == [(5, "expired", 1)] + [
        (i, "expired", 0) for i in range(6, 12)
    ]
    assert handled.calls[5] == 1


def test_status_counts_a_shards_expired_records(kinesis: Any, db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    k = make(kinesis, db, shards=1)
    olds, news = old_ones_expired(kinesis, 7, 3, monkeypatch)
    seen: list[int] = []
    handled = Handled(k, len(olds) + len(news))

    def handler(record: Record) -> None:
        seen.extend(shard.expired for shard in k.status().shards)
        handled(record)

    with k:
        k.process(handler, dead_letter=handled.sink, max_record_age=MAX_AGE)
    assert seen == [len(olds)] * len(news)  # the old ones came first, each counted
    row = checkpoints_table.read_row(db, "app_checkpoints", "shardId-000000000000")
    assert row is not None and row.expired == len(olds)  # for kinsumer status, stored with the commits


def test_batches_leave_out_the_expired_records_of_a_batch_and_of_its_retries(
    kinesis: Any, db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One shard in batches: the old records go to the sink and no batch holds them; then a batch returns
    record 20 as failed and the clock moves on: nothing is handed out again, 20 and the records after it
    go to the sink."""
    k = make(kinesis, db, shards=1)
    olds, _, frozen = old_then_new(kinesis, 10, 20)
    clock = [frozen]
    monkeypatch.setattr(attempts, "_now", lambda: clock[0])
    batches: list[list[int]] = []
    dead: list[Failure] = []
    lock = threading.Lock()

    def handler(records: list[Record]) -> list[Record] | None:
        with lock:
            batches.append([rid(r) for r in records])
            failed = [r for r in records if rid(r) == 20]
            if failed:
                clock[0] += 3600
        return failed or None

    def sink(failure: Failure) -> None:
        with lock:
            dead.append(failure)
            if len(dead) == len(olds) + 10:
                threading.Thread(target=k.stop, daemon=True).start()

    with k:
        k.process_batches(handler, max_records=100, max_wait=0.2, dead_letter=sink, max_record_age=MAX_AGE, **QUICK)
    handed = [i for batch in batches for i in batch]
    assert not set(handed) & set(olds)
    assert 20 in batches[-1] and handed.count(20) == 1  # nothing was handed out after the clock moved on
    assert handed[: handed.index(20)] == list(range(10, 20))  # in order, each once
    assert [rid(f.record) for f in dead] == olds + list(range(20, 30))
    assert [(f.reason, f.attempts) for f in dead[len(olds) :]] == [("expired", 1)] + [("expired", 0)] * 9


def test_aprocess_sends_expired_records_to_an_async_sink(
    kinesis: Any, db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    k = make(kinesis, db, shards=1)
    olds, news = old_ones_expired(kinesis, 5, 5, monkeypatch)
    done: list[int] = []
    dead: list[tuple[int, str]] = []

    async def handler(record: Record) -> None:
        done.append(rid(record))
        if len(done) == len(news):
            threading.Thread(target=k.stop, daemon=True).start()

    async def sink(failure: Failure) -> None:
        dead.append((rid(failure.record), failure.reason))

    async def main() -> None:
        async with k:
            await k.aprocess(handler, dead_letter=sink, max_record_age=MAX_AGE)

    asyncio.run(main())
    assert done == news and dead == [(i, "expired") for i in olds]


@pytest.mark.parametrize(
    ("kwargs", "rule"),
    [
        ({"max_record_age": 60}, "needs a dead_letter sink"),
        ({"max_record_age": 0, "dead_letter": print}, "must be a number > 0"),
        ({"max_record_age": -5, "dead_letter": print}, "must be a number > 0"),
        ({"max_record_age": "1h", "dead_letter": print}, "must be a number > 0"),
    ],
)
def test_max_record_age_needs_a_sink_and_a_positive_number(
    kinesis: Any, db: Any, kwargs: dict[str, Any], rule: str
) -> None:
    k = make(kinesis, db)
    with pytest.raises(ConfigError, match=rule) as info:
        k.process(lambda r: None, **kwargs)
    assert info.value.field == "max_record_age"


def test_an_expired_record_whose_sink_fails_raises_record_failed_saying_it_expired(
    kinesis: Any, db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    k = make(kinesis, db, shards=1)
    olds, _ = old_ones_expired(kinesis, 1, 0, monkeypatch)

    def broken_sink(failure: Failure) -> None:
        raise OSError("the queue is gone")

    with k, pytest.raises(RecordFailed) as raised:
        k.process(lambda r: None, dead_letter=broken_sink, max_record_age=MAX_AGE, **QUICK)
    assert raised.value.failure.reason == "expired" and rid(raised.value.failure.record) == olds[0]
    assert "could not be handled: it expired (" in str(raised.value) and "OSError" in str(raised.value)
