"""The source on a Spark standalone cluster: a master and two 1-core workers on 127.0.0.1.

Each query runs in its own driver process (``cluster_driver``), as spark-submit would run it,
with Trigger.AvailableNow into a parquet sink; the workers have no AWS settings of their own.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow.parquet as pq
import pytest

from demo.aggregation import aggregated_entries
from demo.servers import LocalServer
from demo.spark_cluster import SparkCluster, cluster_env, standalone_cluster
from tests.conftest import REGION, unique
from tests.helpers import Producer, produce_per_shard, put_all, wait_until
from tests.reshard import new_stream, split_first, wait_arrived
from tests.spark.conftest import REPO
from tests.spark.test_source import assert_reshard_order
from tests.support.jvm import AUDIT_DIR, LEAN_JVM

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")  # only this module's tests use it: its JVMs stop once they have run
def cluster() -> Iterator[SparkCluster]:
    no_aws: dict[str, str | None] = {name: None for name in os.environ if name.startswith("AWS_")}
    with standalone_cluster(workers=2, cores=1, memory="1g", env={**no_aws, **LEAN_JVM}) as running:
        yield running


@pytest.fixture
def drivers() -> Iterator[list[subprocess.Popen[str]]]:
    """The drivers a test started: killed at its end if still running (after a failure or a timeout),
    so that none goes on reading into the next test's call log."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for driver in started:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()


