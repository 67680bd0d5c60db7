"""The package as a user gets it: the sdist and the wheel that ``python -m build`` makes, checked by twine,
and the wheel installed into a bare virtual environment.

How, and why so:

- The build runs on a copy of the checkout (what .gitignore leaves, without .git) so that nothing is
  written into the checkout (setuptools writes ``build/`` and ``pykinsumer.egg-info`` beside the
  sources), and with ``--no-isolation``: the ``setuptools`` of tests/requirements.txt builds, so no
  package index is asked for the build. ``python -m build`` makes the sdist and then the wheel from the
  unpacked sdist, so a file the sdist lacks breaks the wheel.
- The environments are made with ``venv --without-pip``: nothing in them but the Python standard
  library, the wheel and what its metadata requires (no pip, no setuptools, no test tools), and
  no path back to the checkout (the commands run with no ``PYTHONPATH``, from a directory of their own).
  The test's own pip installs into them (``pip --python``), from the package index ``make``
  installed from: the wheel's requirements are resolved as a user's ``pip install`` resolves them.
- The spark extra is installed for real: ``pip install 'pykinsumer-….whl[spark]'`` into an
  environment of its own. pyspark is about 450 MB installed, and PyPI has it only as an sdist: pip
  installs the wheel it built from it when ``make`` installed ``.[spark]`` (pip's wheel cache). Measured
  here, making that environment took 16-19 s (6 s without the extra), which calls for no cheaper
  stand-in. It is installed with ``--no-compile``, as the quick start's is: compiling pyspark's, pyarrow's
  and numpy's modules ahead took 33-34 s of wall time and 10-12 s of CPU, without it 17-23 s and 7-9 s.
  It is deleted at the end of its test. The whole module takes about 45 s.

The sdist and the wheel are built once for tests/package (conftest.py, environments.py), whose modules
run on one xdist worker; test_quickstart.py runs the README's quick start from the same wheel.
"""

from __future__ import annotations

import pathlib
import shutil
import sys
import tarfile
import zipfile
from collections.abc import Iterator

import pytest

from tests.package.environments import DISTRIBUTION, VERSION, BareEnvironment, Distributions, run_ok


@pytest.fixture(scope="module")
def installed(distributions: Distributions, tmp_path_factory: pytest.TempPathFactory) -> BareEnvironment:
    """A bare environment with the wheel and its requirements, no extra."""
    environment = BareEnvironment(tmp_path_factory.mktemp("installed") / "venv")
    environment.pip("install", "--quiet", str(distributions.wheel))
    return environment


@pytest.fixture
def installed_with_spark(distributions: Distributions, tmp_path: pathlib.Path) -> Iterator[BareEnvironment]:
    """A bare environment with ``pykinsumer[spark]`` from the wheel (about 700 MB: deleted after the test)."""
    environment = BareEnvironment(tmp_path / "venv")
    try:
        environment.pip("install", "--quiet", "--no-compile", f"{distributions.wheel}[spark]")
        yield environment
    finally:
        shutil.rmtree(environment.path)


def test_the_sdist_and_the_wheel_pass_twine_check(distributions: Distributions) -> None:
    """What PyPI would refuse or show badly: the metadata, and README.md as the long description."""
    command = [sys.executable, "-m", "twine", "check", "--strict", str(distributions.sdist), str(distributions.wheel)]
    done = run_ok(command, cwd=distributions.wheel.parent)
    assert done.stdout.count("PASSED") == 2, done.stdout


def test_the_sdist_holds_the_library_and_its_documents(distributions: Distributions) -> None:
    with tarfile.open(distributions.sdist) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert distributions.sdist.name == f"{DISTRIBUTION}-{VERSION}.tar.gz"
    assert {"README.md", "CHANGELOG.md", "LICENSE", "pyproject.toml", "setup.cfg", "kinsumer/py.typed"} <= names
    assert "kinsumer/spark/__init__.py" in names
    assert not {name.split("/")[0] for name in names} & {"demo", "tests", "scripts", "docs"}


