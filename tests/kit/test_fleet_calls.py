"""A fleet whose clients run process_batches(), aprocess() or aprocess_batches(): the same events, the same checks."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kinsumer import Record
from kinsumer.testing import Fleet, LocalAWS
from kinsumer.testing._handlers import Call


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
        fleet.start(2)
        put(300)
        fleet.wait_handled()
        fleet.join()
        put(300)
        fleet.leave(fleet.members[0])
        put(300)
        fleet.ledger.wait_for(fleet.ledger.distinct + 50, timeout=30)
        crashed = fleet.members[0]
        fleet.crash(crashed)
        put(200)
        report = fleet.wait_handled()
    assert report.put == 1100 and report.lost == () and fail_once == set()  # each failed once, then done
    assert report.unexplained_duplicates == () and report.ok, str(report)
    assert set(report.duplicates_by_reason) <= {"crash", "handoff timed out", "taken"}


def test_a_fleet_refuses_a_call_it_does_not_know() -> None:
    with pytest.raises(ValueError, match="call: one of process, process_batches, aprocess, aprocess_batches"):
        Fleet(LocalAWS(), "clicks", "app", print, call="next")  # type: ignore[arg-type]
