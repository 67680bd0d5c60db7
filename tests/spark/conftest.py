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


@pytest.fixture(scope="session")
def call_log(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return tmp_path_factory.mktemp("calls") / "aws-calls.log"


@pytest.fixture(scope="session")
def spark(call_log: pathlib.Path) -> Iterator[Any]:
    import kinsumer.spark

    saved = dict(os.environ)
    # the JVM and every Python worker inherit this environment
    os.environ.update(
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join([str(AUDIT_DIR), str(REPO), os.environ.get("PYTHONPATH", "")]),
        KINSUMER_TEST_CALL_LOG=str(call_log),
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION=REGION,
        SPARK_LOCAL_IP="127.0.0.1",
    )
    session = kinsumer.spark.local_session("kinsumer-tests", conf={"spark.sql.streaming.stopTimeout": "30s"})
    try:
        yield session
    finally:
        session.stop()
        os.environ.clear()
        os.environ.update(saved)