def test_the_wheel_holds_the_library_only(distributions: Distributions) -> None:
    names = zipfile.ZipFile(distributions.wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert top == {"kinsumer", f"{DISTRIBUTION}-{VERSION}.dist-info"}
    assert "kinsumer/py.typed" in names
    assert not [n for n in names if "demo" in n or "local_server" in n or "producer" in n]
    for group in ("aws", "coordination", "delivery", "reading", "spark", "cli", "testing"):
        assert f"kinsumer/{group}/__init__.py" in names
    metadata = zipfile.ZipFile(distributions.wheel).read(f"{DISTRIBUTION}-{VERSION}.dist-info/METADATA").decode()
    header = metadata.split("\n\n", 1)[0].splitlines()
    assert header[:3] == ["Metadata-Version: 2.4", f"Name: {DISTRIBUTION}", f"Version: {VERSION}"]
    assert "Description-Content-Type: text/markdown" in header
    assert "License-Expression: MIT" in header and "License-File: LICENSE" in header  # PEP 639
    assert "Development Status :: 4 - Beta" in metadata
    # only the Python version CI runs, and no upper bound
    assert [line for line in header if "Python :: 3." in line] == ["Classifier: Programming Language :: Python :: 3.11"]
    assert "Requires-Python: >=3.11" in header
    assert 'Requires-Dist: pyspark>=4.0; extra == "spark"' in header
    # the extras a user installs, and no development tools (tests, docs, demo) among them
    assert [line for line in header if line.startswith("Provides-Extra:")] == [
        "Provides-Extra: spark", "Provides-Extra: prometheus", "Provides-Extra: otel"
    ]  # fmt: skip
    assert not [line for line in header if any(tool in line for tool in ("pytest", "moto", "mkdocs", "twine"))]
    assert not [line for line in header if line.startswith("Project-URL")]  # no public home yet
    assert f"{DISTRIBUTION}-{VERSION}.dist-info/licenses/LICENSE" in names
    # the command, and kinsumer's pytest plugin (its fixtures) for every pytest run where the package is installed
    entry_points = zipfile.ZipFile(distributions.wheel).read(f"{DISTRIBUTION}-{VERSION}.dist-info/entry_points.txt")
    assert entry_points.decode().split() == [
        "[console_scripts]", "kinsumer", "=", "kinsumer.cli:main",
        "[pytest11]", "kinsumer", "=", "kinsumer.testing.pytest_plugin",
    ]  # fmt: skip
    assert "kinsumer/testing/pytest_plugin.py" in names


def test_the_installed_wheel_imports_and_runs_its_command(installed: BareEnvironment) -> None:
    installed.pip("check")  # the requirements installed agree with each other
    # the pytest plugin is loaded by pytest, which a bare environment lacks; kinsumer.testing itself imports
    location = installed.imports_every_module("kinsumer.spark", "kinsumer.testing.pytest_plugin")
    assert location.is_relative_to(installed.path), f"kinsumer imported from {location}, not the environment"

    for version_command in (["kinsumer", "--version"], ["python", "-m", "kinsumer", "--version"]):
        done = installed.run(*version_command)
        assert (done.returncode, done.stdout) == (0, f"kinsumer {VERSION}\n"), done.stderr
    done = installed.run("python", "-c", f"import importlib.metadata as m; print(m.version('{DISTRIBUTION}'))")
    assert done.stdout == f"{VERSION}\n", done.stderr

    done = installed.run("kinsumer", "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: kinsumer")
    for subcommand in ("create-tables", "create-stream", "status", "tail", "produce", "reset", "efo"):
        assert subcommand in done.stdout
    assert "demo" not in done.stdout  # `make demo` is a checkout's

    # what a user of the installed package is told
    done = installed.run("python", "-c", "import kinsumer.spark")
    assert "MissingDependency: kinsumer.spark needs pyspark and pyarrow: pip install 'pykinsumer[spark]'" in done.stderr
    done = installed.run("kinsumer", "produce", "--help")  # the package's own producer, no checkout needed
    assert done.returncode == 0 and "--aggregate N" in done.stdout, done.stderr


def test_the_spark_extra_brings_what_kinsumer_spark_needs(installed_with_spark: BareEnvironment) -> None:
    installed_with_spark.pip("check")
    # kinsumer.spark and its modules included (not the pytest plugin: pytest is not installed)
    location = installed_with_spark.imports_every_module("kinsumer.testing.pytest_plugin")
    assert location.is_relative_to(installed_with_spark.path)
    done = installed_with_spark.run("python", "-c", "import kinsumer.spark as s; print(s.KinsumerDataSource.name())")
    assert done.stdout == "kinsumer\n", done.stderr
