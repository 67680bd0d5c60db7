from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.core.botocore_stubber import BotocoreStubber

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


#: moto's in-process backends take no lock: a scan copying an item while another thread's update adds an
#: attribute to it fails ("dictionary changed size during iteration"), and two conditional writes can both
#: pass. AWS handles each request whole, so here one request at a time is handled (as demo/atomic_moto.py
#: does for moto's server).
_ONE_REQUEST_AT_A_TIME = threading.Lock()


def _serialised(process: Callable[..., Any]) -> Callable[..., Any]:
    def process_request(self: BotocoreStubber, request: Any) -> Any:
        with _ONE_REQUEST_AT_A_TIME:
            return process(self, request)

    return process_request


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(BotocoreStubber, "process_request", _serialised(BotocoreStubber.process_request))
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
