"""A data pipeline on Spark with the kinsumer source, on an embedded local server.

    python scripts/spark_pipeline.py [--events N] [--shards N] [--out DIR] [--cluster]

1. starts moto's server on 127.0.0.1 and creates a Kinesis stream of click events;
2. a producer writes JSON click events ({"event_id", "user", "page", "ts"});
3. a Spark job (local[2], or with --cluster a standalone cluster of a master and two 1-core
   workers started on 127.0.0.1) reads them with ``format("kinsumer")`` (records read on the
   executors), parses them, and writes
   - every event to a parquet table (``events``), and
   - counts per page in 5-second event-time windows (watermark 2 s) to another (``windows``);
4. prints progress per micro-batch and a final summary that checks the counts add up.

When the producer is done it writes one late "flush" event per page, which moves the
watermark past the last windows so they are written too.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import pathlib
import random
import sys
import tempfile
import threading
import time
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the checkout: its demo package

import pyspark.sql.functions as F

import kinsumer.spark
from demo import servers
from demo.spark_cluster import standalone_cluster

AWS_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")  # to the executors
PAGES = ["home", "search", "product", "cart", "checkout", "help"]
FLUSH_PAGE = "__flush__"


def produce(kinesis: Any, stream: str, events: int, done: threading.Event) -> None:
    """Events with event time = now, in batches of 500; then a flush event per page."""
    rng = random.Random(7)
    for start in range(0, events, 500):
        batch = []
        for event_id in range(start, min(start + 500, events)):
            event = {
                "event_id": event_id,
                "user": f"user-{rng.randrange(200)}",
                "page": rng.choice(PAGES),
                "ts": dt.datetime.now(dt.UTC).isoformat(),
            }
            batch.append({"Data": json.dumps(event).encode(), "PartitionKey": event["user"]})
        put_all(kinesis, stream, batch)
        time.sleep(0.2)
    late = (dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)).isoformat()
    flush = [{"event_id": -1 - i, "user": "flush", "page": FLUSH_PAGE, "ts": late} for i in range(len(PAGES))]
    put_all(kinesis, stream, [{"Data": json.dumps(e).encode(), "PartitionKey": str(i)} for i, e in enumerate(flush)])
    done.set()


def put_all(kinesis: Any, stream: str, entries: list[dict[str, Any]]) -> None:
    while entries:
        answer = kinesis.put_records(StreamName=stream, Records=entries)
        entries = [e for e, r in zip(entries, answer["Records"], strict=True) if "ErrorCode" in r]


def build_queries(spark: Any, endpoint: str, stream: str, out: pathlib.Path) -> list[Any]:
    raw = (
        spark.readStream.format("kinsumer")
        .option("streamName", stream)
        .option("endpointUrl", endpoint)
        .option("dynamodbEndpointUrl", endpoint)
        .option("region", servers.REGION)
        .option("maxRecordsPerShard", "2000")
        .load()
    )
    schema = "event_id long, user string, page string, ts string"
    events = raw.select(F.from_json(F.col("data").cast("string"), schema).alias("e"), "shard_id").select(
        "e.event_id", "e.user", "e.page", F.to_timestamp("e.ts").alias("event_time"), "shard_id"
    )
    to_events = (
        events.writeStream.format("parquet")
        .option("path", str(out / "events"))
        .option("checkpointLocation", str(out / "checkpoints" / "events"))
        .trigger(processingTime="1 second")
        .start()
    )
    windows = (
        events.withWatermark("event_time", "2 seconds")
        .groupBy(F.window("event_time", "5 seconds"), "page")
        .count()
        .select(F.col("window.start").alias("window_start"), "page", "count")
    )
    to_windows = (
        windows.writeStream.format("parquet")
        .outputMode("append")
        .option("path", str(out / "windows"))
        .option("checkpointLocation", str(out / "checkpoints" / "windows"))
        .trigger(processingTime="1 second")
        .start()
    )
    return [to_events, to_windows]


def watch(
    spark: Any, queries: list[Any], out: pathlib.Path, events: int, produced: threading.Event, timeout: float
) -> None:
    """A line per second from the queries' progress; done when every event is counted in a window."""
    started = time.monotonic()
    read: dict[int, int] = {}  # batch id -> rows the source read
    while time.monotonic() - started < timeout:
        time.sleep(1.0)
        for query in queries:
            if query.exception() is not None:
                raise RuntimeError(f"query {query.name or query.id} failed: {query.exception()}")
        for progress in queries[0].recentProgress:
            read[progress["batchId"]] = progress["numInputRows"]
        last = queries[0].lastProgress or {}
        watermark = ((queries[1].lastProgress or {}).get("eventTime") or {}).get("watermark", "-")
        print(
            f"[{time.monotonic() - started:5.1f}s] read {sum(read.values()):6d} events in {len(read)} batches "
            f"(last batch {last.get('numInputRows', 0)} rows at {last.get('processedRowsPerSecond', 0.0):.0f} rows/s)  "
            f"windows closed up to {watermark}",
            flush=True,
        )
        if (
            produced.is_set()
            and sum(read.values()) >= events + len(PAGES)
            and sum_counts(spark, out / "windows") >= events
        ):
            return
    print(f"timed out after {timeout:g} s", flush=True)


