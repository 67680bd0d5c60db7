"""Enhanced fan-out consumers of a stream: register (idempotent, waits for ACTIVE), deregister.

Plain functions taking a boto3 Kinesis client. Every client of an application calls
:func:`ensure_stream_consumer` at ``run()``: the first registers the consumer, the others
(and later runs) find it. Deregistering is an administrator's explicit call, never a side
effect of stopping: other clients, or the next deployment, still read through it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import botocore.exceptions

from ..errors import KinsumerError
from ..stats import StatReceiver
from .error_codes import is_in_use, is_not_found
from .retry import retry_call

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient

__all__ = ["deregister_stream_consumer", "describe_stream_consumer", "ensure_stream_consumer", "stream_arn"]

#: Seconds between two looks at a consumer that is being created or deleted.
_POLL = 1.0


def stream_arn(identity: str) -> str:
    """The ARN in a stream identity (``ARN@creation ms``, see ``ensure_stream_active``)."""
    return identity.rsplit("@", 1)[0]


def describe_stream_consumer(kinesis: KinesisClient, stream: str, name: str) -> dict[str, Any] | None:
    """The consumer ``name`` of the stream with ARN ``stream`` (its description); None if absent."""
    try:
        return dict(kinesis.describe_stream_consumer(StreamARN=stream, ConsumerName=name)["ConsumerDescription"])
    except botocore.exceptions.ClientError as exc:
        if is_not_found(exc):
            return None
        raise


def ensure_stream_consumer(
    kinesis: KinesisClient,
    stream: str,
    name: str,
    *,
    timeout: float = 300.0,
    stats: StatReceiver | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """The ARN of the stream's consumer ``name`` once it is ACTIVE, registering it if absent.

    Several clients may call it at once: one registration wins, the others find it. A
    consumer being deleted is waited out and registered again. Raises :class:`KinsumerError`
    if it is not ACTIVE within ``timeout`` seconds (the stream's limit of consumers, say: 20, or 50 on an
    On-demand Advantage stream).
    """
    stats = stats or StatReceiver()
    deadline = time.monotonic() + timeout

    def call(fn: Callable[[], Any], operation: str) -> Any:
        return retry_call(fn, operation=operation, stats=stats, sleep=sleep, deadline=deadline)

    status = "absent"
    while time.monotonic() < deadline:
        found = call(lambda: describe_stream_consumer(kinesis, stream, name), "DescribeStreamConsumer")
        if found is None:
            try:
                call(lambda: kinesis.register_stream_consumer(StreamARN=stream, ConsumerName=name),
                     "RegisterStreamConsumer")  # fmt: skip
            except botocore.exceptions.ClientError as exc:
                if not is_in_use(exc):  # in use: registered (or deleted) by someone else just now
                    raise
            continue
        status = str(found.get("ConsumerStatus"))
        if status == "ACTIVE":
            return str(found["ConsumerARN"])
        sleep(_POLL * (0.5 + random.random()))
    raise KinsumerError(
        f"the enhanced fan-out consumer {name!r} of {stream} is not ACTIVE after {timeout:g} s (it is {status}); "
        "check the stream's consumers (at most 20 per stream, 50 on an On-demand Advantage stream) with "
        "'aws kinesis list-stream-consumers'"
    )


def deregister_stream_consumer(kinesis: KinesisClient, stream: str, name: str) -> bool:
    """Deregister the stream's consumer ``name``; False if there was none. Does not wait."""
    try:
        kinesis.deregister_stream_consumer(StreamARN=stream, ConsumerName=name)
    except botocore.exceptions.ClientError as exc:
        if is_not_found(exc):
            return False
        raise
    return True
