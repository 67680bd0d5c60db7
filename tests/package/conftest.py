"""The sdist and the wheel, built once for the package tests (one xdist worker runs them all: tests/conftest.py
groups them)."""

from __future__ import annotations

import pytest

from tests.package.environments import Distributions, build


@pytest.fixture(scope="session")
def distributions(tmp_path_factory: pytest.TempPathFactory) -> Distributions:
    """The sdist and the wheel, built from a copy of the checkout."""
    return build(tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("dist"))
