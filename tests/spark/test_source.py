"""The Spark source end to end: local[2] SparkSession, servers on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import pathlib
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest

from demo.aggregation import aggregated_entries
from demo.servers import LocalServer
from tests.conftest import unique
from tests.helpers import Producer, produce_per_shard, put_all, shard_hash_keys, wait_until
from tests.reshard import create_again, merge_adjacent, new_stream, split_first

pytestmark = pytest.mark.server


class BatchLog:
    """A foreachBatch sink that keeps every attempt of every batch; it can fail one attempt."""

    def __init__(self, fail_batch: int | None = None) -> None:
        self.attempts: dict[int, list[list[dict[str, Any]]]] = defaultdict(list)
        self.fail_batch = fail_batch
        self._lock = threading.Lock()

    def __call__(self, frame: Any, batch_id: int) -> None:
        rows = [
            {
                **json.loads(r.data),
                "shard": r.shard_id,
                "seq": int(r.sequence_number),
                "pk": r.partition_key,
                "stream": r.stream,
                "sub": r.sub_sequence_number,
                "hash_key": r.explicit_hash_key,
                "arrival": r.approximate_arrival_timestamp,
                "batch": batch_id,
            }
            for r in frame.collect()
        ]
        with self._lock:
            self.attempts[batch_id].append(rows)
        if batch_id == self.fail_batch and rows:
            self.fail_batch = None
            raise RuntimeError(f"the sink failed on batch {batch_id}")

    def final_rows(self) -> list[dict[str, Any]]:
        """The rows of the last attempt of each batch: what an idempotent sink would hold."""
        with self._lock:
            return [row for batch in sorted(self.attempts) for row in self.attempts[batch][-1]]

    def ids(self) -> list[int]:
        return [row["id"] for row in self.final_rows()]


def start_query(
    spark: Any,
    kinesis: LocalServer,
    dynamodb: LocalServer,
    stream: str,
    app: str,
    checkpoint: pathlib.Path,
    sink: BatchLog | pathlib.Path,
    limit: int = 10_000,
    options: dict[str, str] | None = None,
    trigger: dict[str, Any] | None = None,
) -> Any:
    chosen = {
        "streamName": stream,
        "endpointUrl": kinesis.endpoint,
        "dynamodbEndpointUrl": dynamodb.endpoint,
        "applicationName": app,
        "maxRecordsPerShard": str(limit),
        "region": "us-east-1",
        **(options or {}),
    }
    if "metadataPath" in chosen:  # the ledger at a path: no DynamoDB options
        del chosen["dynamodbEndpointUrl"], chosen["applicationName"]
    frame = spark.readStream.format("kinsumer").options(**chosen).load()
    writer = frame.writeStream.option("checkpointLocation", str(checkpoint))
    writer = writer.trigger(**(trigger or {"processingTime": "200 milliseconds"}))
    if isinstance(sink, BatchLog):
        return writer.foreachBatch(sink).start()
    return writer.format("parquet").option("path", str(sink)).start()


def wait_for(query: Any, condition: Callable[[], bool], what: str, timeout: float = 120) -> None:
    def done() -> bool:
        if query.exception() is not None:
            raise AssertionError(f"the query failed: {query.exception()}")
        return condition()

    wait_until(done, timeout, what, poll=0.2)


def uncommit_last_batch(checkpoint: pathlib.Path) -> int:
    """Make the query's next run replay its last batch, as after a stop between its sink and its commit."""
    batch = max(int(path.name) for path in (checkpoint / "offsets").iterdir() if path.name.isdigit())
    (checkpoint / "commits" / str(batch)).unlink(missing_ok=True)
    (checkpoint / "commits" / f".{batch}.crc").unlink(missing_ok=True)
    return batch


def read_rows(query: Any) -> int:
    return sum(p["numInputRows"] for p in query.recentProgress)


