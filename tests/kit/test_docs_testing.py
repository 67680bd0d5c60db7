"""docs/testing.md's worked examples (per-shard counts; manual checkpoints), run as written: its blocks are files
(the first line names each), and pytest runs them in a directory of their own, with kinsumer's pytest plugin as a
user's pytest loads it."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from tests.docs_blocks import REPO, blocks_of

PAGE = "docs/testing.md"


def test_the_worked_example_of_testing_md_passes_as_written(tmp_path: pathlib.Path) -> None:
    blocks = [b for b in blocks_of((REPO / PAGE).read_text(), PAGE) if b.detail == "tests/kit/test_docs_testing.py"]
    files = {block.code.splitlines()[0].removeprefix("# "): block.code for block in blocks}
    assert sorted(files) == ["counts.py", "test_batches.py", "test_counts.py"]
    for name, code in files.items():
        (tmp_path / name).write_text(code)
    # the plugin by its module: this checkout's, whether or not the installed package declares the entry point
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "kinsumer.testing.pytest_plugin", "-p", "no:cacheprovider", "-q"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout + done.stderr
