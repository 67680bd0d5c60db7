"""A PySpark (>= 4.0) Structured Streaming source that reads Kinesis shards on the executors.

    import kinsumer.spark
    kinsumer.spark.register(spark)
    df = spark.readStream.format("kinsumer").option("streamName", "clicks").load()

Needs the ``spark`` extra: ``pip install 'kinsumer[spark]'`` (pyspark and pyarrow).
"""

from __future__ import annotations

import importlib.util
from typing import Any

# Python data sources need pyarrow too: fail here with the fix, not later in a Spark worker
_missing = [m for m in ("pyspark", "pyarrow") if importlib.util.find_spec(m) is None]
if _missing:  # pragma: no cover - depends on the environment
    raise ImportError(f"kinsumer.spark needs {' and '.join(_missing)}: pip install 'kinsumer[spark]'")

from .source import SCHEMA, KinsumerDataSource, SourceOptions  # noqa: E402 - after the check above

__all__ = ["SCHEMA", "KinsumerDataSource", "SourceOptions", "register"]


def register(spark: Any) -> None:
    """Make ``format("kinsumer")`` available in this SparkSession."""
    spark.dataSource.register(KinsumerDataSource)
