"""process()'s shard lifecycle hooks: on_assigned, on_revoked, on_lost (moto's in-process mock)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import defaultdict
from typing import Any

import attrs
import pytest

from kinsumer import ConfigError, Kinsumer, Record
from kinsumer.coordination import checkpoints_table
from tests.aws.test_process import FAST, make, put, rid
from tests.helpers import CountingStats, wait_until


class Journal:
    """What happened, in order: ("assigned" | "revoked" | "lost", shard) and ("record", shard, id); the
    handler's calls under way per shard; and what the checkpoint row said when revoked was called."""

    def __init__(self, k: Kinsumer, db: Any) -> None:
        self.k, self.db = k, db
        self.lock = threading.Lock()
        self.events: list[tuple[Any, ...]] = []
        self.in_handler: dict[str, int] = defaultdict(int)
        self.at_revoked: dict[str, tuple[int, str | None]] = {}  # shard -> (calls under way, the row's owner)

    def handler(self, record: Record) -> None:
        with self.lock:
            self.in_handler[record.shard_id] += 1
        try:
            event = ("record", record.shard_id, rid(record))  # the handler's work, while counted under way
            with self.lock:
                self.events.append(event)
        finally:
            with self.lock:
                self.in_handler[record.shard_id] -= 1

    def assigned(self, shard: str) -> None:
        with self.lock:
            self.events.append(("assigned", shard))

    def revoked(self, shard: str) -> None:
        row = checkpoints_table.read_row(self.db, "app_checkpoints", shard)
        with self.lock:
            self.at_revoked[shard] = (self.in_handler[shard], row.owner_id if row else None)
            self.events.append(("revoked", shard))

    def lost(self, shard: str) -> None:
        with self.lock:
            self.events.append(("lost", shard))

    def of(self, shard: str) -> list[tuple[Any, ...]]:
        with self.lock:
            return [e for e in self.events if e[1] == shard]

    def records(self) -> list[int]:
        with self.lock:
            return sorted(e[2] for e in self.events if e[0] == "record")

    def hooks(self) -> dict[str, Any]:
        return {"on_assigned": self.assigned, "on_revoked": self.revoked, "on_lost": self.lost}


def process_in_thread(k: Kinsumer, **kwargs: Any) -> threading.Thread:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            k.process(**kwargs)
        except BaseException as exc:  # the test reads it
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.errors = errors  # type: ignore[attr-defined]
    thread.start()
    return thread


@pytest.mark.parametrize("concurrency", [1, 3])
def test_assigned_comes_before_a_shards_first_record_and_revoked_after_its_last_at_a_stop(
    kinesis: Any, db: Any, concurrency: int
) -> None:
    k = make(kinesis, db, shards=2)
    produced = put(kinesis, 40)
    journal = Journal(k, db)
    k.run()
    worker = process_in_thread(k, handler=journal.handler, concurrency=concurrency, **journal.hooks())
    wait_until(lambda: journal.records() == produced, 30, "every record handled")
    k.stop()
    worker.join(30)
    assert not worker.is_alive() and not worker.errors  # type: ignore[attr-defined]
    shards = {e[1] for e in journal.events if e[0] == "record"}
    assert len(shards) == 2
    for shard in shards:
        kinds = [e[0] for e in journal.of(shard)]
        assert kinds[0] == "assigned" and kinds[-1] == "revoked" and kinds.count("assigned") == 1, kinds
        assert set(kinds[1:-1]) == {"record"} and "lost" not in kinds
        # revoked: nothing of the shard in a handler, and the row still this client's (released after)
        assert journal.at_revoked[shard] == (0, k.client_id)
        row = checkpoints_table.read_row(db, "app_checkpoints", shard)
        assert row is not None and row.owner_id is None  # then released
        last = max(e[2] for e in journal.of(shard) if e[0] == "record")
        assert row.sequence_number == next(
            r["SequenceNumber"] for r in all_records(kinesis, shard) if rid_of(r) == last
        )  # the final checkpoint, written after revoked, is the shard's last record


def test_a_rebalance_revokes_the_shard_that_moves_and_its_next_owner_goes_on_from_the_checkpoint(
    kinesis: Any, db: Any
) -> None:
    a = make(kinesis, db, shards=2, name="a")
    produced = put(kinesis, 20)
    journal = Journal(a, db)
    a.run()
    worker = process_in_thread(a, handler=journal.handler, **journal.hooks())
    wait_until(lambda: journal.records() == produced, 30, "a to handle every record")
    b = make(kinesis, db, shards=2, name="b")
    b_handled: list[Record] = []
    b.run()
    b_worker = process_in_thread(b, handler=b_handled.append)
    try:
        wait_until(lambda: any(e[0] == "revoked" for e in journal.events), 30, "a shard to move to b")
        (moved,) = {e[1] for e in journal.events if e[0] == "revoked"}
        wait_until(lambda: b.status().shards and b.status().shards[0].captured, 30, "b to capture it")
        more = put(kinesis, 20, first=20)
        wait_until(lambda: sorted(journal.records() + [rid(r) for r in b_handled]) == produced + more, 30, "the rest")
    finally:
        b.stop()
        a.stop()
    worker.join(30)
    b_worker.join(30)
    kinds = [e[0] for e in journal.of(moved)]
    assert kinds[0] == "assigned" and kinds[-1] == "revoked" and set(kinds[1:-1]) == {"record"}, kinds
    assert journal.at_revoked[moved] == (0, a.client_id)
    # a clean handoff: b went on after a's last record of the shard, none twice
    assert all(r.shard_id == moved for r in b_handled)
    assert not set(journal.records()) & {rid(r) for r in b_handled}


