"""The Kinesis sink: df.write / df.writeStream.format("kinsumer") on kinesalite, read back through the source.

A relay between the executors and kinesalite refuses part of each PutRecords as a throttled
shard does (and a few calls as a whole), so the retries are real.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from demo.servers import LocalServer
from tests.relay import KinesisRelay
from tests.reshard import new_stream

pytestmark = pytest.mark.server


@pytest.fixture
def relay(kinesalite: LocalServer) -> Iterator[KinesisRelay]:
    refuse, throttle = (lambda index: index % 5 == 2), (lambda n: n % 7 == 3)
    with KinesisRelay(kinesalite.endpoint, refuse=refuse, throttle_call=throttle) as r:
        yield r


def read_back(spark: Any, kinesalite: LocalServer, stream: str) -> list[Any]:
    options = {"streamName": stream, "endpointUrl": kinesalite.endpoint, "region": "us-east-1"}
    frame = spark.read.format("kinsumer").options(**options).load()
    return list(frame.select("data", "partition_key", "shard_id", "sub_sequence_number").collect())


def test_a_batch_write_puts_every_row_once_through_throttling_on_part_of_each_call(
    spark: Any, kinesalite: LocalServer, relay: KinesisRelay
) -> None:
    stream = new_stream(kinesalite.client("kinesis"), 3)
    rows = [(json.dumps({"id": i}), f"key-{i % 50}") for i in range(3_000)]
    frame = spark.createDataFrame(rows, "data string, partition_key string").repartition(4)
    frame.write.format("kinsumer").options(streamName=stream, endpointUrl=relay.endpoint, region="us-east-1").mode(
        "append"
    ).save()
    assert relay.refused_entries > 300 and relay.refused_calls >= 1  # the retries happened
    read = read_back(spark, kinesalite, stream)
    assert sorted(json.loads(r.data)["id"] for r in read) == list(range(3_000))  # each once
    assert {r.sub_sequence_number for r in read} == {None}


def test_a_stream_of_rows_written_as_kpl_aggregates_reads_back_as_its_user_records(
    spark: Any, kinesalite: LocalServer, moto_server: LocalServer, relay: KinesisRelay, tmp_path: pathlib.Path
) -> None:
    """A streaming query reads one stream with the source and writes another with the sink, aggregated."""
    kinesis = kinesalite.client("kinesis")
    source, target = new_stream(kinesis, 2), new_stream(kinesis, 4)
    for start in range(0, 2_000, 500):
        ids = range(start, start + 500)
        entries = [{"Data": json.dumps({"id": i}).encode(), "PartitionKey": f"k{i % 31}"} for i in ids]
        kinesis.put_records(StreamName=source, Records=entries)
    reading = {
        "streamName": source,
        "endpointUrl": kinesalite.endpoint,
        "dynamodbEndpointUrl": moto_server.endpoint,
        "applicationName": f"sink-{source}",
        "region": "us-east-1",
        "maxRecordsPerShard": "400",
    }
    frame = spark.readStream.format("kinsumer").options(**reading).load().selectExpr("data", "partition_key")
    query = (
        frame.writeStream.format("kinsumer")
        .options(streamName=target, endpointUrl=relay.endpoint, region="us-east-1", aggregate="true")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180)
    assert query.exception() is None
    read = read_back(spark, kinesalite, target)
    assert sorted(json.loads(r.data)["id"] for r in read) == list(range(2_000))  # each once
    assert sum(1 for r in read if r.sub_sequence_number is not None) > 1_500  # written as aggregates
    shard_of_key = {}
    for r in read:  # every user record in the shard its key maps to
        assert shard_of_key.setdefault(r.partition_key, r.shard_id) == r.shard_id


def test_bad_frames_and_modes_fail_with_the_column_or_the_row_named(spark: Any, kinesalite: LocalServer) -> None:
    stream = new_stream(kinesalite.client("kinesis"), 1)
    options = {"streamName": stream, "endpointUrl": kinesalite.endpoint, "region": "us-east-1"}

    def write(frame: Any, mode: str = "append") -> None:
        frame.write.format("kinsumer").options(**options).mode(mode).save()

    with pytest.raises(Exception, match="column partition_key is required"):
        write(spark.createDataFrame([("x",)], "data string"))
    with pytest.raises(Exception, match="column data must be binary or string"):
        write(spark.createDataFrame([(1, "k")], "data int, partition_key string"))
    with pytest.raises(Exception, match="use mode\\('append'\\)"):
        write(spark.createDataFrame([("x", "k")], "data string, partition_key string"), "overwrite")
    with pytest.raises(Exception, match="partition key 'huge' is 2,000,004 bytes"):
        write(spark.createDataFrame([("x" * 2_000_000, "huge")], "data string, partition_key string"))
    with pytest.raises(Exception, match=r"option kinesis.sink.recordTtl .* no record is ever dropped"):
        spark.createDataFrame([("x", "k")], "data string, partition_key string").write.format("kinsumer").options(
            **options, **{"kinesis.sink.recordTtl": "1000"}
        ).mode("append").save()
    assert read_back(spark, kinesalite, stream) == []
