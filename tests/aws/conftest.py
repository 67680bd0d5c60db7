from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from kinsumer.aws.tables import Tables, create_tables


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