EVENTS_SCHEMA = "event_id long, user string, page string, event_time timestamp, shard_id string"
WINDOWS_SCHEMA = "window_start timestamp, page string, count long"


def read_table(spark: Any, path: pathlib.Path, schema: str) -> Any:
    """The committed rows of a parquet sink (none yet: an empty frame)."""
    if not (path / "_spark_metadata").exists():
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).parquet(str(path))


def count_rows(spark: Any, path: pathlib.Path, condition: str) -> int:
    return int(read_table(spark, path, EVENTS_SCHEMA).where(condition).count())


def sum_counts(spark: Any, path: pathlib.Path) -> int:
    rows = read_table(spark, path, WINDOWS_SCHEMA).where(f"page != '{FLUSH_PAGE}'").agg({"count": "sum"}).collect()
    return int(rows[0][0] or 0)


def stop_between_batches(query: Any, timeout: float = 30.0) -> None:
    """Stop when no micro-batch runs (stopping one mid-write aborts it, noisily)."""
    deadline = time.monotonic() + timeout
    while query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.05)
    query.stop()


def summary(spark: Any, out: pathlib.Path, events: int) -> bool:
    stored = read_table(spark, out / "events", EVENTS_SCHEMA).where("event_id >= 0")
    distinct = stored.select("event_id").distinct().count()
    total = stored.count()
    windows = read_table(spark, out / "windows", WINDOWS_SCHEMA).where(f"page != '{FLUSH_PAGE}'")
    counted = int(windows.agg({"count": "sum"}).collect()[0][0] or 0)
    print("---- summary ----")
    print(f"events produced          {events}")
    print(f"events stored            {total} ({distinct} distinct, {total - distinct} duplicates)")
    print(f"lost                     {events - distinct}")
    print(f"windows written          {windows.count()} (5 s windows x pages)")
    print(f"events counted in them   {counted}")
    per_page = windows.groupBy("page").agg({"count": "sum"}).orderBy("page").collect()
    print("per page                 " + ", ".join(f"{r['page']} {r['sum(count)']}" for r in per_page))
    print(f"parquet output           {out}")
    ok = bool(total == distinct == counted == events)
    print("OK: every event stored once and counted once" if ok else "FAILED: the counts do not add up")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000, help="click events to produce (default 20000)")
    parser.add_argument("--shards", type=int, default=4, help="shards of the stream (default 4)")
    parser.add_argument("--out", type=pathlib.Path, help="output directory (default: a new temporary one)")
    parser.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds")
    parser.add_argument("--cluster", action="store_true", help="run on a standalone cluster (master + 2 workers)")
    args = parser.parse_args()
    out = args.out or pathlib.Path(tempfile.mkdtemp(prefix="kinsumer-spark-"))
    os.environ.update(AWS_ACCESS_KEY_ID="local", AWS_SECRET_ACCESS_KEY="local", AWS_DEFAULT_REGION=servers.REGION)
    with servers.moto_server() as server, contextlib.ExitStack() as stack:
        kinesis = server.client("kinesis")
        kinesis.create_stream(StreamName="clicks", ShardCount=args.shards)
        kinesis.get_waiter("stream_exists").wait(StreamName="clicks", WaiterConfig={"Delay": 0.2})
        print(f"moto server at {server.endpoint}; stream 'clicks' with {args.shards} shards", flush=True)
        conf = {"spark.sql.session.timeZone": "UTC"}
        if args.cluster:
            cluster = stack.enter_context(standalone_cluster(workers=2, cores=1))
            print(f"Spark standalone cluster at {cluster.master_url} with 2 workers", flush=True)
            spark = cluster.session("kinsumer-spark-pipeline", {**conf, "spark.sql.shuffle.partitions": "2"}, AWS_ENV)
        else:
            spark = kinsumer.spark.local_session("kinsumer-spark-pipeline", conf=conf)
        try:
            queries = build_queries(spark, server.endpoint, "clicks", out)
            produced = threading.Event()
            threading.Thread(target=produce, args=(kinesis, "clicks", args.events, produced), daemon=True).start()
            watch(spark, queries, out, args.events, produced, args.timeout)
            for query in queries:
                stop_between_batches(query)
            return 0 if summary(spark, out, args.events) else 1
        finally:
            spark.stop()


if __name__ == "__main__":
    sys.exit(main())
