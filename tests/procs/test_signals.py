"""Ctrl-C reaches a caller blocked in next(), whichever thread the operating system hands it to."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from demo.servers import LocalServer
from kinsumer import Kinsumer
from tests.conftest import unique
from tests.procs.harness import REPO

pytestmark = pytest.mark.server


def test_sigint_handed_to_another_thread_interrupts_a_next_without_timeout(moto_server: LocalServer) -> None:
    kinesis = moto_server.client("kinesis")
    stream, app = unique("stream"), unique("app")
    kinesis.create_stream(StreamName=stream, ShardCount=2)
    kinesis.get_waiter("stream_exists").wait(StreamName=stream, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})
    Kinsumer(stream, app, "admin", kinesis=kinesis, dynamodb=moto_server.client("dynamodb")).create_required_tables()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.procs.blocked_next", moto_server.endpoint, stream, app],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONFAULTHANDLER": "1"},
    )  # fmt: skip
    try:
        try:
            _, stderr = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
            _, stderr = proc.communicate(timeout=10)
            pytest.fail(f"next() never saw the SIGINT; the stacks:\n{stderr[-6000:]}")
        assert "signalling" in stderr and "interrupted" in stderr, stderr[-3000:]
        assert proc.returncode == 130
        assert moto_server.client("dynamodb").scan(TableName=f"{app}_clients")["Items"] == []  # it left cleanly
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)


FAILING_LOOP = """
import sys
from demo import servers
from kinsumer import Config, Kinsumer
endpoint, stream, app = sys.argv[1:4]
k = Kinsumer(stream, app, "failing", Config(shard_check_frequency=0.5, client_record_max_age=2.0),
             kinesis=servers.client(endpoint, "kinesis"), dynamodb=servers.client(endpoint, "dynamodb"))
k.run()
for record in k:  # no with block, no stop(): the handler fails on the first record
    raise RuntimeError("the handler failed on " + record.data.decode())
"""


def test_a_program_that_ends_without_stop_still_leaves_and_its_record_is_delivered_again(
    moto_server: LocalServer,
) -> None:
    kinesis, db = moto_server.client("kinesis"), moto_server.client("dynamodb")
    stream, app = unique("stream"), unique("app")
    kinesis.create_stream(StreamName=stream, ShardCount=1)
    kinesis.get_waiter("stream_exists").wait(StreamName=stream, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})
    Kinsumer(stream, app, "admin", kinesis=kinesis, dynamodb=db).create_required_tables()
    kinesis.put_record(StreamName=stream, Data=b"r1", PartitionKey="k")
    done = subprocess.run(
        [sys.executable, "-c", FAILING_LOOP, moto_server.endpoint, stream, app],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1 and "the handler failed on r1" in done.stderr
    assert db.scan(TableName=f"{app}_clients")["Items"] == []  # it left at exit: no wait for its heartbeat to age
    rows = db.scan(TableName=f"{app}_checkpoints")["Items"]
    assert rows and not any("OwnerID" in row or "SequenceNumber" in row for row in rows)  # released, r1 not counted
    with Kinsumer(stream, app, "next", kinesis=kinesis, dynamodb=db) as again:
        assert again.next(timeout=30) == b"r1"
