"""Triggers, read limits, idle streams, options and batch reads: local[2] SparkSession, moto's server, kinesalite."""

from __future__ import annotations

import json
import pathlib
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import pytest

from demo.aggregation import aggregated_entries
from demo.servers import LocalServer
from tests.conftest import unique
from tests.helpers import produce_per_shard, put_all, wait_until
from tests.reshard import new_stream, split_first, wait_arrived
from tests.spark.test_source import BatchLog, assert_reshard_order, assert_shard_order, start_query, wait_for

pytestmark = pytest.mark.server

AVAILABLE_NOW = {"availableNow": True}


class ThenProduce(BatchLog):
    """A BatchLog that runs ``then`` once, after the first batch that held rows."""

    def __init__(self, then: Callable[[], object]) -> None:
        super().__init__()
        self._then: Callable[[], object] | None = then

    def __call__(self, frame: Any, batch_id: int) -> None:
        super().__call__(frame, batch_id)
        if self._then is not None and self.attempts[batch_id][-1]:
            then, self._then = self._then, None
            then()


def run_to_end(query: Any, timeout: float = 120) -> None:
    """Wait for an availableNow query to stop by itself."""
    try:
        assert query.awaitTermination(timeout), "the availableNow query did not stop by itself"
    finally:
        query.stop()
    assert query.exception() is None


def test_available_now_reads_what_was_there_at_the_start_in_several_batches_then_stops_also_after_a_restart(
    spark: Any, moto_server: LocalServer, new_stream: Callable[[int], str], tmp_path: pathlib.Path
) -> None:
    stream, app = new_stream(3), unique("app")
    kinesis = moto_server.client("kinesis")
    first = produce_per_shard(kinesis, stream, 100)
    later: list[int] = []
    sink = ThenProduce(lambda: later.extend(produce_per_shard(kinesis, stream, 20, first_id=len(first))))
    checkpoint = tmp_path / "ckpt"
    run_to_end(start_query(spark, moto_server, moto_server, stream, app, checkpoint, sink, 40, trigger=AVAILABLE_NOW))
    assert later, "records were produced while the query ran"
    assert sorted(sink.ids()) == first  # everything present at the start, nothing that came later
    assert len([b for b in sink.attempts.values() if b[-1]]) >= 3  # 100 per shard at 40 per shard per batch
    assert_shard_order(sink.final_rows())

    again = BatchLog()
    run_to_end(start_query(spark, moto_server, moto_server, stream, app, checkpoint, again, 40, trigger=AVAILABLE_NOW))
    assert sorted(again.ids()) == sorted(later)  # a restart: what came since, once


def test_max_records_per_trigger_bounds_every_batch_over_all_shards(
    spark: Any, moto_server: LocalServer, new_stream: Callable[[int], str], tmp_path: pathlib.Path
) -> None:
    stream, app = new_stream(4), unique("app")
    produced = produce_per_shard(moto_server.client("kinesis"), stream, 60)
    sink = BatchLog()
    options = {"maxRecordsPerTrigger": "50"}
    query = start_query(spark, moto_server, moto_server, stream, app, tmp_path / "ckpt", sink, 1000, options)
    try:
        wait_for(query, lambda: len(sink.ids()) >= len(produced), "every record")
    finally:
        query.stop()
    assert sorted(sink.ids()) == produced
    sizes = [len(attempts[-1]) for attempts in sink.attempts.values()]
    assert max(sizes) <= 50 and sum(sizes) == 240
    assert_shard_order(sink.final_rows())


def test_an_idle_stream_is_probed_and_runs_no_batch_until_a_record_comes(
    spark: Any,
    moto_server: LocalServer,
    new_stream: Callable[[int], str],
    tmp_path: pathlib.Path,
    call_log: pathlib.Path,
) -> None:
    stream, app = new_stream(2), unique("app")
    kinesis = moto_server.client("kinesis")
    produced = produce_per_shard(kinesis, stream, 10)
    sink = BatchLog()
    options = {"idleBatchInterval": "0.2"}
    trigger = {"processingTime": "50 milliseconds"}
    query = start_query(spark, moto_server, moto_server, stream, app, tmp_path / "ckpt", sink, 100, options, trigger)

    def calls_since(mark: int) -> list[list[str]]:
        return [line.split(" ") for line in call_log.read_text().splitlines()[mark:]]

    try:
        wait_for(query, lambda: len(sink.ids()) >= len(produced), "every record")
        wait_for(query, lambda: query.lastProgress is not None, "a progress report")
        batches, mark = len(sink.attempts), len(call_log.read_text().splitlines())

        def probes() -> int:
            return sum(1 for _, op, parent, limit in calls_since(mark) if op == "GetRecords" and limit == "1")

        wait_for(query, lambda: probes() >= 10, "ten probes of the idle shards")
        assert len(sink.attempts) == batches, "a batch ran while the stream was idle"
        executor_calls = [op for _, op, parent, _ in calls_since(mark) if "pyspark.daemon" in parent]
        assert executor_calls == [], "executors were busy while the stream was idle"
        put_all(kinesis, stream, [{"Data": json.dumps({"id": 10_000}).encode(), "PartitionKey": "k"}])
        wait_for(query, lambda: 10_000 in sink.ids(), "the record that came")
    finally:
        query.stop()
    assert sorted(sink.ids()) == [*produced, 10_000]


