"""Writes the class-data archive the test suite's Spark JVMs share: ``python -m tests.support.jvm_archive PATH``.

A Spark JVM spends most of its start loading and linking the classes of Spark's jars. Given a
class-data-sharing archive (``-XX:SharedArchiveFile``, tests/support/jvm.py), it maps the classes the
archive holds instead. This starts a local session and runs a query in a JVM that writes every class it
loaded to PATH as it exits (``-XX:ArchiveClassesAtExit``): about 30 s of CPU, once per virtual environment
(``make test`` writes it beside ruff and mypy).

A JVM uses the archive only if it is of the same Java build and has the same class path (Spark's jars:
a local session's JVM, a cluster's master, workers, executors and drivers alike); any other ignores it.
A richer first run (a Python data source read in batches and in an availableNow stream into parquet)
made an archive 18% larger in 35% more time, and the Spark tests no faster.
"""

from __future__ import annotations

import os
import pathlib
import sys

import kinsumer.spark
from tests.support.jvm import LEAN_JVM_OPTIONS

__all__ = ["write_archive"]


def write_archive(path: pathlib.Path) -> None:
    """Start a local session and run a query in a JVM that writes the archive to ``path`` (replaced whole)."""
    partial = path.with_name(path.name + ".partial")
    partial.unlink(missing_ok=True)
    os.environ["JAVA_TOOL_OPTIONS"] = f"{LEAN_JVM_OPTIONS} -XX:ArchiveClassesAtExit={partial} -Xlog:cds*=off"
    spark = kinsumer.spark.local_session("kinsumer-class-archive")
    jvm = spark.sparkContext._gateway.proc  # spark-submit's process, which became the JVM
    try:
        spark.range(1000).selectExpr("sum(id)").collect()
    finally:
        spark.stop()
        jvm.stdin.close()  # the JVM exits once its standard input closes, and writes the archive then
        jvm.wait(timeout=300)
    if not partial.is_file():
        raise SystemExit(f"the JVM wrote no class-data archive to {partial}")
    partial.replace(path)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m tests.support.jvm_archive PATH")
    write_archive(pathlib.Path(sys.argv[1]))
