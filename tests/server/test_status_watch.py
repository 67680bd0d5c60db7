"""``kinsumer status --watch``, through the command's main() on moto's server: successive blocks with a
time each when stdout is not a terminal, errors shown and the watch going on, Ctrl-C ending it with 0."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import pytest

from demo.servers import LocalServer
from kinsumer import cli
from kinsumer.status import read_status

pytestmark = pytest.mark.server


def status(server: LocalServer, *args: str) -> int:
    return cli.main(["status", *args, "--endpoint-url", server.endpoint])


def test_watch_prints_a_block_per_refresh_with_its_time(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = new_stream(2)
    assert status(moto_server, stream, app, "--watch", "0.1", "--watch-count", "3") == 0
    out = capsys.readouterr().out
    assert "\x1b[" not in out  # not a terminal: no escape sequences
    assert out.count(f"stream {stream}, application {app}") == 3
    parts = out.split("\n\n")
    stamps = [line for line in out.splitlines() if line[:4].isdigit() and "T" in line]
    assert len(stamps) == 3 and all(dt.datetime.fromisoformat(s).tzinfo is not None for s in stamps)
    assert len(parts) >= 3  # blank lines between the blocks (and inside each, between its sections)
    assert "OLDEST" in out


def test_watch_json_is_one_document_per_refresh(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = new_stream(1)
    assert status(moto_server, stream, app, "--json", "--watch", "0.1", "--watch-count", "2") == 0
    out = capsys.readouterr().out
    documents = [chunk.split("\n", 1)[1] for chunk in out.rstrip("\n").split("\n\n")]  # a time, then JSON
    assert [json.loads(d)["stream"] for d in documents] == [stream, stream]
    assert "oldest_record_age" in json.loads(documents[0])["shards"][0]


def test_watch_shows_an_error_and_goes_on(
    moto_server: LocalServer, new_stream: Callable[[int], str], capsys: pytest.CaptureFixture[str]
) -> None:
    stream = new_stream(1)
    assert status(moto_server, stream, "no-such-app", "--watch", "0.1", "--watch-count", "2") == 0
    out = capsys.readouterr().out
    assert out.count("error: ") == 2 and "no-such-app_" in out


def test_ctrl_c_ends_a_watch_with_0(
    moto_server: LocalServer,
    new_stream: Callable[[int], str],
    app: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stream = new_stream(1)
    reads = 0

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        nonlocal reads
        reads += 1
        if reads == 2:
            raise KeyboardInterrupt
        return read_status(*args, **kwargs)

    monkeypatch.setattr(cli, "read_status", interrupted)
    assert status(moto_server, stream, app, "--watch", "0.1") == 0
    assert reads == 2 and capsys.readouterr().out.count(f"stream {stream}") == 1


def test_watch_takes_a_positive_period(moto_server: LocalServer, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        status(moto_server, "s", "a", "--watch", "0")
    assert exited.value.code == 2
    assert "--watch must be >= 0.1" in capsys.readouterr().err
