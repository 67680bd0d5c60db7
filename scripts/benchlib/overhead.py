"""The library's own cost: reader → queue → ``next()`` fed by an in-memory Kinesis.

:class:`MemoryKinesis` answers the four Kinesis calls kinsumer makes from records built
once, shaped as botocore returns them, so no HTTP or parsing is measured. DynamoDB is the
moto server (its calls are periodic and off the record path).
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from typing import Any

from demo.servers import LocalServer
from kinsumer import Config, Kinsumer

from .common import Measure, read_through_next

__all__ = ["MemoryKinesis", "kinsumer_in_memory", "plain_loop_in_memory"]


class MemoryKinesis:
    """A stream of open shards holding fixed records; iterators are ``shard:position``."""

    def __init__(self, stream: str, shards: int, per_shard: int, size: int, keys: int | None = None) -> None:
        """``keys``: partition keys per shard, each record's the next in turn (None: a key per record)."""
        self.stream = stream
        arrival = dt.datetime.now(dt.UTC)
        pad = b"x" * max(0, size - 12)
        self.records: dict[str, list[dict[str, Any]]] = {}
        for s in range(shards):
            shard_id = f"shardId-{s:012d}"
            self.records[shard_id] = [
                {
                    "SequenceNumber": str(49_000_000_000_000_000_000_000_000_000 + i * 1000 + s),
                    "ApproximateArrivalTimestamp": arrival,
                    "Data": b"%012d" % (s * per_shard + i) + pad,
                    "PartitionKey": f"key-{i if keys is None else i % keys}",
                }
                for i in range(per_shard)
            ]
        self.total = shards * per_shard

    def describe_stream_summary(self, StreamName: str) -> dict[str, Any]:
        return {"StreamDescriptionSummary": {"StreamName": StreamName, "StreamStatus": "ACTIVE"}}

    def list_shards(self, **params: Any) -> dict[str, Any]:
        return {
            "Shards": [
                {
                    "ShardId": shard_id,
                    "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "1"},
                    "SequenceNumberRange": {"StartingSequenceNumber": records[0]["SequenceNumber"]},
                }
                for shard_id, records in self.records.items()
            ]
        }

    def get_shard_iterator(self, *, ShardId: str, ShardIteratorType: str, **params: Any) -> dict[str, Any]:
        position = 0
        if ShardIteratorType == "AFTER_SEQUENCE_NUMBER":
            after = int(params["StartingSequenceNumber"])
            position = sum(1 for r in self.records[ShardId] if int(r["SequenceNumber"]) <= after)
        return {"ShardIterator": f"{ShardId}:{position}"}

    def get_records(self, *, ShardIterator: str, Limit: int = 10_000) -> dict[str, Any]:
        shard_id, position_text = ShardIterator.rsplit(":", 1)
        position = int(position_text)
        page = self.records[shard_id][position : position + Limit]
        return {
            "Records": page,
            "NextShardIterator": f"{shard_id}:{position + len(page)}",
            "MillisBehindLatest": 0,
        }


def plain_loop_in_memory(kinesis: MemoryKinesis) -> Measure:
    """The same records taken straight from the fake: what the fake itself costs."""
    started = time.perf_counter()
    sink = 0
    for shard_id in kinesis.records:
        iterator = kinesis.get_shard_iterator(ShardId=shard_id, ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        while True:
            response = kinesis.get_records(ShardIterator=iterator)
            if not response["Records"]:
                break
            for record in response["Records"]:
                sink += len(record["Data"])
            iterator = response["NextShardIterator"]
    return Measure(kinesis.total, time.perf_counter() - started)


def kinsumer_in_memory(server: LocalServer, kinesis: MemoryKinesis, config: Config | None = None) -> Measure:
    """One client through ``next()`` over the in-memory stream (DynamoDB on ``server``)."""
    app = f"bench-{uuid.uuid4().hex[:8]}"
    k = Kinsumer(kinesis.stream, app, "bench", config, kinesis=kinesis, dynamodb=server.client("dynamodb"))  # type: ignore[arg-type]
    return read_through_next(k, kinesis.total)
