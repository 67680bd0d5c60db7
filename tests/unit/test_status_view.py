"""kinsumer status's table: what a shard's state says."""

from __future__ import annotations

import io

from kinsumer.cli.status_view import CLEAR_BELOW, HOME, render, watch
from kinsumer.status import ApplicationStatus, ShardInfoRow


def shard(**fields: object) -> ShardInfoRow:
    base: dict[str, object] = dict(
        shard_id="shardId-000000000000", consumable=True, closed=False, owner_id="c1", owner_name="worker-1",
        checkpoint="49590338271490256608559692538361571095921575989136588898", finished=False,
        millis_behind_latest=0, last_update_age=1.0,
    )  # fmt: skip
    return ShardInfoRow(**{**base, **fields})  # type: ignore[arg-type]


def test_a_shard_retrying_a_record_or_under_the_crash_loop_guard_says_so() -> None:
    status = ApplicationStatus(
        "clicks", "app", (), None, None, (), None,
        (shard(retrying="attempt 2: ValueError"), shard(shard_id="shardId-000000000001", careful=True), shard()),
    )  # fmt: skip
    lines = render(status).splitlines()
    assert any("shardId-000000000000" in line and "retrying a record (attempt 2: ValueError)" in line for line in lines)
    assert any("shardId-000000000001" in line and "crash-loop guard on" in line for line in lines)
    assert sum("retrying" in line or "guard" in line for line in lines) == 2


def test_a_paused_shard_says_for_how_long() -> None:
    status = ApplicationStatus(
        "clicks", "app", (), None, None, (), None,
        (shard(paused_for=42.4), shard(shard_id="shardId-000000000001")),
    )  # fmt: skip
    lines = render(status).splitlines()
    assert any("shardId-000000000000" in line and "paused for 42 s" in line for line in lines)
    assert sum("paused" in line for line in lines) == 1


def test_a_long_handler_call_and_expired_records_show() -> None:
    status = ApplicationStatus(
        "clicks", "app", (), None, None, (), None, (shard(oldest_call_age=75.2, expired=12),)
    )  # fmt: skip
    (line,) = [line for line in render(status).splitlines() if "shardId-000000000000" in line]
    assert "a handler call under way for 75 s" in line and "12 expired" in line


def test_a_watch_in_a_terminal_refreshes_in_place() -> None:
    out, texts, slept = io.StringIO(), iter(["one\nlong line", "two"]), []
    watch(lambda: next(texts), 2.0, out, tty=True, count=2, sleep=slept.append)
    first, second = out.getvalue().split(HOME)[1:]
    assert first.endswith(CLEAR_BELOW) and "one\x1b[K\nlong line\x1b[K\n" in first
    assert "two\x1b[K\n" in second and "long line" not in second  # what the last refresh showed is cleared
    assert "every 2 s, Ctrl-C to stop" in second
    assert len(slept) == 1 and 0 < slept[0] <= 2.0  # no wait after the last refresh


def test_a_watch_shows_an_error_in_place_of_the_block() -> None:
    def failing() -> str:
        raise RuntimeError("table unreachable")

    out = io.StringIO()
    watch(failing, 0.1, out, tty=False, count=2, sleep=lambda seconds: None)
    assert out.getvalue().count("error: table unreachable") == 2
