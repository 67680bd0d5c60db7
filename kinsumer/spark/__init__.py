"""A PySpark (>= 4.0) Structured Streaming source that reads Kinesis shards on the executors.

    import kinsumer.spark
    kinsumer.spark.register(spark)
    df = spark.readStream.format("kinsumer").option("streamName", "clicks").load()

Needs the ``spark`` extra: ``pip install 'pykinsumer[spark]'`` (pyspark and pyarrow).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping
from typing import Any

# Python data sources need pyarrow too: fail here with the fix, not later in a Spark worker
from ..errors import MissingDependency

_missing = [m for m in ("pyspark", "pyarrow") if importlib.util.find_spec(m) is None]
if _missing:  # pragma: no cover - depends on the environment
    raise MissingDependency("kinsumer.spark", " and ".join(_missing), "spark")

from pyspark.sql import SparkSession  # noqa: E402 - after the check above

from .options import SourceOptions  # noqa: E402
from .rows import SCHEMA  # noqa: E402
from .source import KinsumerDataSource  # noqa: E402

__all__ = ["SCHEMA", "KinsumerDataSource", "SourceOptions", "local_session", "register"]


def register(spark: Any) -> None:
    """Make ``format("kinsumer")`` available in this SparkSession, classic or Spark Connect.

    On a Connect session the class goes to the server by reference: kinsumer must be importable by
    the server's Python workers too.
    """
    spark.dataSource.register(KinsumerDataSource)


def local_session(app_name: str = "kinsumer", cores: int = 2, conf: Mapping[str, str] | None = None) -> Any:
    """A local SparkSession for trying things out and for tests, with the kinsumer format registered.

    It binds to 127.0.0.1, has no UI (nor console progress bars), and runs its Python workers with this interpreter
    (PYSPARK_PYTHON), which is what the workers need to import kinsumer.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session
