"""minRecordsPerTrigger and maxTriggerDelay: local[2] SparkSession, moto's server.

A query's first look at the stream never waits (as Kafka's first trigger), so each test lets a
first batch run, then shows how the next one waits.
"""

from __future__ import annotations

import datetime as dt
import json
import pathlib
import time
from collections.abc import Callable
from typing import Any

import pytest

from demo.servers import LocalServer
from tests.conftest import unique
from tests.helpers import put_all
from tests.spark.test_source import BatchLog, start_query, wait_for
from tests.spark.test_triggers import AVAILABLE_NOW, run_to_end

pytestmark = pytest.mark.server


def put(kinesis: Any, stream: str, *ids: int) -> float:
    """Write one record per id (one PutRecords each); the time (epoch s) the last one was in."""
    for rid in ids:
        put_all(kinesis, stream, [{"Data": json.dumps({"id": rid}).encode(), "PartitionKey": f"k{rid}"}])
    return time.time()


def reports_of(query: Any, batch: int) -> list[dict[str, Any]]:
    """The progress reports of the trigger that ran ``batch`` with records.

    An idle trigger's report carries the id of the batch to come (Spark counts a batch up only once it
    ran), so a report with ``batchId == batch`` alone may come from before that batch ran.
    """
    return [p for p in query.recentProgress if p["batchId"] == batch and p["numInputRows"]]


def started_at(query: Any, batch: int) -> float:
    """When the trigger that planned ``batch`` started (epoch s), from the query's progress."""
    [report] = reports_of(query, batch)
    stamp = report["timestamp"]
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_a_batch_waits_until_min_records_per_trigger_records_are_there(
    spark: Any,
    moto_server: LocalServer,
    new_stream: Callable[[int], str],
    tmp_path: pathlib.Path,
    call_log: pathlib.Path,
) -> None:
    stream, app = new_stream(2), unique("app")
    kinesis = moto_server.client("kinesis")
    put(kinesis, stream, 0)
    sink = BatchLog()
    options = {"minRecordsPerTrigger": "5", "maxTriggerDelay": "1h", "idleBatchInterval": "0.2"}
    query = start_query(spark, moto_server, moto_server, stream, app, tmp_path / "ckpt", sink, 1000, options)

    def driver_reads() -> int:  # GetRecords of the driver (probes and counts): not of the executors' workers
        return sum(1 for line in call_log.read_text().splitlines() if " GetRecords " in line and "daemon" not in line)

    try:
        wait_for(query, lambda: sink.ids() == [0], "the first batch (a run's first look never waits)")
        for rid in range(1, 5):  # one at a time: 1, 2, 3, 4 records waiting; the driver looks after each
            put(kinesis, stream, rid)
            seen = driver_reads()
            wait_for(query, lambda seen=seen: driver_reads() >= seen + 3, f"the driver to look at record {rid}")
        assert sorted(sink.attempts) == [0], "a batch ran with fewer than minRecordsPerTrigger records"
        put(kinesis, stream, 5)
        wait_for(query, lambda: len(sink.ids()) == 6, "the batch of five")
    finally:
        query.stop()
    assert sorted(sink.attempts) == [0, 1]
    assert sorted(row["id"] for row in sink.attempts[1][-1]) == [1, 2, 3, 4, 5]


def test_with_fewer_records_a_batch_runs_once_max_trigger_delay_has_passed_since_the_last(
    spark: Any, moto_server: LocalServer, new_stream: Callable[[int], str], tmp_path: pathlib.Path
) -> None:
    delay = 4.0
    stream, app = new_stream(1), unique("app")
    kinesis = moto_server.client("kinesis")
    put(kinesis, stream, 0)
    sink = BatchLog()
    options = {"minRecordsPerTrigger": "100", "maxTriggerDelay": f"{delay:g}s", "idleBatchInterval": "0.2"}
    query = start_query(spark, moto_server, moto_server, stream, app, tmp_path / "ckpt", sink, 1000, options)
    try:
        wait_for(query, lambda: sink.ids() == [0], "the first batch")
        put(kinesis, stream, 1)
        wait_for(query, lambda: sink.ids() == [0, 1], "a batch of one record, after the delay")
        wait_for(query, lambda: bool(reports_of(query, 1)), "batch 1's progress")
        put_at = put(kinesis, stream, 2)  # at once after batch 1: long before the delay is over
        wait_for(query, lambda: sink.ids() == [0, 1, 2], "the next batch of one record, after the delay")
        wait_for(query, lambda: bool(reports_of(query, 2)), "batch 2's progress")
    finally:
        query.stop()
    assert sorted(sink.attempts) == [0, 1, 2]
    first, second, third = (started_at(query, batch) for batch in (0, 1, 2))
    # The delay counts from where the driver planned a batch, a little after its trigger started (listing
    # the shards, probing): a trigger starts at most that little before the delay is over.
    assert second - first >= delay - 0.5 and third - second >= delay - 0.5, (first, second, third)
    assert put_at < second + delay - 2, "the record came long before the delay was over: at once would be too early"


def test_available_now_ignores_min_records_per_trigger_and_reads_everything_there(
    spark: Any, moto_server: LocalServer, new_stream: Callable[[int], str], tmp_path: pathlib.Path
) -> None:
    stream, app = new_stream(1), unique("app")
    kinesis = moto_server.client("kinesis")
    put(kinesis, stream, *range(5))
    sink = BatchLog()
    # batches of 2: the last holds 1, fewer than the minimum; waiting would end the query (Spark stops an
    # availableNow query at its first trigger without a batch) with that record unread
    options = {"minRecordsPerTrigger": "2", "maxRecordsPerTrigger": "2", "maxTriggerDelay": "1h"}
    run_to_end(start_query(spark, moto_server, moto_server, stream, app, tmp_path / "ckpt", sink, 1000, options,
                           trigger=AVAILABLE_NOW))  # fmt: skip
    assert sorted(sink.ids()) == [0, 1, 2, 3, 4]
    assert [len(sink.attempts[b][-1]) for b in sorted(sink.attempts)] == [2, 2, 1]
