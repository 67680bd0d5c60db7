"""Kinsumer.pause() / resume() over HTTP on moto's server: a paused shard hands out nothing, keeps its lease,
shows as paused, and goes on in order from where it stopped."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from demo.servers import LocalServer
from kinsumer import ConfigError, Kinsumer, NoRecordWithin, Record
from kinsumer.coordination import checkpoints_table
from kinsumer.status import read_status
from tests.helpers import wait_until
from tests.server.conftest import SERVER_CONFIG

pytestmark = pytest.mark.server

SHARD0, SHARD1 = "shardId-000000000000", "shardId-000000000001"


def rid(record: Record) -> int:
    return int(json.loads(record.data)["id"])


def put(kinesis: Any, stream: str, ids: range, shard: str | None = None, keys: int = 1_000_000) -> None:
    """Records ``ids``, to ``shard`` only (by its hash key range) or spread over the shards; ``keys``
    partition keys in turn."""
    low = {SHARD0: "0", SHARD1: str(2**127 + 1)}
    for i in ids:
        extra = {"ExplicitHashKey": low[shard]} if shard else {}
        data, key = json.dumps({"id": i}).encode(), f"k{i % keys}"
        kinesis.put_record(StreamName=stream, Data=data, PartitionKey=key, **extra)


def make(moto_server: LocalServer, stream: str, app: str, name: str = "worker", **config: Any) -> Kinsumer:
    return Kinsumer(stream, app, name, attrs.evolve(SERVER_CONFIG, **config), kinesis=moto_server.client("kinesis"),
                    dynamodb=moto_server.client("dynamodb"))  # fmt: skip


def start(moto_server: LocalServer, stream: str, app: str, name: str = "worker", **config: Any) -> Kinsumer:
    k = make(moto_server, stream, app, name, **config)
    k.run()
    return k


def test_next_hands_out_nothing_of_a_paused_shard_which_keeps_its_lease_and_goes_on_in_order_after_resume(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(2)
    kinesis, db = moto_server.client("kinesis"), moto_server.client("dynamodb")
    put(kinesis, stream, range(0, 100), SHARD0)
    put(kinesis, stream, range(100, 200), SHARD1)
    k = start(moto_server, stream, app)
    seen: list[Record] = []
    try:
        while len([r for r in seen if r.shard_id == SHARD0]) < 10:  # records of shard 0 in hand
            record = k.next_record(timeout=30)
            assert record is not None
            seen.append(record)
        k.pause(SHARD0)
        paused_at = len(seen)
        assert k.paused == {SHARD0}
        put(kinesis, stream, range(200, 250), SHARD0)  # written while paused: they wait too
        while len([r for r in seen if r.shard_id == SHARD1]) < 100:
            record = k.next_record(timeout=30)
            assert record is not None
            seen.append(record)
        assert not [r for r in seen[paused_at:] if r.shard_id == SHARD0], "a paused shard's record was handed out"
        (owned,) = [s for s in k.status().shards if s.shard_id == SHARD0]
        assert owned.paused and owned.captured
        row = checkpoints_table.read_row(db, f"{app}_checkpoints", SHARD0)
        assert row is not None and row.owner_id == k.client_id and row.paused is not None
        view = read_status(kinesis, db, stream, app, max_age=10)
        assert next(s for s in view.shards if s.shard_id == SHARD0).paused_for is not None
        # the client's heartbeat goes on while paused, past the age at which a silent client's shards go
        def heartbeat() -> int:
            item = db.get_item(TableName=f"{app}_clients", Key={"ID": {"S": k.client_id}}, ConsistentRead=True)
            return int(item["Item"]["LastUpdate"]["N"])

        beat = heartbeat()
        max_age_ms = SERVER_CONFIG.effective_client_record_max_age * 1000
        wait_until(lambda: heartbeat() > beat + max_age_ms, 30, "heartbeats past a silent client's age")
        row = checkpoints_table.read_row(db, f"{app}_checkpoints", SHARD0)
        assert row is not None and row.owner_id == k.client_id, "the paused shard was taken"
        k.resume(SHARD0)
        while len(seen) < 250:
            record = k.next_record(timeout=30)
            assert record is not None
            seen.append(record)
        row = checkpoints_table.read_row(db, f"{app}_checkpoints", SHARD0)
        assert row is not None and row.paused is None and not k.status().shards[0].paused
    finally:
        k.stop()
    ids = [rid(r) for r in seen]
    assert sorted(ids) == list(range(250)) and len(set(ids)) == 250  # nothing lost, nothing twice
    assert [rid(r) for r in seen if r.shard_id == SHARD0] == [*range(100), *range(200, 250)]  # in order


@pytest.mark.parametrize("concurrency", [1, 3])
def test_process_starts_no_handler_call_on_a_paused_shard_and_finishes_it_after_resume(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str, concurrency: int
) -> None:
    stream = new_stream(2)
    kinesis = moto_server.client("kinesis")
    put(kinesis, stream, range(0, 300), SHARD0)
    put(kinesis, stream, range(300, 600), SHARD1)
    k = make(moto_server, stream, app)
    lock = threading.Lock()
    started: list[tuple[str, int]] = []  # (shard, id) of each call, as it starts
    done: Counter[int] = Counter()
    paused_after: list[int] = []  # len(started) when pause() returned

    def handler(record: Record) -> None:
        with lock:
            started.append((record.shard_id, rid(record)))
            count = len(started)
        if count == 50:
            k.pause(SHARD0)
            with lock:
                paused_after.append(len(started))
        time.sleep(0.002)
        with lock:
            done[rid(record)] += 1
            if len(done) == 600:
                threading.Thread(target=k.stop, daemon=True).start()

    def watch() -> None:
        wait_until(lambda: done.keys() >= set(range(300, 600)), 60, "shard 1 handled while shard 0 is paused")
        k.resume(SHARD0)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    with k:
        k.process(handler, concurrency=concurrency)
    watcher.join(30)
    assert set(done) == set(range(600)) and set(done.values()) == {1}
    (mark,) = paused_after
    shard0_ids = [i for shard, i in started if shard == SHARD0]
    while_paused = [i for shard, i in started[mark:] if shard == SHARD0]
    shard1_done_at_resume = next(n for n, (shard, i) in enumerate(started) if i == 599)
    started_while_paused = [i for shard, i in started[mark:shard1_done_at_resume] if shard == SHARD0]
    assert len(started_while_paused) < concurrency, f"calls started on a paused shard: {started_while_paused}"
    assert while_paused, "shard 0 never went on after resume"
    by_shard: dict[str, list[int]] = defaultdict(list)
    for shard, i in started:
        by_shard[shard].append(i)
    assert by_shard[SHARD0] == shard0_ids == list(range(300)) and by_shard[SHARD1] == list(range(300, 600))


def test_a_shard_paused_before_it_is_captured_hands_out_nothing_and_moves_cleanly_to_the_next_client(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(1)
    kinesis, db = moto_server.client("kinesis"), moto_server.client("dynamodb")
    put(kinesis, stream, range(60))
    first = make(moto_server, stream, app, "first")
    first.pause(SHARD0)  # before run(): it applies to the capture to come
    first.run()
    try:
        wait_until(
            lambda: (r := checkpoints_table.read_row(db, f"{app}_checkpoints", SHARD0)) is not None
            and r.owner_id == first.client_id and r.paused is not None,
            30, "the shard captured, and its row saying it is paused",
        )  # fmt: skip
        with pytest.raises(NoRecordWithin):
            first.next_record(timeout=1.0)
        second = start(moto_server, stream, app, "second")
    finally:
        first.stop()  # a clean handoff: what the paused capture read goes back, to the next owner
    try:
        got = [second.next_record(timeout=30) for _ in range(60)]
    finally:
        second.stop()
    assert [rid(r) for r in got if r is not None] == list(range(60))  # not paused there: all, once, in order
    row = checkpoints_table.read_row(db, f"{app}_checkpoints", SHARD0)
    assert row is not None and row.paused is None


def test_pause_names_a_shard_of_a_stream_it_reads(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(1)
    k = Kinsumer(stream, app, "w", SERVER_CONFIG, kinesis=moto_server.client("kinesis"),
                 dynamodb=moto_server.client("dynamodb"))  # fmt: skip
    for bad in ("", "other-stream/shardId-000000000000", 7):
        with pytest.raises(ConfigError) as info:
            k.pause(bad)  # type: ignore[arg-type]
        assert info.value.field == "shard_id"
    k.pause(f"{stream}/{SHARD0}")  # the home stream's shards go by their bare IDs
    assert k.paused == {SHARD0}
    k.resume(SHARD0)
    assert k.paused == frozenset()


def test_a_stop_while_a_shard_is_paused_ends_process_by_key_and_the_next_run_repeats_nothing(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(1)
    put(moto_server.client("kinesis"), stream, range(400), keys=8)  # records of a key wait for its previous one
    lock = threading.Lock()
    handled: Counter[int] = Counter()
    for name, target in (("first", 100), ("second", 400)):
        k = make(moto_server, stream, app, name)

        def handler(record: Record, k: Kinsumer = k, target: int = target) -> None:
            time.sleep(0.05 if rid(record) % 8 == 0 else 0.002)  # one key slow: records of it wait, later ones go
            with lock:
                handled[rid(record)] += 1
                reached = len(handled) == target
            if reached and target < 400:
                k.pause(SHARD0)
                threading.Thread(target=k.stop, daemon=True).start()
            elif reached:
                threading.Thread(target=k.stop, daemon=True).start()

        with k:
            k.process(handler, concurrency=4, ordering="key")  # returns: the stop is not held up by the pause
    assert set(handled) == set(range(400)) and set(handled.values()) == {1}, "a record was handled twice"
