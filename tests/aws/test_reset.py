"""Kinsumer.reset() on moto's in-process mock: what the plan says of the stream's retention."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from kinsumer import Kinsumer
from tests.aws.conftest import FAST


@pytest.fixture
def consumer(kinesis: Any, db: Any) -> Kinsumer:
    kinesis.create_stream(StreamName="clicks", ShardCount=2)  # moto keeps records 24 hours
    k = Kinsumer("clicks", "app", "admin", FAST, kinesis=kinesis, dynamodb=db)
    k.create_required_tables()
    return k


@pytest.mark.parametrize("to", ["TRIM_HORIZON", "LATEST"])
def test_a_reset_to_a_named_position_says_nothing_of_the_retention(consumer: Kinsumer, to: str) -> None:
    plan = consumer.reset(to)
    assert not plan.past_retention
    assert "retention" not in plan.describe()
    assert len(plan.shards) == 2


def test_a_reset_to_a_time_older_than_the_retention_says_every_shard_starts_at_its_trim_horizon(
    consumer: Kinsumer,
) -> None:
    two_days_ago = dt.datetime.now(dt.UTC) - dt.timedelta(days=2)
    plan = consumer.reset(two_days_ago)
    assert plan.past_retention
    assert plan.describe().splitlines()[-1] == (
        "the time is older than the stream's retention: every shard starts at its trim horizon"
    )
    an_hour_ago = consumer.reset(dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))
    assert not an_hour_ago.past_retention and "retention" not in an_hour_ago.describe()
