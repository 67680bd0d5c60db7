"""The test tiers are markers as well as folders: `pytest -m "not spark"` runs no Spark, `-m unit` only tests/unit."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]


def collected(marks: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly", "-m", marks],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=True,
        env={k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"},  # the listing's own options only
    )  # fmt: skip
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_each_tier_is_a_marker_of_its_folder_and_spark_marks_every_test_that_runs_spark() -> None:
    spark = collected("spark")
    assert spark and all(t.startswith("tests/spark/") or "spark" in t for t in spark)
    assert any(t.startswith("tests/server/test_docs_examples.py") for t in spark)  # a docs example that runs Spark
    assert not [t for t in collected("not spark") if t.startswith("tests/spark/")]
    unit = collected("unit")
    assert unit and all(t.startswith("tests/unit/") for t in unit)
