"""The source and the sink through Spark Connect: a client session on a Connect server (tests/spark/connect.py).

The data source runs in the server's Python workers, with the server's environment (AWS settings, PYTHONPATH);
the client only sends plans. Kinesis is kinesalite; the batch ledger is at a path (no DynamoDB).
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from demo.servers import LocalServer
from tests.helpers import produce_per_shard
from tests.reshard import new_stream
from tests.spark.test_cluster import sink_rows
from tests.spark.test_source import assert_shard_order

pytestmark = pytest.mark.server


def source_options(kinesalite: LocalServer, stream: str, ledger: pathlib.Path, limit: int) -> dict[str, str]:
    return {
        "streamName": stream,
        "endpointUrl": kinesalite.endpoint,
        "region": "us-east-1",
        "metadataPath": str(ledger),
        "maxRecordsPerShard": str(limit),
    }


def run_to_end(query: Any) -> None:
    """Wait for an availableNow query to stop by itself, without an error."""
    try:
        assert query.awaitTermination(120), "the availableNow query did not stop by itself"
    finally:
        query.stop()
    assert query.exception() is None


def run_available_now(spark: Any, options: dict[str, str], out: pathlib.Path) -> None:
    """One availableNow query from the source into a parquet sink, run to its end."""
    frame = spark.readStream.format("kinsumer").options(**options).load()
    query = (
        frame.writeStream.format("parquet")
        .option("path", str(out / "sink"))
        .option("checkpointLocation", str(out / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    run_to_end(query)


def read_ids(spark: Any, kinesalite: LocalServer, stream: str) -> list[int]:
    """The ids of every record in the stream, by a batch read through Connect."""
    options = {"streamName": stream, "endpointUrl": kinesalite.endpoint, "region": "us-east-1"}
    frame = spark.read.format("kinsumer").options(**options).load()
    return sorted(json.loads(row.data)["id"] for row in frame.select("data").collect())


def test_available_now_through_connect_reads_every_record_once_in_shard_order_across_two_runs(
    spark_connect: Any, kinesalite: LocalServer, tmp_path: pathlib.Path
) -> None:
    kinesis = kinesalite.client("kinesis")
    stream = new_stream(kinesis, 2)
    options = source_options(kinesalite, stream, tmp_path / "ledger", limit=15)
    first = produce_per_shard(kinesis, stream, 30)
    run_available_now(spark_connect, options, tmp_path)
    rows = sink_rows(tmp_path / "sink")
    assert sorted(r["id"] for r in rows) == first  # all that was there, once
    assert len({r["batch"] for r in rows}) >= 2  # 30 per shard at 15 per shard per batch

    later = produce_per_shard(kinesis, stream, 10, first_id=len(first))
    run_available_now(spark_connect, options, tmp_path)  # the same checkpoint: a restart
    rows = sink_rows(tmp_path / "sink")
    assert sorted(r["id"] for r in rows) == first + later  # what came since, once
    assert_shard_order(rows)


def test_the_sink_through_connect_puts_every_row_once_in_a_batch_write_and_a_streaming_query(
    spark_connect: Any, kinesalite: LocalServer, tmp_path: pathlib.Path
) -> None:
    kinesis = kinesalite.client("kinesis")
    source, target = new_stream(kinesis, 2), new_stream(kinesis, 3)
    rows = [(json.dumps({"id": i}), f"key-{i % 31}") for i in range(400)]
    frame = spark_connect.createDataFrame(rows, "data string, partition_key string").repartition(2)
    frame.write.format("kinsumer").options(streamName=source, endpointUrl=kinesalite.endpoint, region="us-east-1").mode(
        "append"
    ).save()
    assert read_ids(spark_connect, kinesalite, source) == list(range(400))  # each once

    reading = source_options(kinesalite, source, tmp_path / "ledger", limit=10_000)
    query = (
        spark_connect.readStream.format("kinsumer")
        .options(**reading)
        .load()
        .selectExpr("data", "partition_key")
        .writeStream.format("kinsumer")
        .options(streamName=target, endpointUrl=kinesalite.endpoint, region="us-east-1")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    run_to_end(query)
    assert read_ids(spark_connect, kinesalite, target) == list(range(400))  # each once


def test_a_misspelled_option_through_connect_fails_with_kinsumers_message(spark_connect: Any) -> None:
    reader = spark_connect.readStream.format("kinsumer").option("streamName", "s").option("maxRecordPerShard", "5")
    frame = reader.load()  # a Connect client only builds the plan: the server checks it when asked
    with pytest.raises(Exception, match="ConfigError: option maxrecordpershard is unknown") as info:
        frame.schema  # noqa: B018 - asking for the schema has the server analyse the plan
    message = str(info.value)
    assert "did you mean maxRecordsPerShard" in message
    # the client sees the source's short traceback too: only the source's own frames come before the message
    assert message.count('File "') == message.count("kinsumer/spark/source.py") <= 2, message
