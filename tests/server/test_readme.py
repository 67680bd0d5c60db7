"""The README's first program and its asyncio service, the first program of docs/index.md and the service
of docs/asyncio.md, run as written on a new application, and Ctrl-C makes them leave the application
cleanly."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from demo.servers import LocalServer
from tests.helpers import wait_until
from tests.procs.harness import REPO

pytestmark = pytest.mark.server


def first_program(section: str = "## Use", page: str = "README.md") -> str:
    readme = (REPO / page).read_text()
    use = readme[readme.index(section) :]
    match = re.search(r"```python\n(.*?)```", use, re.DOTALL)
    assert match is not None, f"the {page}'s {section} section has no Python block"
    return match.group(1)


def names(program: str) -> tuple[str, str]:
    """The stream and the application a program's Kinsumer is made with (the docs pass them by keyword)."""
    stream = re.search(r'stream_name="([^"]+)"', program)
    app = re.search(r'application_name="([^"]+)"', program)
    assert stream is not None and app is not None, f"no Kinsumer(stream_name=..., application_name=...) in:\n{program}"
    return stream.group(1), app.group(1)


def environment(server: LocalServer) -> dict[str, str]:
    """The program's AWS settings: the test's server, made-up credentials."""
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "AWS_ENDPOINT_URL": server.endpoint,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "readme",
        "AWS_SECRET_ACCESS_KEY": "readme",
    }


def ended(proc: subprocess.Popen[str]) -> None:
    """The program is stopped, whatever happened to the test."""
    if proc.poll() is None:
        proc.kill()
        proc.communicate(timeout=10)


def ctrl_c_leaves_cleanly(proc: subprocess.Popen[str], db: Any, app: str) -> None:
    """Ctrl-C ends the program, which leaves the application and releases its shards."""
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert "KeyboardInterrupt" in stderr  # Ctrl-C ended the block (or asyncio.run()), then the program
    assert db.scan(TableName=f"{app}_clients")["Items"] == []  # it left the application
    rows = db.scan(TableName=f"{app}_checkpoints")["Items"]
    assert rows and not any("OwnerID" in row for row in rows)  # and released its shards


def test_the_readmes_first_program_runs_as_written_and_leaves_on_ctrl_c(moto_server: LocalServer) -> None:
    runs_on_a_new_application_and_leaves_on_ctrl_c(moto_server, first_program(), lambda i: f"b'hello {i}'")


def test_the_docs_first_program_runs_as_written_on_a_new_application_and_leaves_on_ctrl_c(
    moto_server: LocalServer,
) -> None:
    """docs/index.md's first example (it raised TableNotFound on a new application: no create_required_tables())."""
    program = first_program("# kinsumer", "docs/index.md")
    assert "create_required_tables()" in program
    runs_on_a_new_application_and_leaves_on_ctrl_c(moto_server, program, lambda i: f"b'hello {i}'", shard=True)


def runs_on_a_new_application_and_leaves_on_ctrl_c(
    moto_server: LocalServer, program: str, printed_as: Callable[[int], str], shard: bool = False
) -> None:
    """``program`` (its Kinsumer's stream and application named in it, both new) joins, prints the three
    records written then (each line ends with ``printed_as(i)``, after a shard ID if ``shard``), and leaves
    on Ctrl-C."""
    stream, app = names(program)
    kinesis, db = moto_server.client("kinesis"), moto_server.client("dynamodb")
    kinesis.create_stream(StreamName=stream, ShardCount=2)
    kinesis.get_waiter("stream_exists").wait(StreamName=stream, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})
    env = environment(moto_server)
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
        assert proc.poll() is None, proc.communicate(timeout=10)  # it did not end (with an error) instead
        kinesis.put_records(
            StreamName=stream, Records=[{"Data": b"hello %d" % i, "PartitionKey": f"k{i}"} for i in range(3)]
        )
        assert proc.stdout is not None
        lines = [proc.stdout.readline().strip() for _ in range(3)]
        if shard:
            shards = [line.split(" ", 1)[0] for line in lines]
            assert set(shards) <= {"shardId-000000000000", "shardId-000000000001"}, lines
            lines = [line.split(" ", 1)[1] for line in lines]
        assert sorted(lines) == [printed_as(i) for i in range(3)]
        ctrl_c_leaves_cleanly(proc, db, app)
    finally:
        ended(proc)
        kinesis.delete_stream(StreamName=stream)


@pytest.mark.parametrize(("section", "page"), [("## asyncio", "README.md"), ("# asyncio", "docs/asyncio.md")])
def test_the_asyncio_service_runs_as_written_and_leaves_on_ctrl_c(
    moto_server: LocalServer, section: str, page: str
) -> None:
    """The asyncio service of the README and of its guide: it counts kinsumer produce's records by key."""
    program = first_program(section, page)
    stream, app = names(program)
    with socket.socket() as probe:  # the README's port 8080 may be taken here: a free one
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    program = program.replace('"127.0.0.1", 8080', f'"127.0.0.1", {port}')
    kinesis, db = moto_server.client("kinesis"), moto_server.client("dynamodb")
    kinesis.create_stream(StreamName=stream, ShardCount=2)
    kinesis.get_waiter("stream_exists").wait(StreamName=stream, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})
    proc = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=environment(moto_server), cwd=REPO)  # fmt: skip

    def stats() -> dict[str, int] | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5) as answer:
                return dict(json.loads(answer.read()))
        except OSError:
            return None  # not serving yet

    try:
        wait_until(lambda: stats() is not None or proc.poll() is not None, 60, "it serves")
        assert proc.poll() is None, proc.communicate(timeout=10)
        keys = ["key-1", "key-2", "key-1"]
        kinesis.put_records(StreamName=stream, Records=[
            {"Data": json.dumps({"id": i, "key": key, "ts": "2026-11-29T00:00:00+00:00"}).encode(), "PartitionKey": key}
            for i, key in enumerate(keys)
        ])  # fmt: skip
        wait_until(lambda: stats() == {"key-1": 2, "key-2": 1}, 60, "the records counted by key")
        ctrl_c_leaves_cleanly(proc, db, app)
    finally:
        ended(proc)
        kinesis.delete_stream(StreamName=stream)
