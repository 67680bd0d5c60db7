from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from kinsumer import Config
from kinsumer.aws.tables import Tables, create_tables

#: Timings for the in-process tests: rounds every 0.25 s, a silent client is dead after 1 s.
FAST = Config(
    shard_check_frequency=0.25,
    client_record_max_age=1.0,
    commit_frequency=0.1,
    leader_action_frequency=0.5,
    throttle_delay=0.2,
    handoff_timeout=1,
)


@pytest.fixture
def aws() -> Iterator[None]:
    with mock_aws():
        yield


@pytest.fixture
def db(aws: None) -> Any:
    return boto3.client("dynamodb", region_name="us-east-1")


@pytest.fixture
def kinesis(aws: None) -> Any:
    return boto3.client("kinesis", region_name="us-east-1")


@pytest.fixture
def tables(db: Any) -> Tables:
    t = Tables.for_application("app")
    create_tables(db, t)
    return t
