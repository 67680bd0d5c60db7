"""process(handler, decode=...) and aprocess(): the handler gets (value, record); a record the decoder cannot
decode goes to the dead-letter sink at once (reason "decode"), never retried, never seen by the handler.
On moto's in-process mock."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import attrs
import pytest

from kinsumer import ConfigError, Failure, Kinsumer, Record, RecordFailed
from tests.aws.test_process import FAST, QUICK, make
from tests.helpers import CountingStats

#: every seventh record is not JSON
BAD = frozenset(range(3, 60, 7))


def put_mixed(kinesis: Any, count: int) -> None:
    for i in range(count):
        data = b"not json %d" % i if i in BAD else json.dumps({"id": i}).encode()
        kinesis.put_record(StreamName="clicks", Data=data, PartitionKey=f"k{i % 8}")


def id_of(record: Record) -> int:
    return int(record.data.split()[-1]) if record.data.startswith(b"not json") else int(json.loads(record.data)["id"])


class Seen:
    """The handler's calls (value, record), the sink's failures; stops the consumer once ``count`` ids are
    accounted for."""

    def __init__(self, k: Kinsumer, count: int, fail_first: frozenset[int] = frozenset()) -> None:
        self.k, self.count, self.fail_first = k, count, fail_first
        self.lock = threading.Lock()
        self.calls: list[tuple[Any, Record]] = []
        self.dead: list[Failure] = []
        self._stopping = False

    def __call__(self, value: Any, record: Record) -> None:
        with self.lock:
            first = all(id_of(r) != id_of(record) for _, r in self.calls)
            self.calls.append((value, record))
        if first and value["id"] in self.fail_first:
            raise ValueError(f"record {value['id']} failed once")
        self._maybe_stop()

    async def acall(self, value: Any, record: Record) -> None:
        await asyncio.sleep(0)
        self(value, record)

    def sink(self, failure: Failure) -> None:
        with self.lock:
            self.dead.append(failure)
        self._maybe_stop()

    def _maybe_stop(self) -> None:
        with self.lock:
            accounted = {v["id"] for v, _ in self.calls} | {id_of(f.record) for f in self.dead}
            if len(accounted) < self.count or self._stopping:
                return
            self._stopping = True
        threading.Thread(target=self.k.stop, daemon=True).start()


@pytest.mark.parametrize(
    ("concurrency", "timeout", "ordering"),
    [(1, None, "shard"), (3, None, "shard"), (1, 5.0, "shard"), (3, None, "key")],
    ids=["one-worker", "three-workers", "with-timeout", "by-key"],
)
def test_the_handler_gets_decoded_values_and_undecodable_records_go_to_the_sink_at_once(
    kinesis: Any, db: Any, concurrency: int, timeout: float | None, ordering: str
) -> None:
    stats = CountingStats()
    k = make(kinesis, db, config=attrs.evolve(FAST, stats=stats))
    put_mixed(kinesis, 60)
    seen = Seen(k, 60)
    decoded: list[bytes] = []

    def decode(data: bytes) -> Any:
        decoded.append(data)
        return json.loads(data)

    with k:
        k.process(seen, decode=decode, dead_letter=seen.sink, max_attempts=3, concurrency=concurrency,
                  timeout=timeout, ordering=ordering, **QUICK)  # type: ignore[arg-type]  # fmt: skip
    assert sorted(value["id"] for value, _ in seen.calls) == [i for i in range(60) if i not in BAD]
    assert all(value == json.loads(record.data) for value, record in seen.calls)  # the value with its record
    assert sorted(id_of(f.record) for f in seen.dead) == sorted(BAD)  # each undecodable record once
    for failure in seen.dead:
        assert (failure.reason, failure.attempts) == ("decode", 0)
        assert failure.error.startswith("JSONDecodeError: Expecting value")
        assert (failure.stream, failure.application, failure.client_id) == ("clicks", "app", k.client_id)
    assert sum(data.startswith(b"not json") for data in decoded) == len(BAD)  # decoded once: never retried
    assert stats.calls["dead_lettered"] == len(BAD)
    assert stats.calls.get("handler_failed", 0) == 0 and stats.calls.get("handler_retried", 0) == 0
    by_shard: dict[str, list[int]] = {}
    for _, record in seen.calls:
        by_shard.setdefault(record.shard_id, []).append(int(record.sequence_number))
    if ordering == "shard":
        assert all(seqs == sorted(seqs) for seqs in by_shard.values())


def test_a_handler_that_fails_after_decoding_is_retried_as_without_decode(kinesis: Any, db: Any) -> None:
    k = make(kinesis, db, shards=1)
    put_mixed(kinesis, 10)
    seen = Seen(k, 10, fail_first=frozenset({5}))
    with k:
        k.process(seen, decode=json.loads, dead_letter=seen.sink, **QUICK)  # type: ignore[arg-type]
    assert [v["id"] for v, _ in seen.calls] == [0, 1, 2, 4, 5, 5, 6, 7, 8, 9]  # 5 twice: failed, then done
    assert [id_of(f.record) for f in seen.dead] == [3]


def test_without_a_sink_an_undecodable_record_is_record_failed_saying_decode(kinesis: Any, db: Any) -> None:
    k = make(kinesis, db, shards=1)
    put_mixed(kinesis, 5)
    seen = Seen(k, 100)
    with k, pytest.raises(RecordFailed, match=r"decode could not decode it \(JSONDecodeError: ") as failed:
        k.process(seen, decode=json.loads)  # type: ignore[arg-type]
    assert (id_of(failed.value.failure.record), failed.value.failure.reason) == (3, "decode")
    assert [v["id"] for v, _ in seen.calls] == [0, 1, 2]  # nothing of the shard after it


def test_aprocess_awaits_the_handler_with_the_decoded_value(kinesis: Any, db: Any) -> None:
    k = make(kinesis, db)
    put_mixed(kinesis, 30)
    seen = Seen(k, 30)
    loop_threads: set[str] = set()

    def decode(data: bytes) -> Any:
        loop_threads.add(threading.current_thread().name)
        return json.loads(data)

    async def main() -> None:
        async with k:
            await k.aprocess(seen.acall, decode=decode, dead_letter=seen.sink, concurrency=2)

    asyncio.run(main())
    assert sorted(v["id"] for v, _ in seen.calls) == [i for i in range(30) if i not in BAD]
    assert sorted(id_of(f.record) for f in seen.dead) == sorted(i for i in BAD if i < 30)
    assert threading.main_thread().name not in loop_threads  # decoded on the workers, off the event loop


@pytest.mark.parametrize("api", ["process_batches", "aprocess_batches"])
def test_a_batch_handler_gets_value_record_pairs_without_the_records_that_do_not_decode(
    kinesis: Any, db: Any, api: str
) -> None:
    """The undecodable records of a batch go to the sink before the handler is called (each once, never
    retried); the handler gets the rest of the batch, in shard order, and may still return failed ones."""
    stats = CountingStats()
    k = make(kinesis, db, config=attrs.evolve(FAST, stats=stats))
    put_mixed(kinesis, 60)
    lock = threading.Lock()
    batches: list[list[tuple[Any, Record]]] = []
    dead: list[Failure] = []
    returned_once: set[int] = set()

    def account() -> None:
        seen = [v["id"] for batch in batches for v, _ in batch]
        if len(set(seen) | {id_of(f.record) for f in dead}) >= 60 and seen.count(11) == 2:
            threading.Thread(target=k.stop, daemon=True).start()

    def handle(batch: list[tuple[Any, Record]]) -> list[Record]:
        with lock:
            batches.append(batch)
            failed = [r for v, r in batch if v["id"] == 11 and 11 not in returned_once]  # fails once, then done
            returned_once.update(v["id"] for v, _ in batch if v["id"] == 11)
            account()
        return failed

    async def ahandle(batch: list[tuple[Any, Record]]) -> list[Record]:
        return handle(batch)

    def sink(failure: Failure) -> None:
        with lock:
            dead.append(failure)
            account()

    options: dict[str, Any] = {"decode": json.loads, "dead_letter": sink, "max_records": 10, "max_wait": 0.2}
    with k:
        if api == "process_batches":
            k.process_batches(handle, **options, **QUICK)
        else:
            asyncio.run(k.aprocess_batches(ahandle, **options, **QUICK))
    assert sorted(id_of(f.record) for f in dead) == sorted(BAD)
    assert all((f.reason, f.attempts) == ("decode", 0) for f in dead)
    assert not any(v is None or r.data.startswith(b"not json") for batch in batches for v, r in batch)
    seen = [v["id"] for batch in batches for v, _ in batch]
    assert sorted(set(seen)) == [i for i in range(60) if i not in BAD]
    (first,) = [batch for batch in batches if 11 in [v["id"] for v, _ in batch]][:1]
    again = {v["id"] for v, _ in first[[v["id"] for v, _ in first].index(11) :]}  # 11 and the rest of its batch
    assert {i for i in seen if seen.count(i) > 1} == again and all(seen.count(i) == 2 for i in again)
    assert all(v == json.loads(r.data) for batch in batches for v, r in batch)
    for batch in batches:  # one shard's records, in order
        assert len({r.shard_id for _, r in batch}) == 1
        assert [int(r.sequence_number) for _, r in batch] == sorted(int(r.sequence_number) for _, r in batch)
    assert stats.calls["dead_lettered"] == len(BAD)


def test_decode_must_be_callable(kinesis: Any, db: Any) -> None:
    k = make(kinesis, db)
    with k, pytest.raises(ConfigError, match="decode") as refused:
        k.process(lambda value, record: None, decode="json")  # type: ignore[arg-type]
    assert "bytes" in str(refused.value)