def start_driver(
    drivers: list[subprocess.Popen[str]], cluster: SparkCluster, kinesis: LocalServer, dynamodb: LocalServer,
    stream: str, app: str, out: pathlib.Path, limit: int, call_log: pathlib.Path, options: dict[str, str] | None = None,
) -> subprocess.Popen[str]:  # fmt: skip
    env = cluster_env(
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGION,
            "PYTHONPATH": os.pathsep.join([str(AUDIT_DIR), str(REPO)]),
            "KINSUMER_TEST_CALL_LOG": str(call_log),
            **LEAN_JVM,
        }
    )
    args = [cluster.master_url, stream, kinesis.endpoint, dynamodb.endpoint, app, str(out / "ckpt"), str(out / "sink")]
    driver = subprocess.Popen(
        [sys.executable, "-m", "tests.spark.cluster_driver", *args, str(limit), json.dumps(options or {})],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    drivers.append(driver)
    return driver


def finish(driver: subprocess.Popen[str], timeout: float = 240) -> str:
    """Wait for the driver to succeed; its output."""
    try:
        output, _ = driver.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        driver.kill()
        output, _ = driver.communicate()
        raise AssertionError(f"the driver did not finish within {timeout:g} s:\n{output[-4000:]}") from None
    assert driver.returncode == 0, f"the driver failed:\n{output[-4000:]}"
    return output


def sink_rows(sink: pathlib.Path) -> list[dict[str, Any]]:
    """The rows the parquet sink committed, each with its batch (from the sink's _spark_metadata log).

    Every 10th batch's log (``9.compact``, ...) lists the files of all batches so far: a file
    belongs to the first batch whose log lists it.
    """
    rows, seen = [], set()
    logs = [p for p in (sink / "_spark_metadata").iterdir() if not p.name.startswith(".")]
    for entry in sorted(logs, key=lambda p: int(p.name.removesuffix(".compact"))):
        batch = int(entry.name.removesuffix(".compact"))
        for line in entry.read_text().splitlines()[1:]:
            path = json.loads(line)["path"].removeprefix("file://")
            if path in seen:
                continue
            seen.add(path)
            for row in pq.read_table(path).to_pylist():
                rows.append({**json.loads(row["data"]), "batch": batch, "shard": row["shard_id"],
                             "stream": row["stream"], "seq": int(row["sequence_number"]),
                             "sub": row["sub_sequence_number"]})  # fmt: skip
    return rows


def test_available_now_on_a_cluster_through_a_split_and_a_restart_that_adds_a_stream_is_exactly_once_in_key_order(
    cluster: SparkCluster, kinesalite: LocalServer, moto_server: LocalServer, tmp_path: pathlib.Path,
    call_log: pathlib.Path, drivers: list[subprocess.Popen[str]],
) -> None:  # fmt: skip
    """The restart reads a second stream too (its shard IDs are the first's): from its start, the first on."""
    kinesis = kinesalite.client("kinesis")
    stream, added, app = new_stream(kinesis, 2), new_stream(kinesis, 2), unique("app")
    producer = Producer(kinesis, stream, total=None, keys=12)
    other = Producer(kinesis, added, total=None, keys=12, first_id=100_000)
    producer.write_batch(300)
    other.write_batch(60)
    parent = split_first(kinesis, stream)
    producer.write_batch(300)
    wait_arrived(kinesis, stream)  # all of it is there when the availableNow query starts
    finish(start_driver(drivers, cluster, kinesalite, moto_server, stream, app, tmp_path, 100, call_log))
    first = sink_rows(tmp_path / "sink")
    assert sorted(r["id"] for r in first) == producer.produced  # all that was there, once
    producer.write_batch(200)
    other.write_batch(60)
    both = f"{stream},{added}"
    finish(start_driver(drivers, cluster, kinesalite, moto_server, both, app, tmp_path, 100, call_log))  # a restart
    rows = sink_rows(tmp_path / "sink")
    assert sorted(r["id"] for r in rows) == producer.produced + other.produced
    assert sorted(r["id"] for r in rows if r["stream"] == added) == other.produced
    assert min(r["batch"] for r in rows if r["stream"] == added) > max(r["batch"] for r in first)
    rows = [r for r in rows if r["stream"] == stream]
    shards = kinesis.list_shards(StreamName=stream)["Shards"]
    read = assert_reshard_order(rows, shards)
    assert parent in read and {s["ShardId"] for s in shards if s.get("ParentShardId") == parent} <= read


def test_fan_out_on_a_cluster_through_a_split_is_exactly_once_and_keeps_key_order(
    cluster: SparkCluster, kinesis_mock: LocalServer, moto_server: LocalServer, tmp_path: pathlib.Path,
    call_log: pathlib.Path, drivers: list[subprocess.Popen[str]],
) -> None:  # fmt: skip
    """The executors of two workers subscribe to their shards (kinesis-mock): AvailableNow, parents first."""
    kinesis = kinesis_mock.client("kinesis")
    stream, app = new_stream(kinesis, 2), unique("app")
    producer = Producer(kinesis, stream, total=None, keys=12)
    producer.write_batch(200)
    parent = split_first(kinesis, stream)
    producer.write_batch(200)
    mark = len(call_log.read_text().splitlines()) if call_log.exists() else 0
    fan_out = {"consumerName": "cluster-efo"}
    finish(start_driver(drivers, cluster, kinesis_mock, moto_server, stream, app, tmp_path, 1000, call_log, fan_out))
    rows = sink_rows(tmp_path / "sink")
    assert sorted(r["id"] for r in rows) == producer.produced  # all that was there, once
    shards = kinesis.list_shards(StreamName=stream)["Shards"]
    read = assert_reshard_order(rows, shards)
    assert parent in read and {s["ShardId"] for s in shards if s.get("ParentShardId") == parent} <= read
    calls = [line.split(" ") for line in call_log.read_text().splitlines()[mark:]]
    executors = {pid for pid, op, parent_cmd, _ in calls if op == "SubscribeToShard" and "pyspark.daemon" in parent_cmd}
    assert executors, "the executors did not read through subscriptions"
    assert not any(op == "GetRecords" and limit != "1" for _, op, _, limit in calls), "records were read by polling"


def test_an_executor_killed_mid_batch_on_a_cluster_loses_and_repeats_nothing(
    cluster: SparkCluster, moto_server: LocalServer, new_stream: Callable[[int], str], tmp_path: pathlib.Path,
    call_log: pathlib.Path, drivers: list[subprocess.Popen[str]],
) -> None:  # fmt: skip
    stream, app = new_stream(4), unique("app")
    kinesis = moto_server.client("kinesis")
    produced = produce_per_shard(kinesis, stream, 1000)
    users = [("kpl-key", json.dumps({"id": 100_000 + i}).encode(), None) for i in range(700)]
    put_all(kinesis, stream, list(aggregated_entries(users, per_record=50)))  # KPL aggregates too
    produced += [100_000 + i for i in range(len(users))]
    mark = len(call_log.read_text().splitlines()) if call_log.exists() else 0

    def executor_reads() -> int:
        lines = call_log.read_text().splitlines()[mark:] if call_log.exists() else []
        return sum(1 for line in lines if " GetRecords " in line and "pyspark.daemon" in line)

    driver = start_driver(drivers, cluster, moto_server, moto_server, stream, app, tmp_path, 120, call_log)
    wait_until(lambda: executor_reads() >= 12 or driver.poll() is not None, 180, "executors reading a later batch")
    assert driver.poll() is None, "the query ended before an executor could be killed"
    victim = cluster.executor_pids()[0]
    os.kill(victim, signal.SIGKILL)
    assert "Lost executor" in finish(driver)  # Spark saw it go during the query
    rows = sink_rows(tmp_path / "sink")
    assert sorted(r["id"] for r in rows) == sorted(produced)  # exactly once
    assert len({r["batch"] for r in rows}) >= 5
    for shard in {r["shard"] for r in rows}:
        positions = [(r["batch"], r["seq"], r["sub"] or 0) for r in rows if r["shard"] == shard]
        assert [p[1:] for p in sorted(positions)] == sorted(p[1:] for p in positions), shard
