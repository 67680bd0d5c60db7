"""The source with enhanced fan-out (consumerName) on kinesis-mock, local[2]; DynamoDB on moto's server.

The executors read their shards' shares of each batch through SubscribeToShard; the driver
registers the consumer and still probes idle shards with GetRecords. kinesis-mock sends one
event a second and refuses a new subscription to a shard for a second or two after the last
one closed, so each batch of a shard waits a little there (AWS: 5 s after the last subscription).
"""

from __future__ import annotations

import hashlib
import pathlib
from typing import Any

import pytest

from demo.servers import LocalServer
from tests.conftest import unique
from tests.helpers import Producer, wait_until
from tests.reshard import merge_adjacent, new_stream, split_first
from tests.server.test_large_records import SIZES, body, large_stream, record_id
from tests.spark.test_source import BatchLog, assert_reshard_order, assert_shard_order, start_query, wait_for
from tests.spark.test_triggers import AVAILABLE_NOW, ThenProduce, run_to_end

pytestmark = pytest.mark.server

FAN_OUT = {"consumerName": "spark-efo"}


def subscriptions_by_executors(call_log: pathlib.Path, mark: int) -> int:
    calls = [line.split(" ") for line in call_log.read_text().splitlines()[mark:]]
    return sum(1 for _, op, parent, _ in calls if op == "SubscribeToShard" and "pyspark.daemon" in parent)


def test_fan_out_reads_parents_before_children_every_record_once_and_replays_a_failed_batch_exactly(
    spark: Any, kinesis_mock: LocalServer, moto_server: LocalServer, tmp_path: pathlib.Path, call_log: pathlib.Path
) -> None:
    """A split and a merge before the query starts: batch 0 reads the three closed parents to their ends,
    batch 1 (failed once in the sink) the three children."""
    kinesis = kinesis_mock.client("kinesis")
    stream, app = new_stream(kinesis, 3), unique("app")
    producer = Producer(kinesis, stream, total=None, keys=12)
    producer.write_batch(150)
    parent = split_first(kinesis, stream)
    producer.write_batch(150)
    left, right = merge_adjacent(kinesis, stream, 2)  # the two shards that were not split
    producer.write_batch(150)
    mark = len(call_log.read_text().splitlines()) if call_log.exists() else 0
    sink, checkpoint = BatchLog(fail_batch=1), tmp_path / "ckpt"
    query = start_query(spark, kinesis_mock, moto_server, stream, app, checkpoint, sink, 1000, FAN_OUT)
    wait_until(lambda: query.exception() is not None, 120, "the sink to fail batch 1", poll=0.2)
    query.stop()
    failed = sink.attempts[1][0]
    assert failed
    producer.write_batch(60)  # a live re-read of batch 1 would hold more
    query = start_query(spark, kinesis_mock, moto_server, stream, app, checkpoint, sink, 1000, FAN_OUT)
    try:
        wait_for(query, lambda: len(sink.ids()) >= len(producer.produced), "every record")
    finally:
        query.stop()
    key = lambda row: (row["shard"], row["seq"])  # noqa: E731
    assert sorted(sink.attempts[1][1], key=key) == sorted(failed, key=key)  # the replay: the same rows
    rows = sink.final_rows()
    assert sorted(sink.ids()) == producer.produced  # each once
    assert_shard_order(rows)
    listing = kinesis.list_shards(StreamName=stream)["Shards"]
    assert {parent, left, right} <= assert_reshard_order(rows, listing)  # per-key order, children after parents
    assert subscriptions_by_executors(call_log, mark) >= 6, "the executors did not read through subscriptions"
    arn = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamARN"]
    consumers = kinesis.list_stream_consumers(StreamARN=arn)["Consumers"]
    assert [c["ConsumerName"] for c in consumers] == ["spark-efo"]  # registered once, by the driver


def test_fan_out_with_available_now_reads_what_was_there_at_the_start_then_the_rest_after_a_restart(
    spark: Any, kinesis_mock: LocalServer, moto_server: LocalServer, tmp_path: pathlib.Path
) -> None:
    kinesis = kinesis_mock.client("kinesis")
    stream, app = new_stream(kinesis, 2), unique("app")
    producer = Producer(kinesis, stream, total=None, keys=12)
    producer.write_batch(100)
    first = producer.produced
    sink = ThenProduce(lambda: producer.write_batch(50))  # written while the query runs: after its cut
    checkpoint = tmp_path / "ckpt"
    options = {**FAN_OUT, "kinesis.consumerType": "SubscribeToShard"}
    servers = (spark, kinesis_mock, moto_server, stream, app, checkpoint)
    run_to_end(start_query(*servers, sink, 40, options, AVAILABLE_NOW))
    assert len(producer.produced) == 150, "records were written while the query ran"
    assert sorted(sink.ids()) == first
    assert len([b for b in sink.attempts.values() if b[-1]]) >= 2  # 50 a shard at 40 a shard a batch
    again = BatchLog()
    run_to_end(start_query(*servers, again, 40, options, AVAILABLE_NOW))
    assert sorted(again.ids()) == producer.produced[100:]
    assert_shard_order(sink.final_rows() + again.final_rows())


def test_records_up_to_10_mib_are_written_by_the_sink_and_read_by_a_batch_read_and_with_fan_out(
    spark: Any, kinesis_mock: LocalServer, moto_server: LocalServer, tmp_path: pathlib.Path
) -> None:
    """kinesis-mock takes UpdateMaxRecordSize: the sink writes rows of up to 10 MiB (aggregate=true: the large
    ones go on their own), a batch read (GetRecords) and a streaming query (SubscribeToShard) read them whole."""
    kinesis = kinesis_mock.client("kinesis")
    stream, app = large_stream(kinesis), unique("app")
    rows = [(body(rid, size), f"key-{rid % 3}") for rid, size in SIZES]
    digests = {rid: hashlib.md5(body(rid, size)).hexdigest() for rid, size in SIZES}
    frame = spark.createDataFrame(rows, "data binary, partition_key string")
    options = {"streamName": stream, "endpointUrl": kinesis_mock.endpoint, "region": "us-east-1"}
    frame.write.format("kinsumer").options(**options, aggregate="true").mode("append").save()

    def got(rows: list[Any]) -> dict[int, str]:
        datas = [bytes(r.data) for r in rows]
        return {record_id(data): hashlib.md5(data).hexdigest() for data in datas}

    batch = spark.read.format("kinsumer").options(**options).load().select("data").collect()
    assert len(batch) == len(SIZES) and got(batch) == digests
    streamed: list[Any] = []
    reading = {**options, "dynamodbEndpointUrl": moto_server.endpoint, "applicationName": app, **FAN_OUT}
    query = (
        spark.readStream.format("kinsumer").options(**reading).load().select("data").writeStream
        .foreachBatch(lambda df, _: streamed.extend(df.collect()))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )  # fmt: skip
    try:
        wait_for(query, lambda: len(streamed) >= len(SIZES), "every large record")
    finally:
        query.stop()
    assert len(streamed) == len(SIZES) and got(streamed) == digests
