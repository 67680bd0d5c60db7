"""The AWS clients of a Spark process: made once per process and options."""

from __future__ import annotations

import functools
from typing import Any

import boto3

from ..aws import records_parser
from .options import SourceOptions

__all__ = ["clients", "s3_client"]


@functools.lru_cache(maxsize=16)
def clients(options: SourceOptions) -> tuple[Any, Any]:
    """Kinesis and DynamoDB clients, made once per process (boto3 clients do not pickle).

    Credentials come from the standard AWS chain of the process: on executors, set them with
    ``spark.executorEnv.*`` or give the hosts an instance role.
    """
    session = boto3.Session(region_name=options.region)
    kinesis = session.client("kinesis", endpoint_url=options.endpoint_url)
    records_parser.install(kinesis)
    dynamodb = session.client("dynamodb", endpoint_url=options.dynamodb_endpoint_url)
    return kinesis, dynamodb


@functools.lru_cache(maxsize=16)
def s3_client(options: SourceOptions) -> Any:
    """An S3 client for a ledger at ``s3://`` (endpoint from the standard settings, e.g. AWS_ENDPOINT_URL_S3)."""
    return boto3.Session(region_name=options.region).client("s3")
