"""The AWS clients of a Spark process: made once per process and options."""

from __future__ import annotations

import functools
from typing import Any

import boto3

from ..aws import event_stream, records_parser
from .options import SourceOptions

__all__ = ["clients", "s3_client"]


def clients(options: SourceOptions) -> tuple[Any, Any]:
    """Kinesis and DynamoDB clients, made once per process and endpoints (boto3 clients do not pickle).

    Credentials come from the standard AWS chain of the process: on executors, set them with
    ``spark.executorEnv.*`` or give the hosts an instance role.
    """
    return _clients(options.region, options.endpoint_url, options.dynamodb_endpoint_url)


@functools.lru_cache(maxsize=16)
def _clients(region: str | None, kinesis_endpoint: str | None, dynamodb_endpoint: str | None) -> tuple[Any, Any]:
    session = boto3.Session(region_name=region)
    kinesis = session.client("kinesis", endpoint_url=kinesis_endpoint)
    records_parser.install(kinesis)
    event_stream.install(kinesis)  # enhanced fan-out (consumerName): kinsumer's own subscriptions only
    dynamodb = session.client("dynamodb", endpoint_url=dynamodb_endpoint)
    return kinesis, dynamodb


@functools.lru_cache(maxsize=16)
def s3_client(options: SourceOptions) -> Any:
    """An S3 client for a ledger at ``s3://`` (endpoint from the standard settings, e.g. AWS_ENDPOINT_URL_S3)."""
    return boto3.Session(region_name=options.region).client("s3")
