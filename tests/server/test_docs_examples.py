"""Every example of README.md and docs/ runs as written: the docs are the test (tests/docs_blocks.py says how a
block is marked).

Each example runs as a program of its own (``python example.py`` in a directory of its own), against a moto
server on 127.0.0.1 emptied before each (the examples name the same streams and applications), with what a user's shell
would hold: ``AWS_ENDPOINT_URL``, made-up credentials and a region. Its mark's setup is made first: each
stream with 2 shards and its records as ``kinsumer produce`` writes them (JSON ``{"id", "key", "ts"}``), each
SQS queue, each S3 bucket, the application's tables if it says so. An example with ``until=handled`` runs until the
application has checkpointed every record of every stream, then gets Ctrl-C and must leave the application (no
client row, no shard owned) with nothing on its standard error but the KeyboardInterrupt; any other example
must end by itself, with status 0, having printed each record of its streams. Identical examples (README.md
repeats some of the guides') run once.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from demo.servers import LocalServer, moto_server
from kinsumer.cli.produce import make_record
from kinsumer.status import read_status
from tests.docs_blocks import REPO, Block, all_blocks
from tests.helpers import wait_until
from tests.support.jvm import AUDIT_DIR, LEAN_JVM

pytestmark = pytest.mark.server

#: How long an example may take: a Spark one starts a JVM and a local session first.
DEADLINE = 90.0
SPARK_DEADLINE = 240.0


def examples() -> list[Any]:
    """The runnable blocks, one per distinct program, named after every place it is shown."""
    by_program: dict[tuple[str, str], list[Block]] = {}
    for block in all_blocks():
        if block.kind == "example":
            by_program.setdefault((block.code, repr(sorted(block.options.items()))), []).append(block)
    params = []
    for same in by_program.values():
        marks = [pytest.mark.xdist_group("spark"), pytest.mark.spark] if "spark" in same[0].options else []
        params.append(pytest.param(same[0], id=" = ".join(block.name for block in same), marks=marks))
    return params


@pytest.fixture(scope="module")
def module_server() -> Iterator[LocalServer]:
    with moto_server() as started:
        yield started


@pytest.fixture
def server(module_server: LocalServer) -> LocalServer:
    """The module's moto server, emptied (moto's reset): an example finds only what its own mark sets up."""
    request = urllib.request.Request(f"{module_server.endpoint}/moto-api/reset", method="POST")
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=30) as answer:
        assert answer.status == 200
    return module_server


@pytest.mark.parametrize("block", examples())
def test_the_example_runs_as_written(block: Block, server: LocalServer, tmp_path: pathlib.Path) -> None:
    ends = set_up(block, server)
    run_example(block, server, tmp_path, ends)


def set_up(block: Block, server: LocalServer) -> dict[str, dict[str, str]]:
    """The streams, their records, the queues and the buckets of ``block``'s mark; each stream's last sequence
    number per shard."""
    kinesis, sqs = server.client("kinesis"), server.client("sqs")
    ends: dict[str, dict[str, str]] = {}
    for stream in block.streams:
        kinesis.create_stream(StreamName=stream, ShardCount=2)
        kinesis.get_waiter("stream_exists").wait(StreamName=stream, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})
        made = [make_record(i, keys=100, size=100) for i in range(block.records)]  # kinsumer produce's defaults
        entries = [{"Data": data, "PartitionKey": key} for data, key in made]
        put = kinesis.put_records(StreamName=stream, Records=entries)
        assert put["FailedRecordCount"] == 0
        last: dict[str, str] = {}
        for entry in put["Records"]:
            shard, seq = entry["ShardId"], entry["SequenceNumber"]
            if int(seq) > int(last.get(shard, "0")):
                last[shard] = seq
        ends[stream] = last
    for queue in block.queues:
        sqs.create_queue(QueueName=queue)
    for bucket in block.buckets:
        server.client("s3").create_bucket(Bucket=bucket)
    if "tables" in block.options:  # as an administrator makes them
        command = [sys.executable, "-m", "kinsumer", "create-tables", block.options["app"]]
        made = subprocess.run(command, env=environment(server), capture_output=True, text=True, timeout=60, check=False)
        assert made.returncode == 0, made.stderr
    return ends


def environment(server: LocalServer, spark: bool = False) -> dict[str, str]:
    """A user's shell pointed at the server: no AWS setting nor hook of the test's (the Spark tests' call and
    warning logs), kinsumer from this checkout; for a Spark example, the JVM settings of the Spark tests (C1
    only, the serial collector: less CPU at start-up) and their Python processes' path (AUDIT_DIR: Spark's
    Python processes import pyspark compiled)."""
    kept = {key: value for key, value in os.environ.items() if not key.startswith(("AWS_", "KINSUMER_TEST_"))}
    return {
        **kept,
        **(LEAN_JVM if spark else {}),
        "PYTHONPATH": os.pathsep.join([str(AUDIT_DIR), str(REPO)]) if spark else str(REPO),
        "AWS_ENDPOINT_URL": server.endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }


def run_example(block: Block, server: LocalServer, directory: pathlib.Path, ends: dict[str, dict[str, str]]) -> None:
    """Runs ``block`` as ``example.py`` in ``directory`` and checks how it ends (AssertionError naming the
    block and carrying its output otherwise)."""
    (directory / "example.py").write_text(block.code)
    out, err = directory / "stdout", directory / "stderr"
    deadline = SPARK_DEADLINE if "spark" in block.options else DEADLINE
    with out.open("w") as stdout, err.open("w") as stderr:
        env = environment(server, spark="spark" in block.options)
        proc = subprocess.Popen([sys.executable, "example.py"], cwd=directory, env=env, stdout=stdout, stderr=stderr,
                                text=True)  # fmt: skip
    try:
        if block.until == "handled":
            db, kinesis = server.client("dynamodb"), server.client("kinesis")
            app = block.options["app"]
            wait_until(lambda: proc.poll() is not None or all_handled(kinesis, db, app, ends), deadline,
                       f"{block.name}: {app} checkpoints every record")  # fmt: skip
            assert proc.poll() is None, f"{block.name} ended before Ctrl-C:\n{err.read_text()}"
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=30)
            errors = err.read_text()
            assert proc.returncode == 0 or errors.rstrip().endswith("KeyboardInterrupt"), f"{block.name}:\n{errors}"
            assert db.scan(TableName=f"{app}_clients")["Items"] == [], f"{block.name} did not leave {app}"
            owned = [row for row in db.scan(TableName=f"{app}_checkpoints")["Items"] if "OwnerID" in row]
            assert owned == [], f"{block.name} left shards owned"
        else:
            proc.wait(timeout=deadline)
            assert proc.returncode == 0, f"{block.name} exited {proc.returncode}:\n{err.read_text()[-4000:]}"
            printed = out.read_text()
            missed = [i for i in range(block.records) if block.streams and f'"id": {i},' not in printed]
            assert missed == [], f"{block.name} ended without printing the records {missed}:\n{printed[-4000:]}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def all_handled(kinesis: Any, db: Any, app: str, ends: dict[str, dict[str, str]]) -> bool:
    """``app`` has checkpointed each shard of each stream at its last record."""
    try:
        for stream, last in ends.items():
            shards = {row.shard_id: row.checkpoint for row in read_status(kinesis, db, stream, app, 30).shards}
            if any(shards.get(shard) != seq for shard, seq in last.items()):
                return False
    except Exception:  # the example has not made its tables yet, or is making them
        return False
    return True


def test_a_broken_example_fails_the_test(server: LocalServer, tmp_path: pathlib.Path) -> None:
    """The runner is no formality: an example of the docs with one mistake in it (the stream's name
    misspelled) fails as the suite's test would, naming the block and carrying its error."""
    block = next(b for b in all_blocks() if b.page == "docs/failing-records.md" and b.kind == "example")
    broken = Block(block.page, block.line, block.language, block.code.replace('"clicks"', '"clicsk"'), block.kind,
                   options=block.options)  # fmt: skip
    ends = set_up(broken, server)
    with pytest.raises(AssertionError, match=r"docs/failing-records\.md:\d+ ended before Ctrl-C") as failed:
        run_example(broken, server, tmp_path, ends)
    assert "clicsk" in str(failed.value)  # the program's own error: the stream it could not find
