"""What the package is: the library only, light to import, its errors documented."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

import kinsumer
from kinsumer import KinsumerError

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_importing_kinsumer_and_its_command_line_loads_no_optional_or_checkout_code() -> None:
    probe = (
        "import json, sys, kinsumer, kinsumer.cli, kinsumer.metrics; "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    loaded = set(json.loads(subprocess.check_output([sys.executable, "-c", probe], cwd=REPO, text=True)))
    assert not loaded & {"pyspark", "pyarrow", "prometheus_client", "moto", "demo", "tests"}


def test_every_public_error_is_a_kinsumer_error() -> None:
    errors = [getattr(kinsumer, name) for name in kinsumer.__all__ if name.endswith(("Error", "Found", "Within"))]
    errors += [kinsumer.AlreadyStarted, kinsumer.NotStarted, kinsumer.TableTimeout, kinsumer.MissingDependency,
               kinsumer.EndpointUnreachable]  # fmt: skip
    assert all(issubclass(error, KinsumerError) for error in errors)
    assert issubclass(kinsumer.NoRecordWithin, TimeoutError)
    assert issubclass(kinsumer.ConfigError, ValueError)
    assert issubclass(kinsumer.MissingDependency, ImportError)
    assert issubclass(kinsumer.EndpointUnreachable, kinsumer.AWSError)


@pytest.mark.parametrize("script", ["bench.py", "spark_pipeline.py"])
def test_the_make_target_scripts_start_from_anywhere(script: str, tmp_path: pathlib.Path) -> None:
    pytest.importorskip("pyspark")
    path = pathlib.Path(__file__).resolve().parents[2] / "scripts" / script
    command = [sys.executable, str(path), "--help"]
    done = subprocess.run(command, check=False, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_the_repository_tracks_no_symlink_and_nothing_make_builds() -> None:
    """A fresh clone must build its own .venv and node_modules: a tracked symlink in their place (a worktree's
    shortcut to another's, committed once) made `python -m venv .venv` fail in the clone."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(["git", "ls-files", "-s"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    entries = [line.split(None, 3) for line in listed.splitlines()]
    assert [path for mode, _, _, path in entries if mode == "120000"] == []
    built = [p for _, _, _, p in entries if p.split("/")[0] == ".venv" or "node_modules" in p.split("/")]
    assert built == []
