"""The command line's AWS clients and its one-line error messages."""

from __future__ import annotations

import argparse
from typing import Any

import boto3
import botocore.config
import botocore.exceptions

from ..aws import records_parser
from ..aws.error_codes import error_code, error_message
from ..aws.stream_ref import StreamRef
from ..errors import KinsumerError

__all__ = ["add_aws_options", "clients", "describe_error", "service_client"]

_CONFIG = botocore.config.Config(connect_timeout=5, read_timeout=20, retries={"mode": "standard", "max_attempts": 5})


def add_aws_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """--region, --endpoint-url, --profile and per-service endpoints (None: the environment's)."""
    default = argparse.SUPPRESS if suppress else None
    group = parser.add_argument_group("AWS options (default: the standard AWS environment)")
    group.add_argument("--region", default=default, help="AWS region, e.g. us-east-1")
    group.add_argument("--profile", default=default, help="a profile of ~/.aws/config")
    group.add_argument(
        "--endpoint-url", default=default,
        help="endpoint for Kinesis and DynamoDB (and for S3 and SQS: kinsumer dead-letters) (a local server)",
    )  # fmt: skip
    group.add_argument("--kinesis-endpoint-url", default=default, help="endpoint for Kinesis only")
    group.add_argument("--dynamodb-endpoint-url", default=default, help="endpoint for DynamoDB only")


def clients(args: argparse.Namespace, stream: str | None = None) -> tuple[Any, Any]:
    """(kinesis, dynamodb) clients from the options and the environment; the Kinesis client in the region of
    ``stream`` if it is an ARN."""
    session = boto3.Session(profile_name=args.profile, region_name=args.region)
    kinesis_url = args.kinesis_endpoint_url or args.endpoint_url
    dynamodb_url = args.dynamodb_endpoint_url or args.endpoint_url
    region = StreamRef(stream, field="stream").region if stream else None
    kinesis = session.client("kinesis", region_name=region, endpoint_url=kinesis_url, config=_CONFIG)
    records_parser.install(kinesis)
    return kinesis, session.client("dynamodb", endpoint_url=dynamodb_url, config=_CONFIG)


def service_client(args: argparse.Namespace, service: str) -> Any:
    """A client of ``service`` (``s3``, ``sqs``) from the options and the environment; ``--endpoint-url``
    applies to it too (``AWS_ENDPOINT_URL_S3`` and the like, for one service only)."""
    session = boto3.Session(profile_name=args.profile, region_name=args.region)
    return session.client(service, endpoint_url=args.endpoint_url, config=_CONFIG)  # type: ignore[call-overload]


def describe_error(exc: BaseException) -> str | None:
    """One line saying what failed and what to do, or None for an unexpected error."""
    if isinstance(exc, KinsumerError):
        return str(exc)
    if isinstance(exc, botocore.exceptions.NoCredentialsError):
        return "no AWS credentials found: set AWS_PROFILE (or --profile) or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
    if isinstance(exc, botocore.exceptions.NoRegionError):
        return "no AWS region: pass --region or set AWS_DEFAULT_REGION"
    if isinstance(exc, botocore.exceptions.ProfileNotFound):
        return f"{exc}: check --profile / AWS_PROFILE"
    if isinstance(exc, botocore.exceptions.EndpointConnectionError):
        return f"cannot reach {exc.kwargs.get('endpoint_url')}: check --endpoint-url and that the service is up"
    if isinstance(exc, botocore.exceptions.ClientError):
        return f"{exc.operation_name} failed: {error_code(exc)}: {error_message(exc)}"
    if isinstance(exc, botocore.exceptions.BotoCoreError):
        return str(exc)
    return None
