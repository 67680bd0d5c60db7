"""The driver's count of available records (minRecordsPerTrigger), on kinesalite: each record fetched once per wait,
never more than asked for."""

from __future__ import annotations

from typing import Any

import pytest

from demo.servers import LocalServer
from kinsumer.aws import lean_get_records
from tests.helpers import produce_per_shard, shard_hash_keys
from tests.reshard import new_stream

pytestmark = pytest.mark.server
pytest.importorskip("pyspark")  # the package kinsumer.spark imports it

from kinsumer.spark.offsets import TRIM_HORIZON, after  # noqa: E402
from kinsumer.spark.probe import Prober  # noqa: E402
from kinsumer.spark.trigger_wait import RecordCounter  # noqa: E402


def test_counting_reads_on_from_kept_iterators_and_fetches_at_most_what_it_was_asked_for(
    kinesalite: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    kinesis = kinesalite.client("kinesis")
    stream = new_stream(kinesis, 2)
    first, second = sorted(shard_hash_keys(kinesis, stream))
    produce_per_shard(kinesis, stream, 20)
    fetched: list[tuple[int, int]] = []  # (Limit asked, records returned) of every GetRecords
    real = lean_get_records.get_records

    def spy(client: Any, iterator: str, limit: int, stream_arn: str | None = None) -> dict[str, Any]:
        answer = real(client, iterator, limit, stream_arn)
        fetched.append((limit, len(answer.get("Records", []))))
        return answer

    monkeypatch.setattr(lean_get_records, "get_records", spy)
    count = RecordCounter(kinesis, interval=0.1)
    positions = {(stream, first): TRIM_HORIZON, (stream, second): TRIM_HORIZON}

    assert count(positions, 25) == 25  # 20 in the first shard, 5 of the second: enough
    assert sum(n for _, n in fetched) == 25 and all(limit <= 25 for limit, _ in fetched)
    assert count(positions, 25) == 25 and sum(n for _, n in fetched) == 25  # already known: no call fetches more
    assert count(positions, 1000) == 40  # reads on where it stopped: the 15 left
    produce_per_shard(kinesis, stream, 5, first_id=40)
    assert count(positions, 1000) == 50
    assert sum(n for _, n in fetched) == 50, "a record was fetched twice"

    # the first shard's position moved (a batch read 22 of its records): it starts over there, the other keeps its count
    iterator = kinesis.get_shard_iterator(StreamName=stream, ShardId=first, ShardIteratorType="TRIM_HORIZON")
    records = kinesis.get_records(ShardIterator=iterator["ShardIterator"])["Records"]
    moved = {(stream, first): after(records[21]["SequenceNumber"]), (stream, second): TRIM_HORIZON}
    assert count(moved, 1000) == 3 + 25
    assert sum(n for _, n in fetched) == 53


def test_a_probe_that_found_a_record_answers_again_without_a_call_until_the_position_moves(
    kinesalite: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    kinesis = kinesalite.client("kinesis")
    stream = new_stream(kinesis, 1)
    [shard] = shard_hash_keys(kinesis, stream)
    produce_per_shard(kinesis, stream, 2)
    calls: list[int] = []
    real = lean_get_records.get_records
    monkeypatch.setattr(lean_get_records, "get_records", lambda *args: calls.append(1) or real(*args))
    now = [0.0]
    prober = Prober(kinesis, stream, interval=1.0, clock=lambda: now[0])
    at_start = {shard: TRIM_HORIZON}
    assert prober.probe(at_start, at_start) == {shard: True} and len(calls) == 1
    for _ in range(3):  # a batch that waits (minRecordsPerTrigger) is planned again at every check
        now[0] += 5
        assert prober.probe(at_start, at_start) == {shard: True}
    assert len(calls) == 1
    iterator = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON")
    last = kinesis.get_records(ShardIterator=iterator["ShardIterator"])["Records"][-1]["SequenceNumber"]
    moved = {shard: after(last)}  # a batch read both records: the shard is at the tip
    now[0] += 5
    assert prober.probe(moved, moved) == {shard: False} and len(calls) == 2