def assert_shard_order(rows: list[dict[str, Any]]) -> None:
    """Per shard, in (batch, position) order, positions increase: (sequence number, sub-sequence in an aggregate)."""
    by_shard: dict[str, list[tuple[int, tuple[int, int]]]] = defaultdict(list)
    for row in rows:
        by_shard[row["shard"]].append((row["batch"], (row["seq"], -1 if row["sub"] is None else row["sub"])))
    for shard, batches_and_positions in by_shard.items():
        positions = [position for _, position in sorted(batches_and_positions)]
        assert positions == sorted(positions) and len(set(positions)) == len(positions), shard


def assert_reshard_order(rows: list[dict[str, Any]], shards: list[dict[str, Any]]) -> set[str]:
    """Per-key counters in (batch, sequence) order; every child read in later batches than its parents.

    Returns the shards the rows came from.
    """
    by_key: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    batches_of: dict[str, list[int]] = defaultdict(list)
    for row in rows:
        by_key[row["key"]].append((row["batch"], row["seq"], row["counter"]))
        batches_of[row["shard"]].append(row["batch"])
    for key, seen in by_key.items():
        counters = [counter for _, _, counter in sorted(seen)]
        assert counters == sorted(counters), key
    for shard in shards:
        for parent in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId")):
            if parent and shard["ShardId"] in batches_of and parent in batches_of:
                assert min(batches_of[shard["ShardId"]]) > max(batches_of[parent]), (parent, shard["ShardId"])
    return set(batches_of)


def test_every_record_arrives_once_over_several_batches_and_the_driver_only_probes(
    spark: Any,
    moto_server: LocalServer,
    new_stream: Callable[[int], str],
    tmp_path: pathlib.Path,
    call_log: pathlib.Path,
) -> None:
    stream, app = new_stream(4), unique("app")
    produced = produce_per_shard(moto_server.client("kinesis"), stream, 500)
    sink = BatchLog()
    mark = len(call_log.read_text().splitlines()) if call_log.exists() else 0  # the log is the session's
    query = start_query(spark, moto_server, moto_server, stream, app, tmp_path / "ckpt", sink, limit=150)
    try:
        wait_for(query, lambda: len(sink.ids()) >= len(produced), "every record")
    finally:
        query.stop()
    rows = sink.final_rows()
    assert sorted(sink.ids()) == produced  # each exactly once
    assert len([b for b, attempts in sink.attempts.items() if attempts[-1]]) >= 4  # 500 per shard, 150 per batch
    assert_shard_order(rows)
    assert {row["stream"] for row in rows} == {stream}
    assert all(row["pk"] == row["key"] and row["arrival"] is not None for row in rows)

    # this query's calls only: a batch read earlier in the session plans in a reused Python worker
    calls = [line.split(" ") for line in call_log.read_text().splitlines()[mark:]]
    executors = {pid for pid, _, parent, _ in calls if "pyspark.daemon" in parent}
    readers = {pid for pid, op, _, limit in calls if op == "GetRecords" and limit != "1"}
    planners = {pid for pid, op, _, _ in calls if op == "ListShards"}
    assert readers and planners
    assert readers <= executors, "records were read outside the executors' workers (other than probes of one record)"
    assert not planners & executors, "shards were listed from an executor"


def test_a_restart_from_the_checkpoint_reads_only_the_new_records(
    spark: Any, moto_server: LocalServer, new_stream: Callable[[int], str], tmp_path: pathlib.Path
) -> None:
    stream, app = new_stream(3), unique("app")
    kinesis = moto_server.client("kinesis")
    first = produce_per_shard(kinesis, stream, 300)
    out, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    query = start_query(spark, moto_server, moto_server, stream, app, checkpoint, out, limit=200)
    try:
        wait_for(query, lambda: read_rows(query) >= len(first), "the first records")
    finally:
        query.stop()
    second = produce_per_shard(kinesis, stream, 200, first_id=len(first))
    query = start_query(spark, moto_server, moto_server, stream, app, checkpoint, out, limit=200)
    try:
        wait_for(query, lambda: read_rows(query) >= len(second), "the new records")
        batches = len(query.recentProgress)
        wait_for(query, lambda: len(query.recentProgress) >= batches + 3, "three more batches")  # they add nothing
    finally:
        query.stop()
    assert read_rows(query) == len(second)
    ids = sorted(json.loads(r.data)["id"] for r in spark.read.parquet(str(out)).select("data").collect())
    assert ids == sorted(first + second)


