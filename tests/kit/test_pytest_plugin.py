"""kinsumer's pytest plugin: the fixtures kinsumer_stream and kinsumer_fleet, its pytest11 entry point, and that
it is loaded once in this suite (by the entry point, or by tests/conftest.py where that is not installed)."""

from __future__ import annotations

import configparser
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import kinsumer.testing.pytest_plugin
from kinsumer import Record
from kinsumer.testing import Fleet, LocalStream
from kinsumer.testing.pytest_plugin import FleetFactory

ROOT = pathlib.Path(__file__).parents[2]


def test_the_stream_is_the_tests_own_of_2_shards_named_after_the_test(kinsumer_stream: LocalStream) -> None:
    assert kinsumer_stream.name.startswith("test_the_stream_is_the_tests_own_of_2_shards_named_after_the_test-")
    assert len(kinsumer_stream.open_shards()) == 2 and kinsumer_stream.records() == []
    put = kinsumer_stream.put("hello", "user-1")
    assert [(r.shard_id, r.data) for r in kinsumer_stream.records()] == [(put.shard_id, b"hello")]


@pytest.mark.kinsumer_stream(shards=3)
@pytest.mark.parametrize("case", ["a/b [c]"])
def test_a_marker_gives_the_shards_and_any_test_name_makes_a_valid_stream_name(
    kinsumer_stream: LocalStream, case: str
) -> None:
    assert len(kinsumer_stream.open_shards()) == 3
    assert "[" not in kinsumer_stream.name and "/" not in kinsumer_stream.name


def test_a_fleet_made_by_the_factory_reads_the_tests_stream(
    kinsumer_stream: LocalStream, kinsumer_fleet: FleetFactory
) -> None:
    handled: list[bytes] = []

    def handler(record: Record) -> None:
        handled.append(record.data)

    kinsumer_stream.put_all((str(n), f"key-{n % 3}") for n in range(30))
    fleet = kinsumer_fleet(handler, application="counting")
    assert isinstance(fleet, Fleet) and (fleet.stream, fleet.application) == (kinsumer_stream.name, "counting")
    fleet.start(2)
    report = fleet.wait_handled()
    assert report.put == 30 and report.ok and sorted(handled, key=int) == [str(n).encode() for n in range(30)]


def test_the_plugin_is_loaded_once_under_its_entry_points_name(request: pytest.FixtureRequest) -> None:
    manager = request.config.pluginmanager
    names = [name for name, plugin in manager.list_name_plugin() if plugin is kinsumer.testing.pytest_plugin]
    assert names == ["kinsumer"]


def test_setup_cfg_declares_the_entry_point() -> None:
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    declared = [line.strip() for line in setup["options.entry_points"]["pytest11"].strip().splitlines()]
    assert declared == ["kinsumer = kinsumer.testing.pytest_plugin"]


def test_in_a_users_session_the_fleets_are_closed_at_the_tests_end_and_a_bad_marker_is_named(
    tmp_path: pathlib.Path,
) -> None:
    (tmp_path / "test_user.py").write_text(
        textwrap.dedent(
            """
            import pytest

            made = []

            def test_makes_a_fleet(kinsumer_stream, kinsumer_fleet):
                kinsumer_stream.put("x", "k")
                fleet = kinsumer_fleet(lambda record: None)
                fleet.start(2)
                fleet.wait_handled()
                made.append(fleet)

            def test_the_fleet_was_closed():
                (fleet,) = made
                assert fleet.members == []

            @pytest.mark.kinsumer_stream(shard=4)
            def test_bad_marker(kinsumer_stream):
                pass
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    command = [sys.executable, "-m", "pytest", "-p", "kinsumer.testing.pytest_plugin", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*command, "--strict-markers", "-q", "test_user.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert "2 passed, 1 error" in done.stdout, done.stdout + done.stderr
    assert "@pytest.mark.kinsumer_stream: takes shards=N only, not {'shard': 4}" in done.stdout
