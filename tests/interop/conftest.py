"""The interop tier: the Go library (twitchscience/kinsumer) beside kinsumer on one application, on
kinesalite (Kinesis) and moto's server (DynamoDB), both on 127.0.0.1.

`make interop` runs it; `make test` does not: the tier is collected only when the command line names
this folder or a file in it (``pytest tests/interop``), so pytest on its ``testpaths`` leaves it out.
It needs Go and the Go library's source, ``KINSUMER_GO_SRC`` (a checkout; else a shallow clone from
GitHub): without them every test skips, saying why.
"""

from __future__ import annotations

import pathlib
import sys
from collections.abc import Iterator

import pytest

from demo.servers import LocalServer
from kinsumer import Kinsumer
from tests.conftest import unique
from tests.interop.harness import Fleet
from tests.reshard import new_stream

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
#: The Go program the tests run as a Go client (built once per session, never committed as a binary).
DRIVER = HERE / "go_client" / "main.go"
#: The shards of each test's stream.
SHARDS = 4


def _named(config: pytest.Config) -> bool:
    """Whether the command line names this folder, or a file or test in it."""
    for arg in config.args:
        path = pathlib.Path(config.invocation_params.dir, arg.split("::")[0]).resolve()
        if path == HERE or HERE in path.parents:
            return True
    return False


def pytest_ignore_collect(collection_path: pathlib.Path, config: pytest.Config) -> bool | None:
    """Leave the tier out unless the command line names it (see the module's description)."""
    path = collection_path.resolve()
    if (path == HERE or HERE in path.parents) and not _named(config):
        return True
    return None


@pytest.fixture(scope="session")
def go_client_binary(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The Go client (``go_client/main.go``) built against the Go library by the benchmark's builder; every
    test skips if it cannot be built (no Go, no source), with the builder's reason."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        from benchlib import go_contender  # type: ignore[import-not-found,unused-ignore]  # scripts/benchlib
    finally:
        sys.path.remove(str(REPO / "scripts"))
    built: pathlib.Path | str = go_contender.build(tmp_path_factory.mktemp("go-client"), DRIVER)
    if isinstance(built, str):
        pytest.skip(f"the Go client cannot be built: {built}")
    return built


@pytest.fixture
def fleet(
    go_client_binary: pathlib.Path, kinesalite: LocalServer, moto_server: LocalServer, tmp_path: pathlib.Path
) -> Iterator[Fleet]:
    """A 4-shard stream on kinesalite and a fresh application whose tables (on moto's server) kinsumer
    created; every client the test starts through it is stopped at its end."""
    stream = new_stream(kinesalite.client("kinesis"), SHARDS)
    app = unique("interop")
    Kinsumer(
        stream, app, "admin", kinesis=kinesalite.client("kinesis"), dynamodb=moto_server.client("dynamodb")
    ).create_required_tables()
    fleet = Fleet(go_client_binary, kinesalite, moto_server, stream, app, tmp_path)
    try:
        yield fleet
    finally:
        fleet.close()
