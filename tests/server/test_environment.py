"""Without clients, a Kinsumer builds its own from the standard AWS environment."""

from __future__ import annotations

import boto3
import pytest

from demo.servers import LocalServer
from kinsumer import Config, Kinsumer
from tests.conftest import unique

pytestmark = pytest.mark.server

FAST = Config(
    shard_check_frequency=0.25,
    client_record_max_age=1.0,
    commit_frequency=0.1,
    leader_action_frequency=0.5,
    handoff_timeout=1,
)


def test_aws_endpoint_url_and_region_from_the_environment(
    moto_server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server.endpoint)
    stream, app = unique("stream"), unique("app")
    kinesis = moto_server.client("kinesis")
    kinesis.create_stream(StreamName=stream, ShardCount=1)
    kinesis.get_waiter("stream_exists").wait(StreamName=stream, WaiterConfig={"Delay": 0.2})
    kinesis.put_record(StreamName=stream, Data=b"from-env", PartitionKey="k")
    k = Kinsumer(stream, app, "worker", FAST)  # no clients, no session
    k.create_required_tables()
    with k:
        assert k.next(timeout=10) == b"from-env"
    k.delete_tables()
    k.delete_tables()  # idempotent
    assert not [t for t in moto_server.client("dynamodb").list_tables()["TableNames"] if t.startswith(app)]


def test_a_session_is_used_for_both_clients(moto_server: LocalServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server.endpoint)
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    stream, app = unique("stream"), unique("app")
    moto_server.client("kinesis").create_stream(StreamName=stream, ShardCount=1)
    session = boto3.Session(region_name="us-east-1")
    k = Kinsumer(stream, app, "worker", FAST, session=session)
    k.create_required_tables()
    with k, pytest.raises(TimeoutError):
        k.next(timeout=0.5)
