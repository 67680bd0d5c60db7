from __future__ import annotations

import pathlib
from collections.abc import Callable, Iterator

import pytest

from demo.servers import LocalServer
from kinsumer import Kinsumer
from tests.conftest import unique
from tests.procs.harness import ClientProcess, Deployment

pytestmark = pytest.mark.server


@pytest.fixture
def deploy(moto_server: LocalServer, tmp_path: pathlib.Path) -> Iterator[Callable[..., Deployment]]:
    """Make a stream (on moto, or on kinesalite if given) and the application's tables."""

    def make(shards: int, kinesis: LocalServer | None = None) -> Deployment:
        kinesis_server = kinesis or moto_server
        stream, app = unique("stream"), unique("app")
        client = kinesis_server.client("kinesis")
        client.create_stream(StreamName=stream, ShardCount=shards)
        client.get_waiter("stream_exists").wait(StreamName=stream, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})
        Kinsumer(stream, app, "admin", kinesis=client, dynamodb=moto_server.client("dynamodb")).create_required_tables()
        return Deployment(kinesis_server.endpoint, moto_server.endpoint, stream, app, tmp_path)

    yield make


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"report_{report.when}", report)


@pytest.fixture
def processes(request: pytest.FixtureRequest) -> Iterator[list[ClientProcess]]:
    """Register every ClientProcess a test starts here: none outlives the test. If the test failed,
    each client's log (kinsumer's, INFO and up) is shown with the failure."""
    started: list[ClientProcess] = []
    yield started
    for proc in started:
        proc.ensure_dead()
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        for proc in {p.name: p for p in started}.values():
            print(f"----- {proc.name}'s log (its end) -----\n{proc.stderr()[-4000:]}")
