"""The Spark source's records/s and CPU on local[2] and on a standalone cluster, against one kinsumer client.

Each run starts a new availableNow query (a new checkpoint, so it reads from TRIM_HORIZON)
into the noop sink, from ``start()`` to its end, and measures the CPU of Spark's Python
workers over it (a warm session: the bench runs one query first).
:func:`batch_cost` measures what a micro-batch costs whatever it holds: batches of one
record per shard. :func:`spark_floor` measures what any Python streaming source pays before its
first rows: a source of one row, from ``start()`` to its batch counted.
"""

from __future__ import annotations

import os
import pathlib
import tempfile
import threading
import time
import uuid
from typing import Any

import attrs

from demo import servers

from .throughput import Filled

__all__ = ["SparkMeasure", "batch_cost", "python_workers_cpu", "spark_floor", "spark_session", "spark_source"]

DEADLINE = 600.0


@attrs.frozen
class SparkMeasure:
    total: float  # records/s from start() to the query's end
    # CPU-seconds of Spark's Python workers per 100,000 rows: the executors' reads (the reader's driver side
    # runs in a process Spark starts for each query, not a worker: its cost shows in the time, not here)
    worker_cpu: float


def spark_session() -> Any:
    from kinsumer.spark import local_session  # noqa: PLC0415 - pyspark only when needed

    return local_session("kinsumer-bench")


AWS_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")


def python_workers_cpu() -> float:
    """CPU-seconds so far of every Python worker Spark runs on this machine (``pyspark.daemon`` and its forks).

    A worker that exited counts through its daemon (which waits for it). Read from /proc: Linux only.
    """
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            if b"pyspark.daemon" not in (stat.parent / "cmdline").read_bytes():
                continue
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended meanwhile
            continue
        total += sum(int(value) for value in fields[11:15]) / tick  # utime, stime, cutime, cstime
    return total


def spark_source(spark: Any, filled: Filled, options: dict[str, str] | None = None) -> SparkMeasure:
    """Read the whole stream with an availableNow query into the noop sink (default: the source's defaults)."""
    frame = _frame(spark, filled, options or {})
    with tempfile.TemporaryDirectory() as checkpoint:
        cpu, started = python_workers_cpu(), time.perf_counter()
        query = frame.writeStream.format("noop").option("checkpointLocation", checkpoint)
        query = query.trigger(availableNow=True).start()
        if not query.awaitTermination(DEADLINE) or query.exception() is not None:
            query.stop()
            raise RuntimeError(f"the Spark query did not read the stream in {DEADLINE:g} s: {query.exception()}")
        seconds, cpu = time.perf_counter() - started, python_workers_cpu() - cpu
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    rows = sum(p["numInputRows"] for p in progress)
    if rows != filled.total:
        raise RuntimeError(f"the Spark query read {rows} rows of {filled.total}")
    return SparkMeasure(filled.total / seconds, cpu / rows * 100_000)


def batch_cost(spark: Any, filled: Filled, batches: int = 12) -> float:
    """Milliseconds a micro-batch of one record per shard takes (the median, the first batch left out)."""
    _, progress = _run(spark, filled, {"maxRecordsPerShard": "1"}, lambda counted: len(counted) > batches)
    times = sorted(p["durationMs"]["triggerExecution"] for p in progress[1:] if p["numInputRows"] > 0)
    return float(times[len(times) // 2])


def spark_floor(spark: Any) -> float:
    """Seconds from ``start()`` to the first batch counted, for a Python streaming source of one row."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition  # noqa: PLC0415

    class OneRowReader(DataSourceStreamReader):  # defined here: Spark's workers get it by value
        def initialOffset(self) -> dict[str, int]:
            return {"row": 0}

        def latestOffset(self, start: Any = None, limit: Any = None) -> dict[str, int]:
            return {"row": 1}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
            return [InputPartition(0)] if start != end else []

        def read(self, partition: InputPartition) -> Any:
            yield (1,)

    class OneRow(DataSource):
        @classmethod
        def name(cls) -> str:
            return "kinsumer-bench-one-row"

        def schema(self) -> str:
            return "row int"

        def streamReader(self, schema: Any) -> OneRowReader:
            return OneRowReader()

    spark.dataSource.register(OneRow)
    counted = threading.Event()

    def count(df: Any, batch_id: int) -> None:
        if df.count():
            counted.set()

    frame = spark.readStream.format(OneRow.name()).load()
    with tempfile.TemporaryDirectory() as checkpoint:
        started = time.perf_counter()
        query = frame.writeStream.foreachBatch(count).option("checkpointLocation", checkpoint).start()
        try:
            if not counted.wait(DEADLINE):
                raise RuntimeError(f"the one-row source counted nothing in {DEADLINE:g} s: {query.exception()}")
            return time.perf_counter() - started
        finally:
            query.stop()


def _frame(spark: Any, filled: Filled, options: dict[str, str]) -> Any:
    return (
        spark.readStream.format("kinsumer")
        .option("streamName", filled.stream)
        .option("endpointUrl", filled.server.endpoint)
        .option("dynamodbEndpointUrl", filled.dynamodb.endpoint)
        .option("region", servers.REGION)
        .option("applicationName", f"bench-{uuid.uuid4().hex[:8]}")
        .options(**options)
        .load()
    )


def _run(spark: Any, filled: Filled, options: dict[str, str], finished: Any) -> tuple[float, list[dict[str, Any]]]:
    counted: list[int] = []
    done = threading.Event()

    def sink(df: Any, batch_id: int) -> None:
        counted.append(df.count())
        if finished(counted):
            done.set()

    frame = _frame(spark, filled, options)
    with tempfile.TemporaryDirectory() as checkpoint:
        started = time.perf_counter()
        query = frame.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint).start()
        try:
            deadline = started + DEADLINE
            while not done.wait(0.2):
                if not query.isActive:
                    raise RuntimeError(f"the Spark query failed: {query.exception()}")
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"the Spark query counted {sum(counted)} of {filled.total} in {DEADLINE:g} s")
            seconds = time.perf_counter() - started
            progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
        finally:
            query.stop()
    return seconds, progress
