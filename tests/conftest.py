"""Fixtures: AWS credentials for tests, in-process moto, and a moto server on 127.0.0.1."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import botocore.config
import pytest

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MotoServer:
    """moto's server in a child process, listening on 127.0.0.1."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1).close()
                return
            except OSError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.1)

    def client(self, service: str, **config: Any) -> Any:
        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=botocore.config.Config(max_pool_connections=64, **config),
        )

    def stop(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(5)


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    server = MotoServer()
    try:
        yield server
    finally:
        server.stop()


KINESALITE_DIR = pathlib.Path(__file__).parent / "kinesalite"


class Kinesalite:
    """kinesalite (Kinesis with real shard splits and merges) in a node process on 127.0.0.1."""

    def __init__(self) -> None:
        if not (KINESALITE_DIR / "node_modules" / "kinesalite").is_dir():
            raise RuntimeError(f"kinesalite is not installed: run 'make test' (npm install in {KINESALITE_DIR})")
        self._proc = subprocess.Popen(
            ["node", str(KINESALITE_DIR / "server.js"), "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()  # "ready PORT"
        if not line.startswith("ready "):
            self.stop()
            raise RuntimeError(f"kinesalite did not start: {line!r}")
        self.endpoint = f"http://127.0.0.1:{int(line.split()[1])}"

    def client(self, **config: Any) -> Any:
        return boto3.client(
            "kinesis",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=botocore.config.Config(max_pool_connections=64, **config),
        )

    def stop(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(5)


@pytest.fixture(scope="session")
def kinesalite() -> Iterator[Kinesalite]:
    server = Kinesalite()
    try:
        yield server
    finally:
        server.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def new_stream(moto_server: MotoServer) -> Iterator[Callable[[int], str]]:
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
