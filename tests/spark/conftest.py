"""A local[2] SparkSession bound to 127.0.0.1, shared by the Spark tests."""

from __future__ import annotations

import os
import pathlib
import sys
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")

from tests.conftest import REGION

AUDIT_DIR = pathlib.Path(__file__).parent / "audit"
REPO = pathlib.Path(__file__).resolve().parents[2]
# Every JVM the Spark tests start (the local session's, a cluster's master, workers, executors and
# drivers) compiles with C1 only and collects with the serial collector: their work is start-up and
# small batches, where C2 and a parallel collector cost CPU that the rest of the suite needs on a
# 2-core machine. Measured on the cluster's availableNow test: 107 s of CPU and 135 s of wall time
# without, 61 s and 100 s with.
LEAN_JVM = {"JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}


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
    session = kinsumer.spark.local_session("kinsumer-tests", conf={"spark.sql.streaming.stopTimeout": "30s"})
    try:
        yield session
    finally:
        session.stop()
        os.environ.clear()
        os.environ.update(saved)
