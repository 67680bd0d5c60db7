"""The test tiers are markers as well as folders: `pytest -m "not spark"` runs no Spark, `-m unit` only tests/unit."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def marks_of_every_test(session: pytest.Session, tmp_path: pathlib.Path) -> dict[str, set[str]]:
    """Each test's marks, by node ID, in a collection of the whole suite (as ``make test`` collects it): this
    session's own when it is one (``make test``), else one in a subprocess (a run of some of the tests)."""
    config = session.config
    narrowing = ("keyword", "markexpr", "deselect", "ignore", "ignore_glob", "lf", "stepwise")
    narrowed = any(config.getoption(name, None) for name in narrowing)
    if config.args_source is pytest.Config.ArgsSource.TESTPATHS and not narrowed:
        return {item.nodeid: {m.name for m in item.iter_markers()} for item in session.items}
    listing = tmp_path / "marks.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}  # the listing's own options only
    env["KINSUMER_LIST_MARKS"] = str(listing)
    subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly", "-p", "tests.support.list_marks"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=True, env=env,
    )  # fmt: skip
    rows = [json.loads(line) for line in listing.read_text().splitlines()]
    return {row["id"]: set(row["marks"]) for row in rows}


def test_each_tier_is_a_marker_of_its_folder_and_spark_marks_every_test_that_runs_spark(
    request: pytest.FixtureRequest, tmp_path: pathlib.Path
) -> None:
    marks = marks_of_every_test(request.session, tmp_path)
    spark = [t for t, names in marks.items() if "spark" in names]  # what `-m spark` selects
    assert spark and all(t.startswith("tests/spark/") or "spark" in t for t in spark)
    assert any(t.startswith("tests/server/test_docs_examples.py") for t in spark)  # a docs example that runs Spark
    assert all("spark" in marks[t] for t in marks if t.startswith("tests/spark/"))  # `-m "not spark"`: none of them
    unit = [t for t, names in marks.items() if "unit" in names]
    assert unit and all(t.startswith("tests/unit/") for t in unit)
    assert all("unit" in marks[t] for t in marks if t.startswith("tests/unit/"))
