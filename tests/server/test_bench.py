"""``make bench`` keeps working: a tiny run of its cheapest part writes a table row.

The figures themselves come from ``make bench``, never from tests.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.server

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_bench_writes_its_table_between_the_markers(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "benchmarks.md"
    out.write_text("# prose before\n\n<!-- bench:begin -->\nOLD-TABLE\n<!-- bench:end -->\n\nprose after\n")
    done = subprocess.run(
        [sys.executable, "scripts/bench.py", "--only", "overhead", "--runs", "1", "--records", "800",
         "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    text = out.read_text()
    assert text.startswith("# prose before") and text.rstrip().endswith("prose after")
    assert "OLD-TABLE" not in text
    row = next(line for line in text.splitlines() if "in-memory Kinesis" in line)
    assert "rec/s" in row and "µs per record" in row
    assert "| benchmark | server | median | detail |" in done.stdout


def test_bench_rejects_unknown_sections() -> None:
    done = subprocess.run(
        [sys.executable, "scripts/bench.py", "--only", "nonsense"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "nonsense" in done.stderr
