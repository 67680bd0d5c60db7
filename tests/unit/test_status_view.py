"""kinsumer status's table: what a shard's state says."""

from __future__ import annotations

from kinsumer.cli.status_view import render
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
