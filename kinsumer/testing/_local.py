"""LocalAWS: a stream service and tables in memory, side by side, and Kinsumers made on them."""

from __future__ import annotations

import time
from collections.abc import Callable

import attrs

from ..config import Config
from ..consumer import Kinsumer
from ._kinesis import LocalKinesis
from ._tables import LocalDynamoDB

__all__ = ["LocalAWS"]


@attrs.define(eq=False)
class LocalAWS:
    """An in-memory Kinesis and DynamoDB on one clock (epoch seconds; the wall clock by default).

    Pass them to any code that takes boto3 clients (``kinesis=aws.kinesis, dynamodb=aws.dynamodb``), or let
    :meth:`kinsumer` do it.
    """

    clock: Callable[[], float] = time.time
    kinesis: LocalKinesis = attrs.field(init=False)
    dynamodb: LocalDynamoDB = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.kinesis = LocalKinesis(clock=self.clock)
        self.dynamodb = LocalDynamoDB(clock=self.clock)

    def kinsumer(
        self, stream: str, application: str, client_name: str = "worker", config: Config | None = None
    ) -> Kinsumer:
        """A :class:`~kinsumer.Kinsumer` of ``application`` on ``stream`` with these clients (its tables not yet
        made: call ``create_required_tables()``, as on AWS)."""
        return Kinsumer(stream, application, client_name, config, kinesis=self.kinesis,  # type: ignore[arg-type]
                        dynamodb=self.dynamodb)  # type: ignore[arg-type]  # fmt: skip
