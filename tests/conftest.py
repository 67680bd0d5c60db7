"""Fixtures: AWS credentials for tests, in-process moto, and a moto server on 127.0.0.1."""

from __future__ import annotations

import functools
import importlib
import os
import pathlib
import signal
import uuid
import warnings
from collections.abc import Callable, Iterator

import botocore.loaders
import botocore.session
import pytest
from hypothesis import HealthCheck, settings

from demo import servers
from demo.servers import LocalServer
from tests.support.kinesalite import start_kinesalite
from tests.support.kinesis_mock import start_kinesis_mock

REGION = "us-east-1"

# Hypothesis' own clock is off: a property test proves behaviour, never speed (performance figures come
# from `make bench`). Its default 200 ms deadline per example and its too-slow health check fail a
# correct test on a loaded machine (CI, or the suite's own server and Spark tests beside it).
settings.register_profile("kinsumer", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("kinsumer")

# Each boto3 session a test makes (most make their own clients) parsed the service models' JSON again:
# about 0.1 s of CPU for each client, most of the in-process tests' CPU. The test processes share one
# loader for each data path; the models it returns are read-only, as between the clients of one session.
botocore.session.create_loader = functools.cache(botocore.loaders.create_loader)  # type: ignore[attr-defined]

# Started in the background by a non-interactive shell (`make test &`), pytest ignores SIGINT, and
# so would every process a test starts: an ignored signal stays ignored across exec, and Python then
# never raises KeyboardInterrupt. The tests that send SIGINT need what a terminal gives, and a
# Python handler is reset to the default at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_configure(config: pytest.Config) -> None:
    """kinsumer's pytest plugin (the fixtures kinsumer_stream and kinsumer_fleet), once. An installed pykinsumer
    loads it by its pytest11 entry point, named ``kinsumer``; a .venv installed before that entry point existed
    does not (``make`` reinstalls the package when setup.cfg changes), so it is registered here, under the same
    name, only when that has not happened (registering the module twice is an error)."""
    if not config.pluginmanager.has_plugin("kinsumer"):
        config.pluginmanager.register(importlib.import_module("kinsumer.testing.pytest_plugin"), "kinsumer")


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


class ServerHolder:
    """One node server for the session (kinesalite, kinesis-mock), replaced (and reported) if it ever dies."""

    def __init__(self, name: str, start: Callable[[pathlib.Path], LocalServer], log_path: pathlib.Path) -> None:
        self.name = name
        self.start = start
        self.log_path = log_path
        self.server = start(log_path)

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def alive(self) -> LocalServer:
        code = self.server.process.poll()
        if code is not None:
            warnings.warn(f"{self.name} had exited with {code}; restarted. Its log:\n{self.log_tail()}", stacklevel=2)
            self.server = self.start(self.log_path)
        return self.server

    def serve(self) -> Iterator[LocalServer]:
        """The server for one test; the test fails if the server died during it."""
        server = self.alive()
        yield server
        code = server.process.poll()
        if code is not None:  # it died during this test: say so, with what it logged
            pytest.fail(f"{self.name} exited with {code} during the test; its log:\n{self.log_tail()}")


def _holder(
    name: str, start: Callable[[pathlib.Path], LocalServer], factory: pytest.TempPathFactory
) -> Iterator[ServerHolder]:
    holder = ServerHolder(name, start, factory.mktemp(name) / f"{name}.log")
    try:
        yield holder
    finally:  # killed: an emulator keeps nothing, and on SIGTERM kinesis-mock waits 5 s for the open connections
        holder.server.stop(grace=0)


@pytest.fixture(scope="session")
def kinesalite_holder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHolder]:
    yield from _holder("kinesalite", start_kinesalite, tmp_path_factory)


@pytest.fixture
def kinesalite(kinesalite_holder: ServerHolder) -> Iterator[LocalServer]:
    yield from kinesalite_holder.serve()


@pytest.fixture(scope="session")
def kinesis_mock_holder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHolder]:
    yield from _holder("kinesis-mock", start_kinesis_mock, tmp_path_factory)


@pytest.fixture
def kinesis_mock(kinesis_mock_holder: ServerHolder) -> Iterator[LocalServer]:
    """kinesis-mock: enhanced fan-out (SubscribeToShard), splits and merges."""
    yield from kinesis_mock_holder.serve()


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


# The suite runs on several xdist workers (make test: -n 4 --dist loadgroup). Tests that start heavy
# processes each stay on one worker, in order: the Spark tests share one SparkSession (and one cluster),
# and the tests of client processes (SIGKILL, pauses, signals) do not load the machine at once. The
# package tests build the sdist and the wheel once (a module fixture) and install them with pip.
_GROUPS = {"spark": "spark", "procs": "procs", "package": "package"}
#: The tiers, marked by folder as well (``pytest -m "not spark"``); tests/server's carry ``server`` themselves.
_TIERS = frozenset({"unit", "kit", "aws", "sim", "procs", "spark", "package", "interop"})


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups off the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = pathlib.Path(str(item.path)).parts
        folder = parts[parts.index("tests") + 1] if "tests" in parts else ""
        if folder in _GROUPS:
            item.add_marker(pytest.mark.xdist_group(_GROUPS[folder]))
        if folder in _TIERS:
            item.add_marker(getattr(pytest.mark, folder))
