"""LocalAWS: a stream service and tables in memory, side by side, and Kinsumers made on them; LocalStream: one
stream of it, as the ``kinsumer_stream`` fixture gives it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import attrs

from ..config import Config
from ..consumer import Kinsumer
from ._kinesis import LocalKinesis, Put
from ._stream import StoredRecord
from ._tables import LocalDynamoDB

__all__ = ["LocalAWS", "LocalStream"]


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

    def stream(self, name: str, shards: int = 2) -> LocalStream:
        """Make stream ``name`` of ``shards`` shards; it, with a few calls of its own."""
        self.kinesis.add_stream(name, shards)
        return LocalStream(self, name)


@attrs.frozen
class LocalStream:
    """Stream ``name`` of ``aws``: what the ``kinsumer_stream`` fixture gives a test. Its calls are
    :class:`LocalKinesis`'s for this stream; ``aws.kinesis`` has the rest."""

    aws: LocalAWS
    name: str

    def put(self, data: bytes | str, partition_key: str, explicit_hash_key: str | None = None) -> Put:
        """PutRecord: ``data`` (str: its UTF-8) with ``partition_key``; where it went."""
        return self.aws.kinesis.put(self.name, data, partition_key, explicit_hash_key)

    def put_all(self, records: Iterable[tuple[bytes | str, str]]) -> list[Put]:
        """Put each (data, partition key), in order; where each went."""
        return [self.put(data, key) for data, key in records]

    def put_aggregated(self, records: Iterable[tuple[bytes | str, str]], max_records: int | None = None) -> int:
        """Put the (data, partition key) user records as KPL aggregates (:meth:`LocalKinesis.put_aggregated`)."""
        return self.aws.kinesis.put_aggregated(self.name, records, max_records)

    def split(self, shard_id: str | None = None, at: int | None = None) -> tuple[str, str]:
        """Split ``shard_id`` (None: the first open shard) at hash key ``at`` (None: its middle); the children."""
        return self.aws.kinesis.split(self.name, shard_id or self.open_shards()[0], at)

    def merge(self, shard_id: str, adjacent_shard_id: str) -> str:
        """Merge two adjacent open shards; the child."""
        return self.aws.kinesis.merge(self.name, shard_id, adjacent_shard_id)

    def open_shards(self) -> list[str]:
        """The IDs of the open shards, by hash key range."""
        return self.aws.kinesis.open_shards(self.name)

    def records(self) -> list[StoredRecord]:
        """Every record stored, shard after shard."""
        return self.aws.kinesis.records(self.name)
