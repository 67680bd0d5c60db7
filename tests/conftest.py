"""Fixtures: AWS credentials for tests, in-process moto, and a moto server on 127.0.0.1."""

from __future__ import annotations

import os
import pathlib
import uuid
import warnings
from collections.abc import Callable, Iterator

import pytest

from demo import servers
from demo.servers import LocalServer
from tests.support.kinesalite import start_kinesalite

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
    with servers.moto_server() as server:
        yield server


class KinesaliteHolder:
    """One kinesalite for the session, replaced (and reported) if it ever dies."""

    def __init__(self, log_path: pathlib.Path) -> None:
        self.log_path = log_path
        self.server = start_kinesalite(log_path)

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def alive(self) -> LocalServer:
        code = self.server.process.poll()
        if code is not None:
            warnings.warn(f"kinesalite had exited with {code}; restarted. Its log:\n{self.log_tail()}", stacklevel=2)
            self.server = start_kinesalite(self.log_path)
        return self.server


@pytest.fixture(scope="session")
def kinesalite_holder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KinesaliteHolder]:
    holder = KinesaliteHolder(tmp_path_factory.mktemp("kinesalite") / "kinesalite.log")
    try:
        yield holder
    finally:
        holder.server.stop()


@pytest.fixture
def kinesalite(kinesalite_holder: KinesaliteHolder) -> Iterator[LocalServer]:
    server = kinesalite_holder.alive()
    yield server
    code = server.process.poll()
    if code is not None:  # it died during this test: say so, with what it logged
        pytest.fail(f"kinesalite exited with {code} during the test; its log:\n{kinesalite_holder.log_tail()}")


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