def test_a_batch_that_failed_in_the_sink_is_replayed_with_identical_rows(
    spark: Any, moto_server: LocalServer, new_stream: Callable[[int], str], tmp_path: pathlib.Path
) -> None:
    stream, app = new_stream(3), unique("app")
    kinesis = moto_server.client("kinesis")
    produced = produce_per_shard(kinesis, stream, 300)
    sink = BatchLog(fail_batch=1)
    checkpoint = tmp_path / "ckpt"
    query = start_query(spark, moto_server, moto_server, stream, app, checkpoint, sink, limit=100)
    wait_until(lambda: query.exception() is not None, 120, "the sink to fail", poll=0.2)
    query.stop()
    failed = sink.attempts[1][0]
    assert failed
    produced += produce_per_shard(kinesis, stream, 100, first_id=len(produced))  # a live re-read would differ
    query = start_query(spark, moto_server, moto_server, stream, app, checkpoint, sink, limit=100)
    try:
        wait_for(query, lambda: len(sink.ids()) >= len(produced), "every record after the restart")
    finally:
        query.stop()
    assert len(sink.attempts[1]) == 2
    replayed = sink.attempts[1][1]
    key = lambda row: (row["shard"], row["seq"])  # noqa: E731
    assert sorted(replayed, key=key) == sorted(failed, key=key)
    assert sorted(sink.ids()) == sorted(produced)


def test_kpl_user_records_arrive_once_across_batches_that_end_inside_aggregates_and_a_replay(
    spark: Any, moto_server: LocalServer, new_stream: Callable[[int], str], tmp_path: pathlib.Path
) -> None:
    stream, app = new_stream(2), unique("app")
    kinesis = moto_server.client("kinesis")
    users = [(f"key-{i % 5}", json.dumps({"id": i}).encode(), str(i) if i % 4 == 0 else None) for i in range(140)]
    put_all(kinesis, stream, list(aggregated_entries(users, per_record=7)))  # 20 aggregates of 7
    sink = BatchLog(fail_batch=1)
    checkpoint = tmp_path / "ckpt"
    # 5 user records per shard per batch: most batches end inside an aggregate
    query = start_query(spark, moto_server, moto_server, stream, app, checkpoint, sink, limit=5)
    wait_until(lambda: query.exception() is not None, 120, "the sink to fail", poll=0.2)
    query.stop()
    failed = sink.attempts[1][0]
    query = start_query(spark, moto_server, moto_server, stream, app, checkpoint, sink, limit=5)
    try:
        wait_for(query, lambda: len(sink.ids()) >= len(users), "every user record")
    finally:
        query.stop()
    assert sorted(sink.ids()) == list(range(len(users)))  # each once
    key = lambda row: (row["shard"], row["seq"], row["sub"])  # noqa: E731
    assert sorted(sink.attempts[1][1], key=key) == sorted(failed, key=key)  # the replay: the same rows
    rows = sink.final_rows()
    per_batch_and_shard = defaultdict(int)
    for row in rows:
        per_batch_and_shard[(row["batch"], row["shard"])] += 1
    assert max(per_batch_and_shard.values()) == 5  # maxRecordsPerShard counts user records
    assert {(r["pk"], r["hash_key"]) for r in rows} == {(k, h) for k, _, h in users}
    assert {r["sub"] for r in rows} == set(range(7))
    assert_shard_order(rows)


