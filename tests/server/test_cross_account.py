"""A stream read as another account's role (``Config(role_arn=...)``), on moto's server with IAM enforced.

The caller may use only DynamoDB and sts:AssumeRole; the role only reads Kinesis. Reading works
only if Kinesis calls go as the role and DynamoDB calls as the caller, and the role's credentials
are refreshed as they age.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import attrs
import boto3
import botocore.credentials
import botocore.exceptions
import pytest

from demo import servers
from demo.servers import LocalServer
from kinsumer import Config, ConfigError, Kinsumer
from kinsumer.aws import assumed_role
from tests.conftest import REGION, unique
from tests.server.conftest import SERVER_CONFIG

pytestmark = pytest.mark.server

CALLER_ARN = "arn:aws:iam::123456789012:user/caller"
SETUP_CALLS = 7  # the calls below that go before IAM is enforced
RECORDS = 60


def policy(*statements: dict[str, Any]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


@pytest.fixture
def enforcing(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[LocalServer, str, dict[str, str], str]]:
    """A moto server that enforces IAM after the setup: (server, stream, the caller's keys, the role's ARN)."""
    monkeypatch.setenv("INITIAL_NO_AUTH_ACTION_COUNT", str(SETUP_CALLS))
    with servers.moto_server() as server:
        monkeypatch.delenv("INITIAL_NO_AUTH_ACTION_COUNT")
        admin = {"endpoint_url": server.endpoint, "region_name": REGION, "aws_access_key_id": "setup",
                 "aws_secret_access_key": "setup"}  # fmt: skip
        kinesis, iam = boto3.client("kinesis", **admin), boto3.client("iam", **admin)
        stream = unique("theirs")
        kinesis.create_stream(StreamName=stream, ShardCount=2)  # 1
        kinesis.put_records(StreamName=stream, Records=[  # 2
            {"Data": json.dumps({"id": i}).encode(), "PartitionKey": f"k{i % 8}"} for i in range(RECORDS)
        ])  # fmt: skip
        iam.create_user(UserName="caller")  # 3
        key = iam.create_access_key(UserName="caller")["AccessKey"]  # 4
        iam.put_user_policy(UserName="caller", PolicyName="tables-and-the-role", PolicyDocument=policy(  # 5
            {"Effect": "Allow", "Action": ["dynamodb:*", "sts:AssumeRole"], "Resource": "*"},
        ))  # fmt: skip
        role = iam.create_role(RoleName="stream-reader", AssumeRolePolicyDocument=policy(  # 6
            {"Effect": "Allow", "Principal": {"AWS": CALLER_ARN}, "Action": "sts:AssumeRole"},
        ))["Role"]  # fmt: skip
        iam.put_role_policy(RoleName="stream-reader", PolicyName="read", PolicyDocument=policy(  # 7
            {"Effect": "Allow", "Action": ["kinesis:Describe*", "kinesis:List*", "kinesis:Get*"], "Resource": "*"},
        ))  # fmt: skip
        monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)  # STS, Kinesis and DynamoDB of the caller's session
        keys = {"aws_access_key_id": key["AccessKeyId"], "aws_secret_access_key": key["SecretAccessKey"]}
        yield server, stream, keys, role["Arn"]


def test_a_client_reads_a_stream_as_a_role_with_its_tables_on_its_own_credentials(
    enforcing: tuple[LocalServer, str, dict[str, str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, stream, keys, role_arn = enforcing
    caller = boto3.Session(region_name=REGION, **keys)
    with pytest.raises(botocore.exceptions.ClientError, match=r"AccessDenied|403"):
        caller.client("kinesis").list_shards(StreamName=stream)  # IAM is enforced: the caller cannot read it
    monkeypatch.setattr(assumed_role, "_DURATION", 900)  # within botocore's 15 minutes: renewed as used
    fetched = []
    fetch = botocore.credentials.AssumeRoleCredentialFetcher.fetch_credentials
    monkeypatch.setattr(
        botocore.credentials.AssumeRoleCredentialFetcher, "fetch_credentials",
        lambda self: fetched.append(1) or fetch(self),
    )  # fmt: skip
    config = attrs.evolve(SERVER_CONFIG, role_arn=role_arn)
    app = unique("app")
    k = Kinsumer(stream, app, "cross-account", config, session=caller)
    k.create_required_tables()
    got = []
    with k:
        while len(got) < RECORDS:
            record = k.next_record(timeout=60)
            assert record is not None
            got.append(json.loads(record.data)["id"])
    assert sorted(got) == list(range(RECORDS))  # nothing lost, nothing twice
    assert len(fetched) >= 2  # the role's credentials were assumed again as they aged
    tables = caller.client("dynamodb").list_tables()["TableNames"]
    assert f"{app}_checkpoints" in tables  # the tables are the caller's


def test_role_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"Config\.role_arn"):
        kinesis = boto3.client("kinesis", region_name=REGION, aws_access_key_id="a", aws_secret_access_key="b")
        Kinsumer("s", "app", "c", Config(role_arn="arn:aws:iam::123456789012:role/r"), kinesis=kinesis)
    with pytest.raises(ConfigError, match=r"Config\.external_id goes with role_arn"):
        Config(external_id="abc")


def test_the_spark_sources_processes_read_as_the_role_and_keep_the_ledger_on_their_own_credentials(
    enforcing: tuple[LocalServer, str, dict[str, str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What each Spark process (driver, executors) makes of ``roleArn``: its clients, from its own credentials."""
    pytest.importorskip("pyspark")
    from kinsumer.spark import clients as spark_clients
    from kinsumer.spark.options import SourceOptions

    server, stream, keys, role_arn = enforcing
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", keys["aws_access_key_id"])  # the process's own credentials
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", keys["aws_secret_access_key"])
    monkeypatch.delenv("AWS_ENDPOINT_URL")  # the options name every endpoint
    for cached in (spark_clients._session, spark_clients.kinesis_client, spark_clients._dynamodb):
        cached.cache_clear()  # made with other credentials by earlier tests of this process (and again after)
    endpoints = {"endpointUrl": server.endpoint, "dynamodbEndpointUrl": server.endpoint, "region": REGION}
    try:
        plain = SourceOptions.from_options({"streamName": stream, **endpoints})
        with pytest.raises(botocore.exceptions.ClientError, match=r"AccessDenied|403"):
            spark_clients.clients(plain)[0].list_shards(StreamName=stream)
        role = {"kinesis.stsRoleArn": role_arn, "kinesis.stsEndpointUrl": server.endpoint}
        options = SourceOptions.from_options({"streamName": stream, **endpoints, **role})
        kinesis, dynamodb = spark_clients.clients(options)
        assert len(kinesis.list_shards(StreamName=stream)["Shards"]) == 2  # as the role
        assert "TableNames" in dynamodb.list_tables()  # the ledger's calls: the process's own credentials
    finally:
        for cached in (spark_clients._session, spark_clients.kinesis_client, spark_clients._dynamodb):
            cached.cache_clear()
