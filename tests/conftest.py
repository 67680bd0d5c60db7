"""Fixtures: AWS credentials for tests, in-process moto, and a moto server on 127.0.0.1."""

from __future__ import annotations

import os
import pathlib
import subprocess
import uuid
from collections.abc import Callable, Iterator

import pytest

from kinsumer import local_server
from kinsumer.local_server import LocalServer

REGION = "us-east-1"


@pytest.fixture(autouse=True)
def _fake_aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may reach a real AWS account or read the developer's credentials."""
    for name in list(os.environ):
        if name.startswith("AWS_") and name != "AWS_CA_BUNDLE":
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)


@pytest.fixture(scope="session")
def moto_server() -> Iterator[LocalServer]:
    with local_server.moto_server() as server:
        yield server


KINESALITE_DIR = pathlib.Path(__file__).parent / "kinesalite"


def start_kinesalite() -> LocalServer:
    """kinesalite (Kinesis with real shard splits and merges) in a node process on 127.0.0.1."""
    if not (KINESALITE_DIR / "node_modules" / "kinesalite").is_dir():
        raise RuntimeError(f"kinesalite is not installed: run 'make test' (npm install in {KINESALITE_DIR})")
    process = subprocess.Popen(
        ["node", str(KINESALITE_DIR / "server.js"), "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert process.stdout is not None
    line = process.stdout.readline()  # "ready PORT"
    server = LocalServer(process, f"http://127.0.0.1:{line.split()[-1] if line.startswith('ready ') else 0}")
    if not line.startswith("ready "):
        server.stop()
        raise RuntimeError(f"kinesalite did not start: {line!r}")
    return server


@pytest.fixture(scope="session")
def kinesalite() -> Iterator[LocalServer]:
    with start_kinesalite() as server:
        yield server


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def new_stream(moto_server: LocalServer) -> Iterator[Callable[[int], str]]:
    """Create uniquely named ACTIVE streams on the server; deleted after the test."""
    kinesis = moto_server.client("kinesis")
    made: list[str] = []

    def make(shards: int) -> str:
        name = unique("stream")
        kinesis.create_stream(StreamName=name, ShardCount=shards)
        kinesis.get_waiter("stream_exists").wait(StreamName=name, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})
        made.append(name)
        return name

    yield make
    for name in made:
        kinesis.delete_stream(StreamName=name, EnforceConsumerDeletion=True)
