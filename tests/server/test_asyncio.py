"""The asyncio front end over HTTP on moto's server: ``async with``, ``async for``, several tasks,
cancellation and Ctrl-C."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable

import attrs
import pytest

from demo.servers import LocalServer
from kinsumer import ConfigError, Kinsumer, Record
from kinsumer.aws.tables import Tables
from kinsumer.coordination import checkpoints_table
from tests.helpers import wait_until
from tests.server.conftest import SERVER_CONFIG

pytestmark = pytest.mark.server

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def put(server: LocalServer, stream: str, ids: range, keys: int = 16) -> None:
    kinesis = server.client("kinesis")
    for start in range(ids.start, ids.stop, 250):
        kinesis.put_records(StreamName=stream, Records=[
            {"Data": json.dumps({"id": i, "key": i % keys}).encode(), "PartitionKey": f"key-{i % keys}"}
            for i in range(start, min(start + 250, ids.stop))
        ])  # fmt: skip


def rid(record: Record) -> int:
    return int(json.loads(record.data)["id"])


async def cancel_while_handling(task: asyncio.Task[None], handling: asyncio.Event) -> None:
    """Cancel ``task`` once its handler says it is handling the record it waits on."""
    await asyncio.wait_for(handling.wait(), 60)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def consumer(server: LocalServer, stream: str, app: str, name: str) -> Kinsumer:
    return Kinsumer(stream, app, name, SERVER_CONFIG, kinesis=server.client("kinesis"),
                    dynamodb=server.client("dynamodb"))  # fmt: skip


def test_two_tasks_async_for_one_consumer_get_every_record_once_in_shard_order(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(4)
    total = 2000
    put(moto_server, stream, range(total))
    seen: dict[str, list[Record]] = {"a": [], "b": []}

    async def main() -> None:
        async with consumer(moto_server, stream, app, "async-1") as k:
            stopping: list[asyncio.Task[None]] = []

            async def read(name: str) -> None:
                async for record in k:
                    seen[name].append(record)
                    await asyncio.sleep(0)  # a handler that awaits something
                    if sum(map(len, seen.values())) == total and not stopping:
                        stopping.append(asyncio.create_task(asyncio.to_thread(k.stop)))

            await asyncio.wait_for(asyncio.gather(read("a"), read("b")), 120)
            await stopping[0]

    asyncio.run(main())
    every = [r for records in seen.values() for r in records]
    assert sorted(rid(r) for r in every) == list(range(total))  # each once
    assert seen["a"] and seen["b"]  # both tasks took records
    for records in seen.values():  # each task gets a shard's records in its order
        by_shard: dict[str, list[int]] = defaultdict(list)
        for r in records:
            by_shard[r.shard_id].append(int(r.sequence_number))
        assert all(seqs == sorted(seqs) for seqs in by_shard.values())


def test_a_task_cancelled_mid_record_leaves_it_to_the_next_client_and_nothing_handled_twice_before(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(1)
    put(moto_server, stream, range(50))
    handled: list[int] = []

    async def first() -> None:
        hold, handling = asyncio.Event(), asyncio.Event()

        async def consume() -> None:
            async with consumer(moto_server, stream, app, "async-first") as k:
                async for record in k:
                    if rid(record) == 20:
                        handling.set()
                        await hold.wait()  # handling record 20 when cancelled
                    handled.append(rid(record))

        await cancel_while_handling(asyncio.create_task(consume()), handling)

    asyncio.run(asyncio.wait_for(first(), 60))
    assert handled == list(range(20))
    second = consumer(moto_server, stream, app, "sync-second")
    again = []
    with second:
        while len(again) < 30:
            record = second.next_record(timeout=30)
            assert record is not None
            again.append(rid(record))
    assert again == list(range(20, 50))  # the record in hand comes again, first; nothing before it does


def test_anext_record_mirrors_next_record_with_a_timeout_and_checkpoints_in_manual_mode(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(1)
    put(moto_server, stream, range(5))

    async def main() -> list[int]:
        manual = attrs.evolve(SERVER_CONFIG, manual_checkpointing=True)
        k = Kinsumer(stream, app, "async-manual", manual, kinesis=moto_server.client("kinesis"),
                     dynamodb=moto_server.client("dynamodb"))  # fmt: skip
        got = []
        async with k:
            for _ in range(5):
                data, checkpoint = await k.anext_with_checkpointer(timeout=30)
                assert data is not None and checkpoint is not None
                got.append(json.loads(data)["id"])
                checkpoint()
        return got

    assert asyncio.run(main()) == [0, 1, 2, 3, 4]

    async def later() -> tuple[int | None, bool]:
        async with consumer(moto_server, stream, app, "async-auto") as k:
            put(moto_server, stream, range(5, 6))
            record = await k.anext_record(timeout=30)  # what the manual client checkpointed is not read again
            try:
                await k.anext_record(timeout=0.3)
            except TimeoutError:
                timed_out = True
            else:
                timed_out = False
            return None if record is None else rid(record), timed_out

    assert asyncio.run(later()) == (5, True)


CTRL_C = """
import asyncio, json, sys
from kinsumer import Config, Kinsumer
from demo.servers import client
spec = json.loads(sys.argv[1])

