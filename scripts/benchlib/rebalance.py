"""Duplicates on a clean rebalance: ``python -m demo`` (auto mode, a client leaves
cleanly while another joins, with records flowing), read from its tally."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import attrs

from .common import REPO

__all__ = ["RebalanceTally", "clean_rebalance"]


@attrs.frozen
class RebalanceTally:
    produced: int
    lost: int
    duplicates: int


def clean_rebalance(records: int = 20_000) -> RebalanceTally:
    done = subprocess.run(
        [sys.executable, "-m", "demo", "--records", str(records)],
        capture_output=True, text=True, timeout=300, check=False, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    figures = dict(re.findall(r"^(produced|lost|duplicates)\s+(\d+)$", done.stdout, re.MULTILINE))
    if done.returncode not in (0, 1) or len(figures) != 3:
        raise RuntimeError(f"the demo failed ({done.returncode}): {(done.stderr or done.stdout)[-1500:]}")
    return RebalanceTally(int(figures["produced"]), int(figures["lost"]), int(figures["duplicates"]))
