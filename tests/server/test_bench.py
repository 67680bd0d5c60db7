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


@pytest.mark.parametrize("shards", ["many", "0", "4096"])
def test_bench_rejects_scale_shard_counts_kinesalite_cannot_hold(shards: str) -> None:
    done = subprocess.run(
        [sys.executable, "scripts/bench.py", "--only", "scale", "--scale-shards", f"8,{shards}"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--scale-shards" in done.stderr


def test_a_run_of_some_sections_replaces_their_rows_and_keeps_the_others(tmp_path: pathlib.Path) -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import bench
        from benchlib.common import Row
    finally:
        sys.path.remove(str(REPO / "scripts"))
    out = tmp_path / "benchmarks.md"
    bench.write(out, "Measured first\n", [Row("a", "moto", "1", "old a"), Row("b", "moto", "2", "old b")])
    bench.write(out, "ignored\n", [Row("b", "moto", "3", "new b"), Row("c", "none", "4", "")], "- the b, c rows: later")
    text = out.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "benchmark" not in line]
    assert rows == ["| a | moto | 1 | old a |", "| b | moto | 3 | new b |", "| c | none | 4 |  |"]
    assert "Measured first" in text and "- the b, c rows: later" in text and "ignored" not in text
    bench.write(out, "Measured again\n", [Row("a", "moto", "5", "")])  # a full run: the whole block
    assert "| b |" not in out.read_text() and "- the b, c rows" not in out.read_text()