async def main():
    config = Config(
        shard_check_frequency=0.5, client_record_max_age=2.0, commit_frequency=0.25, leader_action_frequency=1.0
    )
    k = Kinsumer(spec["stream"], spec["app"], "ctrl-c", config,
                 kinesis=client(spec["endpoint"], "kinesis"), dynamodb=client(spec["endpoint"], "dynamodb"))
    async with k:
        async for record in k:
            print(json.loads(record.data)["id"], flush=True)

asyncio.run(main())
"""


def test_ctrl_c_in_asyncio_run_leaves_cleanly_releasing_every_shard(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(2)
    put(moto_server, stream, range(10))
    spec = json.dumps({"stream": stream, "app": app, "endpoint": moto_server.endpoint})
    env = {**os.environ, "PYTHONPATH": REPO}
    process = subprocess.Popen([sys.executable, "-c", CTRL_C, spec], cwd=REPO, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        lines: list[str] = []
        assert process.stdout is not None
        while len(lines) < 10:
            line = process.stdout.readline()
            assert line, f"the client ended early: {process.stderr.read() if process.stderr else ''}"
            lines.append(line)
        process.send_signal(signal.SIGINT)
        wait_until(lambda: process.poll() is not None, 30, "the client to leave after Ctrl-C")
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)
    assert sorted(int(line) for line in lines) == list(range(10))
    rows = checkpoints_table.load_rows(moto_server.client("dynamodb"), Tables.for_application(app).checkpoints)
    assert len(rows) == 2 and all(row.owner_id is None for row in rows.values())  # released, not left to expire


ALWAYS_FAILS, FAILS_TWICE = {13, 77, 140}, {5, 60, 199}


def test_aprocess_retries_dead_letters_to_an_async_sink_and_handles_the_rest_once_in_shard_order(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(4)
    ids = range(240)
    put(moto_server, stream, ids, keys=24)
    calls: dict[int, int] = defaultdict(int)
    handled: list[tuple[int, str, int]] = []  # (id, shard, sequence number), as handled
    dead = []
    busy: dict[str, int] = defaultdict(int)
    overlap = False

    async def handler(record: Record) -> None:
        nonlocal overlap
        i = rid(record)
        calls[i] += 1
        busy[record.shard_id] += 1
        overlap |= busy[record.shard_id] > 1
        try:
            await asyncio.sleep(0.001)  # the handlers of the four shards overlap
            if i in ALWAYS_FAILS or (i in FAILS_TWICE and calls[i] <= 2):
                raise ValueError(f"record {i} cannot be handled")
            handled.append((i, record.shard_id, int(record.sequence_number)))
        finally:
            busy[record.shard_id] -= 1

    async def sink(failure: object) -> None:
        dead.append(failure)
        await asyncio.sleep(0)

    async def main() -> None:
        async with consumer(moto_server, stream, app, "async-process") as k:
            work = asyncio.create_task(
                k.aprocess(handler, max_attempts=3, dead_letter=sink, backoff=0.01, max_backoff=0.05, concurrency=4)
            )
            while len(handled) + len(dead) < len(ids):
                assert not work.done(), work.exception()
                await asyncio.sleep(0.05)
            await asyncio.to_thread(k.stop)
            await asyncio.wait_for(work, 30)  # it returns once the consumer stopped

    asyncio.run(asyncio.wait_for(main(), 120))
    assert sorted(rid(f.record) for f in dead) == sorted(ALWAYS_FAILS)  # each once, nothing else
    assert {(f.attempts, f.reason) for f in dead} == {(3, "raised")}
    assert sorted(i for i, _, _ in handled) == sorted(set(ids) - ALWAYS_FAILS)  # the flaky ones too, once each
    assert all(calls[i] == 3 for i in FAILS_TWICE | ALWAYS_FAILS)
    assert not overlap  # never two records of one shard at once
    by_shard: dict[str, list[int]] = defaultdict(list)
    for _, shard, seq in handled:
        by_shard[shard].append(seq)
    assert len(by_shard) == 4 and all(seqs == sorted(seqs) for seqs in by_shard.values())


def test_a_cancelled_aprocess_gives_the_records_in_its_handlers_back_and_counts_no_attempt(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(1)
    put(moto_server, stream, range(30))
    handled: list[int] = []
    dead: list[object] = []

    async def main() -> None:
        hold, handling = asyncio.Event(), asyncio.Event()

        async def handler(record: Record) -> None:
            if rid(record) == 10:
                handling.set()
                await hold.wait()  # handling record 10 when cancelled
            handled.append(rid(record))

        async def consume() -> None:
            async with consumer(moto_server, stream, app, "async-cancelled") as k:
                await k.aprocess(handler, max_attempts=1, dead_letter=dead.append)

        await cancel_while_handling(asyncio.create_task(consume()), handling)

    asyncio.run(asyncio.wait_for(main(), 60))
    assert handled == list(range(10)) and dead == []  # a cancelled handler is no failed attempt
    second = consumer(moto_server, stream, app, "sync-after")
    with second:
        again = [rid(r) for r in (second.next_record(timeout=30) for _ in range(20)) if r is not None]
    assert again == list(range(10, 30))


def test_aprocess_wants_an_async_handler(moto_server: LocalServer, new_stream: Callable[[int], str], app: str) -> None:
    async def main() -> None:
        async with consumer(moto_server, new_stream(1), app, "async-plain") as k:
            with pytest.raises(ConfigError, match=r"async function taking a record .*process\(\)"):
                await k.aprocess(lambda record: None)  # type: ignore[arg-type,return-value]

    asyncio.run(main())
