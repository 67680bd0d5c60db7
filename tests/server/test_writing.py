"""RecordWriter (PutRecords) over HTTP: moto's server, with a relay that refuses part of each call."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from demo.servers import LocalServer, client
from kinsumer import StreamNotFound, WriteError
from kinsumer.writing.aggregation import hash_of
from kinsumer.writing.writer import MAX_CALL_BYTES, MAX_CALL_RECORDS, RecordWriter
from tests.helpers import read_back
from tests.relay import KinesisRelay

pytestmark = pytest.mark.server


def ids(by_shard: dict[str, list[dict[str, Any]]]) -> list[int]:
    return sorted(json.loads(r["Data"])["id"] for records in by_shard.values() for r in records)


def hash_ranges(kinesis: Any, stream: str) -> dict[str, tuple[int, int]]:
    return {
        s["ShardId"]: (int(s["HashKeyRange"]["StartingHashKey"]), int(s["HashKeyRange"]["EndingHashKey"]))
        for s in kinesis.list_shards(StreamName=stream)["Shards"]
    }


@pytest.fixture
def relay(moto_server: LocalServer) -> Iterator[Callable[..., KinesisRelay]]:
    made: list[KinesisRelay] = []

    def make(**policy: Any) -> KinesisRelay:
        made.append(KinesisRelay(moto_server.endpoint, **policy))
        return made[-1]

    yield make
    for r in made:
        r.stop()


def test_records_go_in_order_in_full_calls_and_refused_entries_are_sent_again_until_all_are_in(
    moto_server: LocalServer, new_stream: Callable[[int], str], relay: Callable[..., KinesisRelay]
) -> None:
    stream = new_stream(2)
    through = relay(refuse=lambda index: index % 4 == 1, throttle_call=lambda n: n in (2, 5))
    kinesis = client(through.endpoint, "kinesis")
    calls: list[tuple[int, int]] = []
    kinesis.meta.events.register(
        "provide-client-params.kinesis.PutRecords",
        lambda params, **_: calls.append(
            (len(params["Records"]), sum(len(r["Data"]) + len(r["PartitionKey"]) for r in params["Records"]))
        ),
    )
    writer = RecordWriter(kinesis, stream)
    payload = "x" * 20_000  # 1,300 records of 20 kB: 26 MB, so calls are cut by size as well as by count
    for i in range(1_300):
        writer.put(json.dumps({"id": i, "pad": payload if i % 2 else ""}), f"key-{i % 7}")
    writer.flush()
    assert max(n for n, _ in calls) == MAX_CALL_RECORDS and max(size for _, size in calls) <= MAX_CALL_BYTES
    assert through.refused_entries > 100 and through.refused_calls == 2
    assert writer.retried == through.refused_entries and (writer.records, writer.entries) == (1_300, 1_300)
    by_shard = read_back(moto_server.client("kinesis"), stream)
    assert ids(by_shard) == list(range(1_300))  # every record once
    sent_again = {json.loads(data)["id"] for data in through.refused_data}
    for records in by_shard.values():  # in order per key, but for the entries sent again
        per_key: dict[str, list[int]] = {}
        for r in records:
            if json.loads(r["Data"])["id"] not in sent_again:
                per_key.setdefault(r["PartitionKey"], []).append(json.loads(r["Data"])["id"])
        assert all(key_ids == sorted(key_ids) for key_ids in per_key.values())


def test_kpl_aggregates_land_each_user_record_in_the_shard_its_key_maps_to(
    moto_server: LocalServer, new_stream: Callable[[int], str]
) -> None:
    stream = new_stream(4)
    kinesis = moto_server.client("kinesis")
    writer = RecordWriter(kinesis, stream, aggregate=True, aggregate_bytes=4_000)
    for i in range(2_000):
        writer.put(json.dumps({"id": i}).encode(), f"user-{i % 97}", str(i * 2**110) if i % 10 == 0 else None)
    writer.flush()
    assert writer.records == 2_000 and writer.entries < 200  # about 40 user records a Kinesis record
    by_shard = read_back(kinesis, stream)
    assert ids(by_shard) == list(range(2_000))
    ranges = hash_ranges(kinesis, stream)
    for shard, records in by_shard.items():
        low, high = ranges[shard]
        for r in records:
            assert low <= hash_of(r["PartitionKey"], r.get("ExplicitHashKey")) <= high, (shard, r["PartitionKey"])
        assert [json.loads(r["Data"])["id"] for r in records] == sorted(json.loads(r["Data"])["id"] for r in records)


def test_aggregate_records_caps_the_user_records_of_each_aggregate_per_shard(
    moto_server: LocalServer, new_stream: Callable[[int], str]
) -> None:
    """``aggregate_records`` (the KPL's AggregationMaxCount): each shard's aggregates hold that many user
    records, in order, and the last of each shard the rest."""
    stream = new_stream(3)
    kinesis = moto_server.client("kinesis")
    writer = RecordWriter(kinesis, stream, aggregate=True, aggregate_records=10)
    for i in range(400):
        writer.put(json.dumps({"id": i}).encode(), f"user-{i % 31}")
    writer.flush()
    by_shard = read_back(kinesis, stream)
    assert ids(by_shard) == list(range(400))
    for records in by_shard.values():
        per_aggregate: dict[str, int] = {}
        for r in records:
            per_aggregate[r["SequenceNumber"]] = per_aggregate.get(r["SequenceNumber"], 0) + 1
        full, last = divmod(len(records), 10)
        assert list(per_aggregate.values()) == [10] * full + ([last] if last else [])
        assert [json.loads(r["Data"])["id"] for r in records] == sorted(json.loads(r["Data"])["id"] for r in records)
    assert writer.records == 400 and writer.entries == sum(-(-len(r) // 10) for r in by_shard.values())
    with pytest.raises(ValueError, match="aggregate_records must be at least 1"):
        RecordWriter(kinesis, stream, aggregate=True, aggregate_records=0)


def test_records_kinesis_cannot_take_are_refused_naming_their_key_and_a_missing_stream_is_said(
    moto_server: LocalServer, new_stream: Callable[[int], str]
) -> None:
    writer = RecordWriter(moto_server.client("kinesis"), new_stream(1))
    with pytest.raises(WriteError, match=r"partition key 'big-one' is 1,048,58[0-9] bytes .*1,048,576 at most"):
        writer.put(b"x" * (1024 * 1024 - 2), "big-one")
    for data, key, hash_key, message in [
        (b"x", "", None, "1 to 256 characters"),
        (b"x", "k" * 257, None, "1 to 256 characters"),
        (None, "no-data", None, "'no-data' has no data"),
        (b"x", "k", "-5", "explicit hash key '-5'"),
        (b"x", "k", str(2**128), "0 to 2\\*\\*128 - 1"),
    ]:
        with pytest.raises(WriteError, match=message):
            writer.put(data, key, hash_key)  # type: ignore[arg-type]
    writer.put(b"fine", "k")
    writer.flush()
    assert writer.records == 1
    missing = RecordWriter(moto_server.client("kinesis"), "no-such-stream")
    missing.put(b"x", "k")
    with pytest.raises(StreamNotFound):
        missing.flush()


class Refusing:
    """A Kinesis client whose PutRecords refuses every entry with ``code``."""

    def __init__(self, code: str) -> None:
        self.code, self.calls = code, 0

    def put_records(self, StreamName: str, Records: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls += 1
        refused = {"ErrorCode": self.code, "ErrorMessage": "no"}
        return {"FailedRecordCount": len(Records), "Records": [refused] * len(Records)}


def test_an_entry_refused_for_good_raises_at_once_and_throttling_past_the_timeout_says_what_to_do() -> None:
    kms = Refusing("KMSAccessDeniedException")
    writer = RecordWriter(kms, "s", sleep=lambda s: None)  # type: ignore[arg-type]
    writer.put(b"x", "the-key")
    with pytest.raises(WriteError, match="refused the record of partition key 'the-key': KMSAccessDeniedException"):
        writer.flush()
    assert kms.calls == 1
    throttled = Refusing("ProvisionedThroughputExceededException")
    writer = RecordWriter(throttled, "s", retry_timeout=0.3)  # type: ignore[arg-type]
    writer.put(b"x", "k")
    with pytest.raises(WriteError, match=r"1 records were still refused .* after 0.3 s .*add shards"):
        writer.flush()
    assert throttled.calls > 1