def test_a_ledger_beside_the_checkpoint_replays_a_failed_batch_with_identical_rows_and_needs_no_table(
    spark: Any, moto_server: LocalServer, new_stream: Callable[[int], str], tmp_path: pathlib.Path
) -> None:
    stream, app = new_stream(2), unique("app")
    kinesis = moto_server.client("kinesis")
    produced = produce_per_shard(kinesis, stream, 150)
    sink = BatchLog(fail_batch=1)
    options = {"metadataPath": str(tmp_path / "ledger")}
    query = start_query(spark, moto_server, moto_server, stream, app, tmp_path / "ckpt", sink, 100, options)
    wait_until(lambda: query.exception() is not None, 120, "the sink to fail", poll=0.2)
    query.stop()
    failed = sink.attempts[1][0]
    produced += produce_per_shard(kinesis, stream, 50, first_id=len(produced))  # a live re-read would differ
    query = start_query(spark, moto_server, moto_server, stream, app, tmp_path / "ckpt", sink, 100, options)
    try:
        wait_for(query, lambda: len(sink.ids()) >= len(produced), "every record after the restart")
    finally:
        query.stop()
    key = lambda row: (row["shard"], row["seq"])  # noqa: E731
    assert sorted(sink.attempts[1][1], key=key) == sorted(failed, key=key)
    assert sorted(sink.ids()) == sorted(produced)
    assert any((tmp_path / "ledger").rglob("*.json")), "the ledger is at the path"
    assert not [t for t in moto_server.client("dynamodb").list_tables()["TableNames"] if stream in t]


def test_a_misspelled_option_fails_at_load_with_the_fix_in_the_message(spark: Any) -> None:
    reader = spark.readStream.format("kinsumer").option("streamName", "s").option("maxRecordPerShard", "5")
    with pytest.raises(Exception, match="did you mean maxRecordsPerShard") as info:
        reader.load()
    message = str(info.value)
    assert "UnboundLocalError" not in message
    # a short traceback: only the source's own frames come before the message
    assert message.count('File "') == message.count("kinsumer/spark/source.py") <= 2, message


def test_a_missing_stream_fails_the_query_and_leaves_no_table_behind(
    spark: Any, moto_server: LocalServer, tmp_path: pathlib.Path
) -> None:
    app = unique("app")
    query = start_query(spark, moto_server, moto_server, unique("missing"), app, tmp_path / "ckpt", BatchLog())
    wait_until(lambda: query.exception() is not None, 60, "the query to fail", poll=0.2)
    query.stop()
    assert "does not exist" in str(query.exception())
    assert f"{app}_metadata" not in moto_server.client("dynamodb").list_tables()["TableNames"]


def test_a_batch_read_returns_what_the_stream_holds(
    spark: Any, moto_server: LocalServer, new_stream: Callable[[int], str]
) -> None:
    stream = new_stream(3)
    produced = produce_per_shard(moto_server.client("kinesis"), stream, 30)
    frame = (
        spark.read.format("kinsumer")
        .option("kinesis.streamName", stream)
        .option("kinesis.endpointUrl", moto_server.endpoint)
        .option("kinesis.startingPosition", "EARLIEST")
        .option("region", "us-east-1")
        .load()
    )
    rows = frame.select("data", "shard_id", "sequence_number").collect()
    assert sorted(json.loads(r.data)["id"] for r in rows) == produced
    assert len({r.shard_id for r in rows}) == 3


class AggregatesWriter:
    """Writes user records as KPL aggregates of 7, each aggregate under one of 40 keys, counted per key."""

    def __init__(self, kinesis: Any, stream: str) -> None:
        self.kinesis, self.stream = kinesis, stream
        self.produced: list[int] = []
        self.counters: dict[str, int] = defaultdict(int)

    def write(self, count: int) -> None:
        users = []
        for rid in range(len(self.produced), len(self.produced) + count):
            key = f"key-{(rid // 7) % 40}"
            users.append((key, json.dumps({"id": rid, "key": key, "counter": self.counters[key]}).encode(), None))
            self.counters[key] += 1
        put_all(self.kinesis, self.stream, list(aggregated_entries(users, per_record=7)))
        self.produced.extend(range(len(self.produced), len(self.produced) + count))


