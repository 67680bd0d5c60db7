"""`make test` runs the tests of client processes on one xdist worker, and the Spark tests on another
(tests/conftest.py): on a 2-core machine, several Spark clusters or several sets of client processes
at once starve each other. pytest 9.2 with pytest-xdist 3.8 lost the groups without a word (every test
ran on every worker): this says so."""

from __future__ import annotations

import pytest


def test_the_process_tests_run_on_one_worker(request: pytest.FixtureRequest) -> None:
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not run by xdist with --dist loadgroup")
    assert request.node.nodeid.endswith("@procs"), (
        f"{request.node.nodeid}: xdist did not group this test; check the pins of pytest and pytest-xdist"
    )
