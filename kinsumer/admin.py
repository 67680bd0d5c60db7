"""An application's administration: its tables, resets, enhanced fan-out consumers.

Plain functions taking the boto3 clients (as the Go library's table operations take the client), so that
:class:`~kinsumer.Kinsumer`'s admin calls (``create_required_tables()``, ``delete_tables()``, ``reset()``,
``deregister_stream_consumer()``) and the ``kinsumer`` command (``create-tables``, ``delete-tables``,
``reset``, ``efo deregister``) follow one rule each. They raise what the calls raise: the Kinsumer turns
every failure into a :class:`~kinsumer.KinsumerError` (:func:`as_kinsumer_error`), the command line says it in
one line.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, TypeVar, overload

from .aws import stream_consumers
from .aws import tables as aws_tables
from .aws.error_codes import to_kinsumer_error
from .aws.kinesis import ensure_stream_active
from .aws.tables import Tables
from .config import validate_application_name
from .coordination.rewind import ResetPlan, apply_reset, plan_reset
from .errors import KinsumerError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kinesis import KinesisClient

__all__ = [
    "application_tables",
    "as_kinsumer_error",
    "create_tables",
    "delete_tables",
    "deregister_stream_consumer",
    "reset",
]

log = logging.getLogger("kinsumer")
T = TypeVar("T")


def application_tables(application_name: str) -> Tables:
    """The tables of ``application_name``, the name checked (:class:`~kinsumer.ConfigError`)."""
    validate_application_name(application_name)
    return Tables.for_application(application_name)


def create_tables(
    dynamodb: DynamoDBClient,
    tables: Tables,
    *,
    billing_mode: str = "PAY_PER_REQUEST",
    read_capacity: int = 10,
    write_capacity: int = 10,
) -> None:
    """Create the application's three tables if missing (capacities with ``"PROVISIONED"`` only); wait until
    they are ACTIVE. Idempotent."""
    aws_tables.create_tables(
        dynamodb, tables, billing_mode=billing_mode, read_capacity=read_capacity, write_capacity=write_capacity
    )


def delete_tables(dynamodb: DynamoDBClient, tables: Tables) -> None:
    """Delete the application's tables (and with them every checkpoint); wait until they are gone. Idempotent."""
    aws_tables.delete_tables(dynamodb, tables)


@overload
def reset(
    kinesis: KinesisClient,
    dynamodb: DynamoDBClient,
    stream: str,
    application_name: str,
    to: str | dt.datetime,
    *,
    shards: Sequence[str] | None = None,
    max_age: float,
    confirm: None = None,
) -> ResetPlan: ...


@overload
def reset(
    kinesis: KinesisClient,
    dynamodb: DynamoDBClient,
    stream: str,
    application_name: str,
    to: str | dt.datetime,
    *,
    shards: Sequence[str] | None = None,
    max_age: float,
    confirm: Callable[[ResetPlan], bool],
) -> ResetPlan | None: ...


def reset(
    kinesis: KinesisClient,
    dynamodb: DynamoDBClient,
    stream: str,
    application_name: str,
    to: str | dt.datetime,
    *,
    shards: Sequence[str] | None = None,
    max_age: float,
    confirm: Callable[[ResetPlan], bool] | None = None,
) -> ResetPlan | None:
    """Reset ``application_name`` on ``stream`` (a name or an ARN): each shard (of ``shards``, default all)
    starts over at ``to`` (``"TRIM_HORIZON"``, ``"LATEST"`` or an aware datetime). Planned first, then, if
    ``confirm(plan)`` says so (no ``confirm``: at once), written. Refused (KinsumerError, naming them) while a
    client of the application is live, seen within ``max_age`` seconds. Returns the plan written; None if
    ``confirm`` said no (nothing written)."""
    plan = plan_reset(kinesis, dynamodb, stream, application_name, to, shards=shards, max_age=max_age)
    if confirm is not None and not confirm(plan):
        return None
    apply_reset(dynamodb, application_name, plan, max_age=max_age)
    log.info("reset %s on %s to %s (%d shards)", application_name, plan.stream, to, len(plan.shards))
    return plan


def deregister_stream_consumer(kinesis: KinesisClient, streams: Iterable[str], name: str) -> bool:
    """Deregister the enhanced fan-out consumer ``name`` of each of ``streams`` (names or ARNs; each must be
    ACTIVE). Returns False if it was registered on none. Does not wait."""
    found = False
    for stream in streams:
        arn = stream_consumers.stream_arn(ensure_stream_active(kinesis, stream))
        found = stream_consumers.deregister_stream_consumer(kinesis, arn, name) or found
    return found


def as_kinsumer_error(operation: str, action: Callable[[], T]) -> T:
    """``action()``'s result, every failure raised as a KinsumerError (naming ``operation``)."""
    try:
        return action()
    except KinsumerError:
        raise
    except Exception as exc:
        raise to_kinsumer_error(exc, operation) from exc