@pytest.mark.parametrize("trigger", ["availableNow", "processingTime"])
def test_kpl_aggregates_then_a_split_are_read_in_full_after_a_restart(
    trigger: str, spark: Any, kinesalite: LocalServer, moto_server: LocalServer, tmp_path: pathlib.Path
) -> None:
    """Batches end inside aggregates, the first run ends at the tip (after an aggregate's last user record).

    Records written since (to the parent before a split, then to its children) all arrive after a restart.
    With processingTime, a shard found idle is not probed again for 10 minutes: one wrong answer of the
    probe would keep its records out of the test's reach.
    """
    kinesis = kinesalite.client("kinesis")
    stream, app = new_stream(kinesis, 4), unique("app")
    writer = AggregatesWriter(kinesis, stream)
    writer.write(2800)  # 400 aggregates, about 700 user records a shard
    sink, checkpoint = BatchLog(), tmp_path / "ckpt"
    options = {"idleBatchInterval": "600"}
    chosen = AVAILABLE_NOW if trigger == "availableNow" else {"processingTime": "200 milliseconds"}

    def run(expected: int) -> None:
        query = start_query(spark, kinesalite, moto_server, stream, app, checkpoint, sink, 300, options, chosen)
        if trigger == "availableNow":
            run_to_end(query)
            return
        try:
            wait_for(query, lambda: len(sink.ids()) >= expected, f"{expected} records")
        finally:
            query.stop()

    run(2800)
    assert sorted(sink.ids()) == writer.produced
    writer.write(700)
    parent = split_first(kinesis, stream)
    writer.write(700)
    wait_arrived(kinesis, stream)  # all of it is there at the restart, for availableNow
    run(4200)
    rows = sink.final_rows()
    assert sorted(sink.ids()) == writer.produced  # each once
    assert_shard_order(rows)
    listing = kinesis.list_shards(StreamName=stream)["Shards"]
    children = {s["ShardId"] for s in listing if s.get("ParentShardId") == parent}
    assert {parent, *children} <= assert_reshard_order(rows, listing)  # per-key order; children after the parent
    batches_of_aggregate = defaultdict(set)
    for row in rows:
        batches_of_aggregate[row["seq"]].add(row["batch"])
    assert any(len(batches) > 1 for batches in batches_of_aggregate.values()), "no batch ended inside an aggregate"


def test_each_batch_progress_shows_how_far_behind_the_tip_the_query_is(
    spark: Any, moto_server: LocalServer, new_stream: Callable[[int], str], tmp_path: pathlib.Path
) -> None:
    """The largest MillisBehindLatest of the last batch's reads, as the progress's latestOffset."""
    stream, app = new_stream(2), unique("app")
    kinesis = moto_server.client("kinesis")
    first = produce_per_shard(kinesis, stream, 100)
    written = time.time()
    wait_until(lambda: time.time() > written + 0.5, 5, "the clock to pass half a second")
    later = produce_per_shard(kinesis, stream, 100, first_id=len(first))  # 0.5 s after the first ones
    sink = BatchLog()
    query = start_query(spark, moto_server, moto_server, stream, app, tmp_path / "ckpt", sink, 100)
    try:
        wait_for(query, lambda: len(sink.ids()) >= len(first) + len(later), "every record")
        wait_for(query, lambda: any(_lag(p) for p in query.recentProgress), "a progress with the lag")
        # a batch's progress shows the batch before it: one more record makes a batch after the one at the tip
        last = produce_per_shard(kinesis, stream, 1, first_id=len(first) + len(later))
        wait_for(query, lambda: len(sink.ids()) >= len(first) + len(later) + len(last), "the last records")
        wait_for(query, lambda: any((_lag(p) or {}).get("shardsAtTip") == 2 for p in query.recentProgress), "the tip")
    finally:
        query.stop()
    lags = [lag for p in query.recentProgress if (lag := _lag(p))]
    after_first = [lag for lag in lags if lag["batch"] == 0]
    assert after_first and after_first[0]["millisBehindLatest"] >= 500  # batch 0 ended 100 records before the tip
    assert after_first[0]["shard"].startswith("shardId-") and after_first[0]["stream"] == stream
    assert (after_first[0]["records"], after_first[0]["shardsRead"], after_first[0]["shardsAtTip"]) == (200, 2, 0)
    per_batch = {lag["batch"]: lag for lag in lags}
    rows_per_batch = Counter(row["batch"] for row in sink.final_rows())
    assert all(lag["records"] == rows_per_batch[batch] for batch, lag in per_batch.items())  # each batch's rows


def _lag(progress: dict[str, Any]) -> dict[str, Any] | None:
    latest = progress["sources"][0].get("latestOffset")
    return json.loads(latest) if latest else None