def test_kpl_user_records_outside_their_shard_are_dropped_with_kpl_outside_shard_drop(
    spark: Any, moto_server: LocalServer, new_stream: Callable[[int], str], tmp_path: pathlib.Path
) -> None:
    stream, app = new_stream(2), unique("app")
    kinesis = moto_server.client("kinesis")
    ranges = {
        s["ShardId"]: (int(s["HashKeyRange"]["StartingHashKey"]), int(s["HashKeyRange"]["EndingHashKey"]))
        for s in kinesis.list_shards(StreamName=stream)["Shards"]
    }
    users = [(f"key-{i % 5}", json.dumps({"id": i}).encode(), None) for i in range(70)]
    kept = []
    for first in range(0, len(users), 7):  # aggregates of every key: some user records outside their shard
        (entry,) = aggregated_entries(users[first : first + 7], per_record=7)
        low, high = ranges[kinesis.put_record(StreamName=stream, **entry)["ShardId"]]
        hashes = [int(hashlib.md5(key.encode()).hexdigest(), 16) for key, _, _ in users[first : first + 7]]
        kept += [first + i for i, h in enumerate(hashes) if low <= h <= high]
    assert 0 < len(kept) < len(users)
    sink = BatchLog()
    options = {"kplOutsideShard": "drop"}
    query = start_query(spark, moto_server, moto_server, stream, app, tmp_path / "ckpt", sink, options=options)
    try:  # each aggregate's first user record is inside the shard that stored it: all were read once these came
        wait_for(query, lambda: len(sink.ids()) >= len(kept), "every user record inside its shard")
    finally:
        query.stop()
    assert sorted(sink.ids()) == kept


def test_split_and_merge_between_batches_keep_per_key_order(
    spark: Any, kinesalite: LocalServer, moto_server: LocalServer, tmp_path: pathlib.Path
) -> None:
    kinesis = kinesalite.client("kinesis")
    stream, app = new_stream(kinesis, 2), unique("app")
    producer = Producer(kinesis, stream, total=None, keys=12)
    sink = BatchLog()
    query = start_query(spark, kinesalite, moto_server, stream, app, tmp_path / "ckpt", sink, limit=1000)
    try:
        producer.write_batch(240)
        wait_for(query, lambda: len(sink.ids()) >= 240, "records before the split")
        parent = split_first(kinesis, stream)
        producer.write_batch(240)
        wait_for(query, lambda: len(sink.ids()) >= 480, "records after the split")
        left, right = merge_adjacent(kinesis, stream, 1)
        producer.write_batch(240)
        wait_for(query, lambda: len(sink.ids()) >= 720, "records after the merge")
    finally:
        query.stop()
    rows = sink.final_rows()
    assert sorted(sink.ids()) == producer.produced
    assert_shard_order(rows)
    read = assert_reshard_order(rows, kinesis.list_shards(StreamName=stream)["Shards"])
    assert {parent, left, right} <= read