def test_a_shard_taken_by_another_client_is_lost_not_revoked(kinesis: Any, db: Any) -> None:
    k = make(kinesis, db, shards=1)
    produced = put(kinesis, 10)
    journal = Journal(k, db)
    k.run()
    worker = process_in_thread(k, handler=journal.handler, **journal.hooks())
    wait_until(lambda: journal.records() == produced, 30, "the first records handled")
    (shard,) = {e[1] for e in journal.events if e[0] == "record"}
    db.update_item(  # as a client that found this one silent would
        TableName="app_checkpoints", Key={"Shard": {"S": shard}},
        UpdateExpression="SET OwnerID = :thief", ExpressionAttributeValues={":thief": {"S": "thief"}},
    )  # fmt: skip
    put(kinesis, 5, first=10)  # a commit of this client finds the row taken
    wait_until(lambda: ("lost", shard) in journal.events, 30, "on_lost")
    k.stop()
    worker.join(30)
    assert not worker.is_alive()
    kinds = [e[0] for e in journal.of(shard)]
    assert kinds.count("lost") == 1 and "revoked" not in kinds and kinds[0] == "assigned"


def test_hooks_that_raise_are_counted_and_change_nothing_else(kinesis: Any, db: Any) -> None:
    stats = CountingStats()
    k = make(kinesis, db, shards=2, config=attrs.evolve(FAST, stats=stats))
    produced = put(kinesis, 20)
    handled: list[int] = []

    def broken(shard: str) -> None:
        raise RuntimeError(f"no state for {shard}")

    k.run()
    worker = process_in_thread(k, handler=lambda r: handled.append(rid(r)), on_assigned=broken, on_revoked=broken)
    wait_until(lambda: sorted(handled) == produced, 30, "every record handled")
    k.stop()
    worker.join(30)
    assert not worker.is_alive() and not worker.errors  # type: ignore[attr-defined]
    kinds = sorted(hook for _, hook, _ in stats.hooks_failed)
    assert kinds == ["on_assigned", "on_assigned", "on_revoked", "on_revoked"]
    assert {error for _, _, error in stats.hooks_failed} == {"RuntimeError"}
    assert all(row.get("OwnerID") is None for row in db.scan(TableName="app_checkpoints")["Items"])  # released


def test_a_revoked_hook_that_hangs_does_not_hold_the_handoff_past_its_timeout(kinesis: Any, db: Any) -> None:
    k = make(kinesis, db, shards=1)
    produced = put(kinesis, 5)
    handled: list[int] = []
    hanging, release = threading.Event(), threading.Event()

    def hang(shard: str) -> None:
        hanging.set()
        release.wait(60)

    k.run()
    worker = process_in_thread(k, handler=lambda r: handled.append(rid(r)), on_revoked=hang)
    wait_until(lambda: sorted(handled) == produced, 30, "every record handled")
    stopper = threading.Thread(target=k.stop, daemon=True)
    stopper.start()
    try:
        wait_until(hanging.is_set, 30, "on_revoked to be called")
        stopper.join(FAST.handoff_timeout + 30)
        assert not stopper.is_alive(), "stop() waited for the hook past the handoff's bound"
        row = db.scan(TableName="app_checkpoints")["Items"][0]
        assert "OwnerID" not in row  # released meanwhile, the checkpoint stored
    finally:
        release.set()
    worker.join(30)


def test_aprocess_awaits_async_hooks(kinesis: Any, db: Any) -> None:
    k = make(kinesis, db, shards=1)
    produced = put(kinesis, 6)
    events: list[str] = []

    async def handler(record: Record) -> None:
        events.append(f"record {rid(record)}")
        if len(events) == len(produced) + 1:
            threading.Thread(target=k.stop, daemon=True).start()

    async def assigned(shard: str) -> None:
        await asyncio.sleep(0)
        events.append("assigned")

    async def revoked(shard: str) -> None:
        await asyncio.sleep(0)
        events.append("revoked")

    async def main() -> None:
        async with k:
            await k.aprocess(handler, on_assigned=assigned, on_revoked=revoked)

    asyncio.run(main())
    assert events == ["assigned"] + [f"record {i}" for i in produced] + ["revoked"]


def test_a_hook_that_is_not_callable_is_a_config_error(kinesis: Any, db: Any) -> None:
    k = make(kinesis, db)
    with pytest.raises(ConfigError) as info:
        k.process(lambda r: None, on_revoked="flush")  # type: ignore[arg-type]
    assert info.value.field == "on_revoked"


def all_records(kinesis: Any, shard: str) -> list[dict[str, Any]]:
    iterator = kinesis.get_shard_iterator(StreamName="clicks", ShardId=shard, ShardIteratorType="TRIM_HORIZON")
    return list(kinesis.get_records(ShardIterator=iterator["ShardIterator"], Limit=10_000)["Records"])


def rid_of(raw: dict[str, Any]) -> int:
    return int(json.loads(raw["Data"])["id"])
