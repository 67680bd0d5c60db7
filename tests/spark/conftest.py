"""A local[2] SparkSession bound to 127.0.0.1, shared by the Spark tests; a Spark Connect server and its clients."""

from __future__ import annotations

import os
import pathlib
import sys
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")

from tests.conftest import REGION
from tests.spark.connect import ConnectServer, connect_server
from tests.support.jvm import AUDIT_DIR, LEAN_JVM

REPO = pathlib.Path(__file__).resolve().parents[2]
# The local session's settings. A trigger that runs no batch reports progress only once per
# noDataProgressEventInterval (Spark's default: 10 s); the tests that wait for such a report (the
# batches after the last records, the lag at the tip, a data loss told) waited that long for each.
# At 1 s, a query keeps its last 300 reports (Spark's default: 100) so that recentProgress still
# holds its first batches after as long an idle as a test can last (pytest's timeout: 300 s).
SESSION_CONF = {
    "spark.sql.streaming.stopTimeout": "30s",
    "spark.sql.streaming.noDataProgressEventInterval": "1s",
    "spark.sql.streaming.numRecentProgressUpdates": "300",
}


@pytest.fixture(scope="session")
def call_log(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return tmp_path_factory.mktemp("calls") / "aws-calls.log"


@pytest.fixture(scope="session")
def warnings_log(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The WARNING (and worse) records of the kinsumer loggers in every Python process Spark starts."""
    return tmp_path_factory.mktemp("warnings") / "kinsumer-warnings.log"


@pytest.fixture(scope="session")
def spark(call_log: pathlib.Path, warnings_log: pathlib.Path) -> Iterator[Any]:
    import kinsumer.spark

    saved = dict(os.environ)
    # the JVM and every Python worker inherit this environment
    os.environ.update(
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join([str(AUDIT_DIR), str(REPO), os.environ.get("PYTHONPATH", "")]),
        KINSUMER_TEST_CALL_LOG=str(call_log),
        KINSUMER_TEST_WARNINGS=str(warnings_log),
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION=REGION,
        SPARK_LOCAL_IP="127.0.0.1",
        **LEAN_JVM,
    )
    session = kinsumer.spark.local_session("kinsumer-tests", conf=SESSION_CONF)
    try:
        yield session
    finally:
        session.stop()
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="module")
def connect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """A Spark Connect server (local[2]) on 127.0.0.1. Its Python workers import kinsumer from this repository
    and have AWS settings of their own: only the server's environment reaches them, never the client's.

    For a module: only test_connect's tests use it, and its JVM stops once they have run, not at the end of
    the session."""
    # unset: the client's AWS settings, and the local session's call and warning logs (AUDIT_DIR's sitecustomize
    # writes them when they are set)
    unset: dict[str, str | None] = {name: None for name in os.environ if name.startswith(("AWS_", "KINSUMER_TEST_"))}
    env = {
        **unset,
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join([str(AUDIT_DIR), str(REPO), os.environ.get("PYTHONPATH", "")]),
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "SPARK_LOCAL_IP": "127.0.0.1",
        **LEAN_JVM,
    }
    with connect_server(env, conf={"spark.sql.streaming.stopTimeout": "30s"}) as server:
        yield server


@pytest.fixture
def spark_connect(connect: ConnectServer) -> Iterator[Any]:
    """A Spark Connect session on the server, with the kinsumer format registered; a new one for each test.

    ``create()``, not ``getOrCreate()``: the latter refuses while this process has a classic SparkSession (the
    ``spark`` fixture's). Building a Connect session marks the process as in Connect mode
    (SPARK_CONNECT_MODE_ENABLED), which would turn the classic session's later tests into Connect clients:
    the mark goes with the session.
    """
    from pyspark.sql import SparkSession

    import kinsumer.spark

    marked = "SPARK_CONNECT_MODE_ENABLED" in os.environ
    session = SparkSession.builder.remote(connect.url).create()
    try:
        kinsumer.spark.register(session)
        yield session
    finally:
        session.stop()
        if not marked:
            os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
