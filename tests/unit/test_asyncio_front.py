"""The asyncio front end over a real Delivery: waits that never block the loop, holders, turns for the loop."""

from __future__ import annotations

import asyncio
import itertools
import threading

import pytest

from kinsumer import KinsumerError, NoRecordWithin
from kinsumer import asyncio_front as front_module
from kinsumer.asyncio_front import AsyncFront
from kinsumer.record import Record
from tests.unit.test_delivery import delivery, push, record


def ids(records: list[Record]) -> list[int]:
    return [int(r.sequence_number) for r in records]


def test_async_for_awaits_records_pushed_later_while_other_tasks_run() -> None:
    d = delivery(buffer_size=1024)
    progress = d.open_shard("s", None)
    push(d, progress, [record(i) for i in range(1, 4)])
    front = AsyncFront(d)

    async def main() -> tuple[list[Record], int]:
        ticks = 0

        pusher = threading.Thread(target=push, args=(d, progress, [record(i) for i in range(4, 7)]))

        async def ticker() -> None:  # the later records come only once it has run three times
            nonlocal ticks
            while True:
                ticks += 1
                if ticks == 3:
                    pusher.start()
                await asyncio.sleep(0.001)

        tick_task = asyncio.create_task(ticker())
        got = []
        async for r in front.records():  # a wait that blocked the loop would never see records 4-6
            got.append(r)
            if len(got) == 6:
                d.close()  # a stop: the loop ends
        tick_task.cancel()
        pusher.join()
        return got, ticks

    got, ticks = asyncio.run(asyncio.wait_for(main(), 30))
    assert ids(got) == [1, 2, 3, 4, 5, 6]
    assert ticks >= 3  # the ticker ran while the loop awaited the later records


def test_records_ready_back_to_back_still_give_the_loop_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(front_module, "YIELD_EVERY", 0.0)  # a turn before every record (1 ms in use)
    d = delivery(buffer_size=1024)
    progress = d.open_shard("s", None)
    push(d, progress, [record(i) for i in range(1, 201)])
    d_front = AsyncFront(d)

    async def main() -> list[str]:
        order: list[str] = []

        async def ticker() -> None:
            while True:
                order.append("tick")
                await asyncio.sleep(0)

        tick_task = asyncio.create_task(ticker())
        async for r in d_front.records():  # the body never awaits: only the front end can give turns
            order.append("record")
            if r.sequence_number == "200":
                break
        tick_task.cancel()
        return order

    order = asyncio.run(main())
    records = [i for i, what in enumerate(order) if what == "record"]
    assert len(records) == 200
    assert all("tick" in order[a:b] for a, b in itertools.pairwise(records))  # a turn between any two


def test_leaving_an_async_for_gives_its_record_in_hand_back() -> None:
    d = delivery(buffer_size=1024)
    progress = d.open_shard("s", None)
    push(d, progress, [record(i) for i in range(1, 6)])
    front = AsyncFront(d)

    async def main() -> None:
        async for r in front.records():
            if r.sequence_number == "3":
                break  # 1 and 2 were handled; 3 was in hand when the loop was left

    asyncio.run(main())
    d.acknowledge_held()  # a clean stop counts what holders have in hand: the loop has none any more
    assert progress.checkpoint == ("2", None)


def test_a_task_that_ends_counts_its_last_record_and_a_cancelled_one_gives_it_back() -> None:
    d = delivery(buffer_size=16)  # chunks of one record
    done, cut = d.open_shard("s", None), d.open_shard("t", None)
    push(d, done, [record(1), record(2)])
    push(d, cut, [record(1, "t")])
    front = AsyncFront(d)

    async def main() -> None:
        async def takes_two() -> None:
            assert ids([r for r in [await front.next_record(1), await front.next_record(1)] if r]) == [1, 2]

        await asyncio.create_task(takes_two())
        hold, handling = asyncio.Event(), asyncio.Event()

        async def cancelled_while_handling() -> None:
            r = await front.next_record(1)
            assert r is not None and r.shard_id == "t"
            handling.set()
            await hold.wait()  # handling it when cancelled

        task = asyncio.create_task(cancelled_while_handling())
        await asyncio.wait_for(handling.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)  # the done callbacks run

    asyncio.run(main())
    assert done.checkpoint == ("2", None)  # the task ended: its last record counts
    assert cut.checkpoint is None and cut.outstanding == 0  # given back: the next owner delivers it
    d.acknowledge_held()
    assert cut.checkpoint is None


def test_a_timeout_a_stop_and_a_failure_while_awaiting() -> None:
    d = delivery()
    front = AsyncFront(d)

    async def main() -> None:
        with pytest.raises(NoRecordWithin):
            await front.next_record(0.02)
        assert d._queue._ready_waiters == {}  # a waiter that gave up is forgotten
        threading.Timer(0.02, d.close).start()
        assert await front.next_record(None) is None  # a stop ends the wait
        assert await front.next_manual(None) == (None, None)

    asyncio.run(main())
    failing = delivery()
    threading.Timer(0.02, failing.close, args=(KinsumerError("table deleted"),)).start()
    with pytest.raises(KinsumerError, match="table deleted"):
        asyncio.run(AsyncFront(failing).next_record(None))


def test_a_cancelled_wait_leaves_no_waiter_behind() -> None:
    d = delivery()
    front = AsyncFront(d)

    async def main() -> None:
        task = asyncio.create_task(front.next_record(None))
        for _ in range(100):  # the task runs to its wait (a few turns of the loop)
            if d._queue._ready_waiters or task.done():
                break
            await asyncio.sleep(0)
        assert len(d._queue._ready_waiters) == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert d._queue._ready_waiters == {}

    asyncio.run(main())
    progress = d.open_shard("s", None)
    push(d, progress, [record(1)])  # no callback into the closed loop
    assert d.next_auto("h", 1) == record(1)


def test_manual_mode_hands_out_checkpoints() -> None:
    d = delivery()
    progress = d.open_shard("s", ("0", None))
    front = AsyncFront(d)
    threading.Timer(0.02, lambda: push(d, progress, [record(1), record(2)])).start()

    async def main() -> None:
        (r1, cp1), (r2, cp2) = await front.next_manual(5), await front.next_manual(5)
        assert (r1, r2) == (record(1), record(2)) and cp1 is not None and cp2 is not None
        cp2()
        cp1()

    asyncio.run(main())
    assert progress.checkpoint == ("2", None)


def test_a_task_that_raises_gives_its_record_back_and_asyncio_still_reports_the_exception(
    caplog: pytest.LogCaptureFixture,
) -> None:
    d = delivery(buffer_size=16)
    progress = d.open_shard("s", None)
    push(d, progress, [record(1)])
    front = AsyncFront(d)

    async def main() -> None:
        async def fails() -> None:
            assert await front.next_record(1) == record(1)
            raise ValueError("the handler failed")

        task = asyncio.create_task(fails())
        await asyncio.wait([task])
        del task  # nobody retrieves its exception: asyncio reports it when the task goes

    asyncio.run(main())
    assert progress.checkpoint is None and progress.outstanding == 0  # given back
    assert "Task exception was never retrieved" in caplog.text
