"""The package as a user gets it: its sdist and wheel, built from a copy of the checkout, and bare virtual
environments to install them into (see test_distribution.py for why so)."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
from dataclasses import dataclass

import kinsumer

REPO = pathlib.Path(__file__).resolve().parents[2]
VERSION = kinsumer.__version__
DISTRIBUTION = "pykinsumer"  # the name on PyPI (`kinsumer` there is another project); the import name is kinsumer

# Run in a bare environment: imports every module of the installed kinsumer (but those of the packages
# named on the command line) and prints where kinsumer came from
IMPORT_EVERY_MODULE = """
import importlib, pathlib, sys
import kinsumer
package = pathlib.Path(kinsumer.__file__).parent
left_out = tuple(sys.argv[1:])
for path in sorted(package.rglob("*.py")):
    parts = ("kinsumer", *path.relative_to(package).with_suffix("").parts)
    name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    if name != "kinsumer.__main__" and not name.startswith(left_out):
        importlib.import_module(name)
print(kinsumer.__file__)
"""


def environ() -> dict[str, str]:
    """This process's environment (pip's settings included), without a path back to the checkout."""
    return {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}


def run_ok(command: list[str], cwd: pathlib.Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, cwd=cwd, env=environ(), capture_output=True, text=True, check=False, timeout=240)
    assert done.returncode == 0, f"{command} exited with {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


@dataclass(frozen=True)
class Distributions:
    sdist: pathlib.Path
    wheel: pathlib.Path


def build(source_parent: pathlib.Path, out: pathlib.Path) -> Distributions:
    """The sdist and the wheel, built from a copy of the checkout made in ``source_parent``, into ``out``."""
    source = source_parent / "kinsumer"
    ignored = [line.strip().rstrip("/") for line in (REPO / ".gitignore").read_text().splitlines()]
    ignored = [pattern for pattern in ignored if pattern and not pattern.startswith("#")]
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".git", *ignored))
    run_ok([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)], cwd=out)
    (sdist,) = out.glob(f"{DISTRIBUTION}-*.tar.gz")
    (wheel,) = out.glob(f"{DISTRIBUTION}-*.whl")
    return Distributions(sdist, wheel)


class BareEnvironment:
    """A virtual environment with nothing installed, not even pip."""

    def __init__(self, path: pathlib.Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=60)
        self.path = path
        self.bin = path / "bin"
        self.python = self.bin / "python"
        self.cwd = path.parent  # not the checkout: a command's own directory is on its sys.path

    def pip(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_ok([sys.executable, "-m", "pip", "--python", str(self.python), *args], cwd=self.cwd)

    def run(self, *command: str) -> subprocess.CompletedProcess[str]:
        """A command of the environment (``kinsumer``, ``python``), as it ends: it may fail."""
        return subprocess.run(
            [str(self.bin / command[0]), *command[1:]],
            cwd=self.cwd, env=environ(), capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip

    def imports_every_module(self, *left_out: str) -> pathlib.Path:
        """Imports every module of the installed kinsumer but those under ``left_out``; where it lives."""
        done = self.run("python", "-c", IMPORT_EVERY_MODULE, *left_out)
        assert done.returncode == 0, done.stderr
        return pathlib.Path(done.stdout.strip())
