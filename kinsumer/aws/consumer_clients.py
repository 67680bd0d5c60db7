"""A Kinsumer's Kinesis and DynamoDB clients: those given, checked, or made from a boto3 session.

The Kinesis client is made in the region of the streams' ARNs if they name one (else the session's), under
``Config.role_arn``'s role if set, with a connection pool sized for enhanced fan-out when it is on; either
way GetRecords is parsed in one pass (:mod:`.records_parser`). The command line makes its own
(``kinsumer.cli.aws``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import boto3
import botocore.config
import botocore.exceptions

from ..config import Config
from ..errors import ConfigError
from . import records_parser
from .assumed_role import assumed_role_session
from .stream_ref import StreamRef, reading_region

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kinesis import KinesisClient

__all__ = ["consumer_clients"]

_BOTO_CONFIG = botocore.config.Config(
    max_pool_connections=64,
    connect_timeout=5,
    read_timeout=20,
    retries={"mode": "standard", "max_attempts": 3},
    user_agent_extra="kinsumer",
)

#: With enhanced fan-out each owned shard holds a connection: more than 64 shards per client overflow
#: the default pool (urllib3 then discards the extra connections as they come back, with a warning each).
_FAN_OUT_CONFIG = _BOTO_CONFIG.merge(botocore.config.Config(max_pool_connections=2048))


def consumer_clients(
    refs: Sequence[StreamRef],
    config: Config,
    client_name: str,
    *,
    kinesis: KinesisClient | None,
    dynamodb: DynamoDBClient | None,
    session: boto3.Session | None,
) -> tuple[KinesisClient, DynamoDBClient]:
    """The (kinesis, dynamodb) clients of a Kinsumer reading ``refs``: those given (a Kinesis client of
    another region than the streams' ARNs is refused), the others made from ``session`` (or a default
    ``boto3.Session()``). Raises :class:`~kinsumer.ConfigError` for what cannot work."""
    if config.role_arn is not None and kinesis is not None:
        rule = "assumes the role for a Kinesis client kinsumer makes: pass either it or kinesis="
        raise ConfigError("Config.role_arn", rule, config.role_arn)
    if kinesis is not None:
        _check_client_region(kinesis, refs)
    if kinesis is None or dynamodb is None:
        session = session or boto3.Session()
        try:
            # enhanced fan-out: a connection per shard for minutes, so the pool keeps as many as come back
            reading = _BOTO_CONFIG if config.efo_consumer_name is None else _FAN_OUT_CONFIG
            region = reading_region(refs, session.region_name)  # an ARN's, else the session's
            if kinesis is None and config.role_arn is not None:  # the stream's account: its role
                name = config.role_session_name or _session_name(client_name)
                role = assumed_role_session(session, config.role_arn, name, config.external_id)
                kinesis = role.client("kinesis", region_name=region, config=reading)
            kinesis = kinesis or session.client("kinesis", region_name=region, config=reading)
            dynamodb = dynamodb or session.client("dynamodb", config=_BOTO_CONFIG)
        except botocore.exceptions.NoRegionError as exc:
            raise ConfigError(
                "region", "must be set: export AWS_DEFAULT_REGION or pass clients or a session", None
            ) from exc
    records_parser.install(kinesis)  # GetRecords parsed in one pass: see records_parser
    return kinesis, dynamodb


def _session_name(client_name: str) -> str:
    """The role session's default name: kinsumer-<client name>, in the characters and length STS takes."""
    return re.sub(r"[^\w+=,.@-]", "-", f"kinsumer-{client_name}")[:64]


def _check_client_region(kinesis: KinesisClient, refs: Sequence[StreamRef]) -> None:
    """Refuse a Kinesis client given for a stream ARN of another region: it would look for the stream in its own."""
    region = getattr(getattr(kinesis, "meta", None), "region_name", None)  # a client of one's own making may have none
    arn_region = reading_region(refs, region)
    if isinstance(region, str) and arn_region is not None and arn_region != region:
        rule = (
            f"is a client of region {region}, and the stream is in {arn_region} (its ARN says so): make the client "
            f"with region_name={arn_region!r}, or leave kinesis= out and kinsumer makes it there"
        )
        raise ConfigError("kinesis", rule, [ref.text for ref in refs if ref.region])
