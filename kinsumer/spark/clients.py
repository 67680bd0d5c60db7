"""The AWS clients of a Spark process: made once per process and options."""

from __future__ import annotations

import functools
import threading
from typing import Any

import attrs
import boto3

from ..aws import event_stream, records_parser
from ..aws.assumed_role import assumed_role_session
from .options import Role, SourceOptions

__all__ = ["clients", "kinesis_client", "s3_client"]

# boto3 sessions are not thread-safe: clients are made one at a time
_making = threading.Lock()


def clients(options: SourceOptions) -> tuple[Any, Any]:
    """Kinesis and DynamoDB clients, made once per process and endpoints (boto3 clients do not pickle).

    Credentials come from the standard AWS chain of the process: on executors, set them with
    ``spark.executorEnv.*`` or give the hosts an instance role. With ``roleArn`` the Kinesis client
    acts as that role, assumed from them (and refreshed) by each process.
    """
    kinesis = kinesis_client(options.kinesis_region, options.endpoint_url, options.role)  # an ARN's region
    return kinesis, _dynamodb(options.region, options.dynamodb_endpoint_url)


@functools.lru_cache(maxsize=16)
def _session(region: str | None) -> Any:
    """One boto3 session per region for all the clients of a process: they share what it loaded once
    (the endpoint data, the credentials), which a session per client loads again (tens of ms each)."""
    return boto3.Session(region_name=region)


@functools.lru_cache(maxsize=16)
def kinesis_client(region: str | None, endpoint: str | None, role: Role | None = None) -> Any:
    """A Kinesis client for ``region`` and ``endpoint`` (None: the standard settings), acting as ``role`` if
    given, made once per process."""
    with _making:
        session = _session(region)
        if role is not None:
            arn, name, external_id, sts = attrs.astuple(role)
            session = assumed_role_session(session, arn, name, external_id, sts)
        kinesis = session.client("kinesis", endpoint_url=endpoint)
    records_parser.install(kinesis)
    event_stream.install(kinesis)  # enhanced fan-out (consumerName): kinsumer's own subscriptions only
    return kinesis


@functools.lru_cache(maxsize=16)
def _dynamodb(region: str | None, endpoint: str | None) -> Any:
    with _making:
        return _session(region).client("dynamodb", endpoint_url=endpoint)


@functools.lru_cache(maxsize=16)
def s3_client(options: SourceOptions) -> Any:
    """An S3 client for a ledger at ``s3://`` (endpoint from the standard settings, e.g. AWS_ENDPOINT_URL_S3)."""
    with _making:
        return _session(options.region).client("s3")
