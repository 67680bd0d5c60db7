"""A fleet whose clients run process_batches(), aprocess() or aprocess_batches(): the same events, the same checks."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from kinsumer import Record
from kinsumer.testing import Fleet, LocalAWS, Report
from kinsumer.testing._handlers import Call
from tests.helpers import wait_until


def handler_for(call: Call, fail_once: set[str]) -> Any:
    """A handler for ``call`` that fails once on the records of ``fail_once`` (then does them)."""

    def failing(record: Record) -> bool:
        if record.data.decode() in fail_once:
            fail_once.discard(record.data.decode())
            return True
        return False

    def one(record: Record) -> None:
        if failing(record):
            raise ValueError("not yet")

    def batch(records: list[Record]) -> list[Record]:
        return [r for r in records if failing(r)][:1]  # the first failed goes again, with those after it

    async def one_async(record: Record) -> None:
        await asyncio.sleep(0)
        one(record)

    async def batch_async(records: list[Record]) -> list[Record]:
        await asyncio.sleep(0)
        return batch(records)

    return {"process_batches": batch, "aprocess": one_async, "aprocess_batches": batch_async}[call]


def join_leave_crash(fleet: Fleet, put: Callable[[int], None], batch: int, last: int) -> tuple[str, Report]:
    """Two clients start, a third joins, the first leaves, then one crashes with records flowing, ``batch``
    records put before each event and ``last`` after the crash; the crashed client's name and the report."""
    fleet.start(2)
    put(batch)
    fleet.wait_handled()
    fleet.join()
    put(batch)
    fleet.leave(fleet.members[0])
    put(batch)
    fleet.ledger.wait_for(fleet.ledger.distinct + 50, timeout=30, check=fleet.check)
    crashed = fleet.members[0]
    fleet.crash(crashed)
    put(last)
    return crashed, fleet.wait_handled()


@pytest.mark.parametrize("call", ["process_batches", "aprocess", "aprocess_batches"])
def test_a_fleet_of_any_call_through_a_join_a_leave_and_a_crash_loses_nothing_and_repeats_only_where_allowed(
    call: Call,
) -> None:
    aws = LocalAWS()
    stream = aws.stream("clicks", shards=4)

    def put(count: int) -> None:
        first = len(stream.records())
        stream.put_all((str(n), f"key-{n % 11}") for n in range(first, first + count))

    fail_once = {"5", "250", "700"}
    options: dict[str, Any] = {"backoff": 0.01, "max_backoff": 0.01}
    if call.endswith("_batches"):
        options.update(max_records=20, max_wait=0.05)
    with Fleet(aws, "clicks", "app", handler_for(call, fail_once), call=call, **options) as fleet:
        crashed, report = join_leave_crash(fleet, put, 300, 200)
    assert report.put == 1100 and report.lost == () and fail_once == set()  # each failed once, then done
    assert report.unexplained_duplicates == () and report.ok, str(report)
    assert set(report.duplicates_by_reason) <= {"crash", "handoff timed out", "taken"}
    assert all(d.clients[0] == crashed for d in report.duplicates if d.reason == "crash")


def test_a_fleet_refuses_a_call_it_does_not_know() -> None:
    with pytest.raises(ValueError, match="call: one of process, process_batches, aprocess, aprocess_batches, next"):
        Fleet(LocalAWS(), "clicks", "app", print, call="nex")  # type: ignore[arg-type]


def test_the_late_return_of_a_call_past_its_timeout_is_a_duplicate_of_a_timed_out_call() -> None:
    """process(timeout=...) abandons a call that runs too long and tries its record again; the abandoned call
    goes on and returns later. Both count as handlings: the report allows the repeat ("call timed out") and
    says so, and holds every other record to once."""
    aws = LocalAWS()
    stream = aws.stream("clicks", shards=2)
    slow, released = {"7"}, threading.Event()

    def handler(record: Record) -> None:
        if record.data.decode() in slow:
            slow.discard(record.data.decode())
            released.wait(10)  # past the timeout: abandoned; it returns once the retry is done

    with Fleet(aws, "clicks", "app", handler, timeout=0.2, backoff=0.01, max_backoff=0.01) as fleet:
        fleet.start(1)
        stream.put_all((str(n), f"key-{n % 5}") for n in range(20))
        fleet.wait_handled()
        released.set()
        wait_until(lambda: fleet.report().duplicates, 10, "the abandoned call to return")
        report = fleet.report()
    assert report.ok, report
    assert report.duplicates_by_reason == {"call timed out": 1}, report


@pytest.mark.parametrize("call", ["next", "anext"])
def test_a_fleet_of_next_or_async_for_loops_through_a_join_a_leave_and_a_crash(call: Call) -> None:
    """Clients that loop over their records (``for record in k``, ``async for record in k``): a record counts as
    processed when the next is asked for; a clean leave repeats nothing, a crash only what it held."""
    aws = LocalAWS()
    stream = aws.stream("clicks", shards=4)
    seen: list[str] = []

    def handler(record: Record) -> None:
        seen.append(record.shard_id)

    async def handler_async(record: Record) -> None:
        await asyncio.sleep(0)
        handler(record)

    def put(count: int) -> None:
        first = len(stream.records())
        stream.put_all((str(n), f"key-{n % 11}") for n in range(first, first + count))

    with Fleet(aws, "clicks", "app", handler if call == "next" else handler_async, call=call) as fleet:
        crashed, report = join_leave_crash(fleet, put, 200, 200)
    assert report.put == 800 and report.ok, report
    assert set(report.duplicates_by_reason) <= {"crash", "handoff timed out", "taken"}, report
    assert all(d.clients[0] == crashed for d in report.duplicates if d.reason == "crash")


def test_a_loop_over_next_takes_no_process_options() -> None:
    aws = LocalAWS()
    aws.stream("clicks")
    with pytest.raises(ValueError, match="max_attempts: options of process"):
        Fleet(aws, "clicks", "app", lambda record: None, call="next", max_attempts=2)