def test_a_stream_created_again_under_its_name_is_read_from_its_start_after_a_restart(
    spark: Any, kinesalite: LocalServer, moto_server: LocalServer, tmp_path: pathlib.Path
) -> None:
    """The checkpoint's offsets hold positions and a finished parent of the first incarnation.

    The second reuses the shard IDs (on kinesalite, which closes a split parent): none of it applies.
    The first run's last batch is replayed (as after a stop between the sink and the commit: the
    test makes sure of it) and reads nothing, its records gone with their stream.
    """
    kinesis = kinesalite.client("kinesis")
    stream, app = new_stream(kinesis, 1), unique("app")
    sink, checkpoint = BatchLog(), tmp_path / "ckpt"
    query = start_query(spark, kinesalite, moto_server, stream, app, checkpoint, sink, limit=1000)
    try:
        first = produce_per_shard(kinesis, stream, 10)
        wait_for(query, lambda: len(sink.ids()) >= len(first), "the first incarnation's records")
        split_first(kinesis, stream)
        first += produce_per_shard(kinesis, stream, 10, first_id=len(first))  # on both children
        wait_for(query, lambda: len(sink.ids()) >= len(first), "its children's records")
    finally:
        query.stop()
    assert sorted(sink.ids()) == first
    replayed = uncommit_last_batch(checkpoint)
    gone = {row["id"] for attempt in sink.attempts[replayed] for row in attempt}

    create_again(kinesis, stream, 2)  # shardId-000000000000 (the split parent) and -001 again
    second = produce_per_shard(kinesis, stream, 20, first_id=100)
    query = start_query(spark, kinesalite, moto_server, stream, app, checkpoint, sink, limit=1000)
    try:
        wait_for(query, lambda: len(sink.ids()) >= len(first) - len(gone) + len(second), "the new stream's records")
    finally:
        query.stop()
    assert query.exception() is None
    assert sink.attempts[replayed][-1] == []  # the replay read nothing of the new stream
    assert sorted(sink.ids()) == sorted(set(first) - gone) + second  # nothing of the new stream lost, nothing twice
    assert {row["shard"] for row in sink.final_rows() if row["id"] >= 100} == set(shard_hash_keys(kinesis, stream))


def test_a_stream_by_arn_in_another_region_is_read_by_a_query_and_a_batch_read_and_written_by_the_sink(
    spark: Any, moto_server: LocalServer, tmp_path: pathlib.Path
) -> None:
    """``streamARN``: every Kinesis call in the ARN's region (us-west-2 here: moto keeps a backend per region, so the
    stream is found only there), the ledger's DynamoDB in ``region``'s (us-east-1); rows name the stream by its name."""
    import boto3

    west = boto3.client("kinesis", endpoint_url=moto_server.endpoint, region_name="us-west-2")
    streams = [unique("west"), unique("west")]
    for name in streams:
        west.create_stream(StreamName=name, ShardCount=2)
        west.get_waiter("stream_exists").wait(StreamName=name, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})
    source, target = (
        west.describe_stream_summary(StreamName=n)["StreamDescriptionSummary"]["StreamARN"] for n in streams
    )
    assert ":us-west-2:" in source
    produced = produce_per_shard(west, streams[0], 100)
    app, sink, endpoint = unique("app"), BatchLog(), moto_server.endpoint
    options = {"streamARN": source, "endpointUrl": endpoint, "dynamodbEndpointUrl": endpoint, "applicationName": app,
               "maxRecordsPerShard": "60", "region": "us-east-1"}  # fmt: skip
    frame = spark.readStream.format("kinsumer").options(**options).load()
    writer = frame.writeStream.option("checkpointLocation", str(tmp_path / "ckpt"))
    query = writer.trigger(processingTime="200 milliseconds").foreachBatch(sink).start()
    try:
        wait_for(query, lambda: len(sink.ids()) >= len(produced), "every record")
    finally:
        query.stop()
    rows = sink.final_rows()
    assert sorted(sink.ids()) == produced  # each exactly once
    assert_shard_order(rows)
    assert {row["stream"] for row in rows} == {streams[0]}  # the name, not the ARN
    assert f"{app}_metadata" in moto_server.client("dynamodb").list_tables()["TableNames"]  # the caller's region

    batch = spark.read.format("kinsumer").options(streamARN=source, endpointUrl=endpoint, region="us-east-1").load()
    batch.selectExpr("CAST(data AS STRING) AS data", "partition_key").write.format("kinsumer").options(
        streamARN=target, endpointUrl=endpoint, region="us-east-1"
    ).mode("append").save()
    back = spark.read.format("kinsumer").options(streamARN=target, endpointUrl=endpoint).load()
    assert sorted(json.loads(r.data)["id"] for r in back.select("data").collect()) == produced
