"""The README's first program runs as written, and Ctrl-C makes it leave the application cleanly."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

from demo.servers import LocalServer
from tests.helpers import wait_until
from tests.procs.harness import REPO

pytestmark = pytest.mark.server


def first_program() -> str:
    readme = (REPO / "README.md").read_text()
    use = readme[readme.index("## Use") :]
    match = re.search(r"```python\n(.*?)```", use, re.DOTALL)
    assert match is not None, "the README's Use section has no Python block"
    return match.group(1)


def test_the_readmes_first_program_runs_as_written_and_leaves_on_ctrl_c(moto_server: LocalServer) -> None:
    program = first_program()
    stream, app = re.search(r'Kinsumer\(\s*"([^"]+)", "([^"]+)"', program).groups()  # type: ignore[union-attr]
    kinesis, db = moto_server.client("kinesis"), moto_server.client("dynamodb")
    kinesis.create_stream(StreamName=stream, ShardCount=2)
    kinesis.get_waiter("stream_exists").wait(StreamName=stream, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "AWS_ENDPOINT_URL": moto_server.endpoint,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "readme",
        "AWS_SECRET_ACCESS_KEY": "readme",
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO
    )

    def joined() -> bool:
        try:
            return bool(db.scan(TableName=f"{app}_clients")["Items"])
        except db.exceptions.ResourceNotFoundException:
            return False  # its create_required_tables() is still at work

    try:
        wait_until(lambda: joined() or proc.poll() is not None, 60, "it joins")
        kinesis.put_records(
            StreamName=stream, Records=[{"Data": b"hello %d" % i, "PartitionKey": f"k{i}"} for i in range(3)]
        )
        assert proc.stdout is not None
        printed = sorted(proc.stdout.readline().strip() for _ in range(3))
        assert printed == ["b'hello 0'", "b'hello 1'", "b'hello 2'"]
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
        assert "KeyboardInterrupt" in stderr  # the block ended by Ctrl-C, which then ends the program
        assert db.scan(TableName=f"{app}_clients")["Items"] == []  # it left the application
        rows = db.scan(TableName=f"{app}_checkpoints")["Items"]
        assert rows and not any("OwnerID" in row for row in rows)  # and released its shards
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
        kinesis.delete_stream(StreamName=stream)
