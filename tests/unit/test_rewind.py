"""The times a reset starts at, and the plan an operator is shown."""

from __future__ import annotations

import datetime as dt

import pytest

from kinsumer import ConfigError
from kinsumer.coordination.rewind import ResetPlan, ShardReset, reset_time


def test_the_positions_a_reset_takes() -> None:
    now = dt.datetime(2026, 11, 25, 10, 0, tzinfo=dt.UTC)
    assert reset_time("TRIM_HORIZON") == 0
    assert reset_time("LATEST", now=now) == int(now.timestamp() * 1000)
    assert reset_time(now - dt.timedelta(hours=1)) == int(now.timestamp() * 1000) - 3_600_000
    with pytest.raises(ConfigError, match="aware datetime"):
        reset_time(dt.datetime(2026, 11, 25, 10, 0))  # naive: which time zone?
    with pytest.raises(ConfigError, match="TRIM_HORIZON, LATEST"):
        reset_time("EARLIEST")


def test_the_plan_shows_each_shard_from_where_it_stands_to_where_it_starts() -> None:
    plan = ResetPlan(
        "clicks", "arn@1",
        (
            ShardReset("shardId-000000000000", None, True, 0),
            ShardReset("shardId-000000000001", ("495", 3), False, 0),
            ShardReset("shardId-000000000002", None, False, 1_764_064_800_000),
        ),
        past_retention=True,
    )  # fmt: skip
    lines = plan.describe().splitlines()
    assert lines[1].split() == ["shardId-000000000000", "finished", "TRIM_HORIZON"]
    assert lines[2].split() == ["shardId-000000000001", "after", "495:3", "TRIM_HORIZON"]
    assert lines[3].split() == ["shardId-000000000002", "no", "checkpoint", "2025-11-25T10:00:00.000+00:00"]
    assert "older than the stream's retention" in lines[4]
