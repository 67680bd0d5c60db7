"""Several streams in one query (``streamName`` a list): local[2] SparkSession, kinesalite on 127.0.0.1."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from demo.servers import LocalServer
from tests.conftest import unique
from tests.helpers import Producer, wait_until
from tests.reshard import new_stream, split_first
from tests.spark.test_source import BatchLog, assert_reshard_order, assert_shard_order, start_query, uncommit_last_batch
from tests.spark.test_source import wait_for as wait_for_rows

pytestmark = pytest.mark.server


def _of(rows: list[dict[str, Any]], stream: str) -> list[dict[str, Any]]:
    return [row for row in rows if row["stream"] == stream]


def _streams_read(progress: dict[str, Any]) -> set[str]:
    """The streams the last batch's progress shows figures for."""
    latest = progress["sources"][0].get("latestOffset")
    return set((json.loads(latest) or {}).get("streams", {})) if latest else set()


def test_two_streams_a_split_in_one_a_replay_and_a_stream_added_at_a_restart_read_every_record_once(
    spark: Any, kinesalite: LocalServer, moto_server: LocalServer, tmp_path: pathlib.Path
) -> None:
    """Shards of both streams share IDs (shardId-000000000000 ...): each keeps its own positions and ledger."""
    kinesis = kinesalite.client("kinesis")
    first, second, third = new_stream(kinesis, 2), new_stream(kinesis, 1), new_stream(kinesis, 1)
    app, checkpoint, sink = unique("app"), tmp_path / "ckpt", BatchLog()
    producers = {
        name: Producer(kinesis, name, total=None, keys=6, first_id=base)
        for name, base in ((first, 0), (second, 100_000), (third, 200_000))
    }
    producers[third].write_batch(50)  # there before the third stream joins: it starts at TRIM_HORIZON
    query = start_query(spark, kinesalite, moto_server, f"{first},{second}", app, checkpoint, sink, limit=40)
    try:
        producers[first].write_batch(150)
        producers[second].write_batch(60)
        wait_for_rows(query, lambda: len(sink.ids()) >= 210, "both streams' records")
        parent = split_first(kinesis, first)
        producers[first].write_batch(150)
        producers[second].write_batch(60)
        wait_for_rows(query, lambda: len(sink.ids()) >= 420, "the records after the split")
    finally:
        query.stop()
    replayed = uncommit_last_batch(checkpoint)
    assert json.loads((checkpoint / "offsets" / str(replayed)).read_text().splitlines()[-1])["streams"]

    producers[first].write_batch(60)
    query = start_query(spark, kinesalite, moto_server, f"{first},{second},{third}", app, checkpoint, sink, limit=40)
    try:
        expected = sum(len(p.produced) for p in producers.values())
        wait_for_rows(query, lambda: len(sink.ids()) >= expected, "every record, the third stream's too")
        producers[second].write_batch(10)  # a batch's progress shows the batch before it: one more batch
        wait_for_rows(query, lambda: len(sink.ids()) >= expected + 10, "the last records")
        shown = lambda: set().union(*(_streams_read(p) for p in query.recentProgress))  # noqa: E731
        wait_for_rows(query, lambda: shown() == {first, second, third}, "the batches' progress per stream")
    finally:
        query.stop()
    rows = sink.final_rows()
    assert sorted(sink.ids()) == sorted(i for p in producers.values() for i in p.produced)  # each once
    assert len(sink.attempts[replayed]) == 2 and sink.attempts[replayed][0] == sink.attempts[replayed][1]
    for name, producer in producers.items():
        mine = _of(rows, name)
        assert sorted(row["id"] for row in mine) == producer.produced  # each row names its stream
        assert_shard_order(mine)
    listing = kinesis.list_shards(StreamName=first)["Shards"]
    assert parent in assert_reshard_order(_of(rows, first), listing)  # per-key order across the split
    assert min(row["batch"] for row in _of(rows, third)) > replayed  # it joined after the replay


def test_a_stream_no_longer_named_fails_the_restarted_query_unless_dropped(
    spark: Any, kinesalite: LocalServer, moto_server: LocalServer, tmp_path: pathlib.Path
) -> None:
    kinesis = kinesalite.client("kinesis")
    kept, gone = new_stream(kinesis, 1), new_stream(kinesis, 1)
    app, checkpoint, sink = unique("app"), tmp_path / "ckpt", BatchLog()
    producers = {kept: Producer(kinesis, kept, total=None), gone: Producer(kinesis, gone, total=None, first_id=1000)}
    for producer in producers.values():
        producer.write_batch(20)
    query = start_query(spark, kinesalite, moto_server, f"{kept},{gone}", app, checkpoint, sink)
    try:
        wait_for_rows(query, lambda: len(sink.ids()) >= 40, "both streams' records")
    finally:
        query.stop()

    refused = start_query(spark, kinesalite, moto_server, kept, app, checkpoint, sink)
    try:
        wait_until(lambda: refused.exception() is not None, 120, "the query to fail", poll=0.2)
    finally:
        refused.stop()
    message = str(refused.exception())
    assert f"no longer names {gone}" in message and "dropRemovedStreams" in message

    producers[kept].write_batch(20)
    producers[gone].write_batch(20)
    drop = {"dropRemovedStreams": "true"}
    dropped = start_query(spark, kinesalite, moto_server, kept, app, checkpoint, sink, options=drop)
    try:
        wait_for_rows(dropped, lambda: len(_of(sink.final_rows(), kept)) >= 40, "the kept stream's new records")
    finally:
        dropped.stop()
    rows = sink.final_rows()
    assert sorted(row["id"] for row in _of(rows, kept)) == producers[kept].produced
    assert sorted(row["id"] for row in _of(rows, gone)) == producers[gone].produced[:20]  # none read after the drop
