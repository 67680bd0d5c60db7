"""Records/s through ``next()`` against the ceiling (bare boto3 GetRecords loops) and a peer.

Every contender reads the same pre-filled stream from TRIM_HORIZON to its last record, one
after the other in the same run, doing the same per-record work (taking the payload). The
clock starts before the contender's first call (``run()`` for kinsumer, the first
GetShardIterator for the loops) and stops at the last record.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import uuid
from collections import Counter
from typing import Any

from demo.aggregation import aggregated_entries
from demo.servers import LocalServer
from kinsumer import Config, Kinsumer

from .common import HERE, Measure, new_stream, read_through_async_for, read_through_next, read_through_process

__all__ = [
    "Filled", "async_kinesis", "bare_loop", "bare_threads", "fill", "fill_aggregated", "fresh_client",
    "kinsumer_async_for", "kinsumer_next", "kinsumer_process",
]  # fmt: skip

PUT_BATCH = 500
GET_LIMIT = 10_000
AGGREGATES_PER_PUT = 100  # aggregates of 100 records of ~100 bytes: about 1.1 MB per PutRecords


class Filled:
    """A stream holding ``total`` records, and how many each shard got."""

    def __init__(self, server: LocalServer, stream: str, per_shard: dict[str, int], dynamodb: LocalServer) -> None:
        self.server = server
        self.dynamodb = dynamodb  # where kinsumer keeps its tables (kinesalite has no DynamoDB)
        self.stream = stream
        self.per_shard = per_shard
        self.total = sum(per_shard.values())


def fill(server: LocalServer, shards: int, records: int, size: int, dynamodb: LocalServer | None = None) -> Filled:
    """Create a stream of ``shards`` shards and put ``records`` records of ``size`` bytes."""
    kinesis = server.client("kinesis")
    stream = new_stream(kinesis, "bench", shards)
    per_shard: Counter[str] = Counter()
    pad = b"x" * max(0, size - 12)
    for start in range(0, records, PUT_BATCH):
        batch = [
            {"Data": b"%012d" % i + pad, "PartitionKey": f"key-{i}"}
            for i in range(start, min(records, start + PUT_BATCH))
        ]
        while batch:
            response = kinesis.put_records(StreamName=stream, Records=batch)
            per_shard.update(r["ShardId"] for r in response["Records"] if "ShardId" in r)
            batch = [e for e, r in zip(batch, response["Records"], strict=True) if "ErrorCode" in r]
    return Filled(server, stream, dict(per_shard), dynamodb or server)


def fill_aggregated(
    server: LocalServer, shards: int, records: int, size: int, per_record: int, dynamodb: LocalServer | None = None
) -> Filled:
    """Like :func:`fill`, with the records written as KPL aggregates of ``per_record`` user records."""
    kinesis = server.client("kinesis")
    stream = new_stream(kinesis, "bench-kpl", shards)
    pad = b"x" * max(0, size - 12)
    entries = []  # (PutRecords entry, user records in it)
    for start in range(0, records, per_record):
        users = [(f"key-{i}", b"%012d" % i + pad, None) for i in range(start, min(records, start + per_record))]
        (entry,) = aggregated_entries(users, per_record)
        entries.append((entry, len(users)))
    per_shard: Counter[str] = Counter()
    for start in range(0, len(entries), AGGREGATES_PER_PUT):
        batch = entries[start : start + AGGREGATES_PER_PUT]
        while batch:
            response = kinesis.put_records(StreamName=stream, Records=[entry for entry, _ in batch])
            for (_, count), answer in zip(batch, response["Records"], strict=True):
                if "ShardId" in answer:
                    per_shard[answer["ShardId"]] += count
            batch = [b for b, r in zip(batch, response["Records"], strict=True) if "ErrorCode" in r]
    return Filled(server, stream, dict(per_shard), dynamodb or server)


def _iterator(kinesis: Any, stream: str, shard_id: str) -> str:
    response = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON")
    return str(response["ShardIterator"])


def bare_loop(filled: Filled) -> Measure:
    """The ceiling, one thread: GetRecords round-robin over the shards."""
    kinesis = filled.server.client("kinesis")
    started, cpu = time.perf_counter(), time.process_time()
    iterators = {shard: _iterator(kinesis, filled.stream, shard) for shard in filled.per_shard}
    left = dict(filled.per_shard)
    sink = 0
    while iterators:
        for shard in list(iterators):
            response = kinesis.get_records(ShardIterator=iterators[shard], Limit=GET_LIMIT)
            for record in response["Records"]:
                sink += len(record["Data"])
            left[shard] -= len(response["Records"])
            if left[shard] <= 0:
                del iterators[shard]
            else:
                iterators[shard] = response["NextShardIterator"]
    return Measure(filled.total, time.perf_counter() - started, cpu=time.process_time() - cpu)


def bare_threads(filled: Filled) -> Measure:
    """The ceiling, a thread per shard (as kinsumer reads)."""
    kinesis = filled.server.client("kinesis")
    errors: list[BaseException] = []

    def read(shard: str, expected: int) -> None:
        try:
            iterator = _iterator(kinesis, filled.stream, shard)
            sink = 0
            while expected > 0:
                response = kinesis.get_records(ShardIterator=iterator, Limit=GET_LIMIT)
                for record in response["Records"]:
                    sink += len(record["Data"])
                expected -= len(response["Records"])
                iterator = response["NextShardIterator"]
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    started, cpu = time.perf_counter(), time.process_time()
    threads = [threading.Thread(target=read, args=item) for item in filled.per_shard.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return Measure(filled.total, time.perf_counter() - started, cpu=time.process_time() - cpu)


def fresh_client(filled: Filled, config: Config | None = None) -> Kinsumer:
    """A kinsumer client of a fresh application (its tables empty, so it starts at TRIM_HORIZON)."""
    app = f"bench-{uuid.uuid4().hex[:8]}"
    kinesis, dynamodb = filled.server.client("kinesis"), filled.dynamodb.client("dynamodb")
    return Kinsumer(filled.stream, app, "bench", config, kinesis=kinesis, dynamodb=dynamodb)


def kinsumer_next(filled: Filled, config: Config | None = None) -> Measure:
    """One kinsumer client through ``next()``."""
    return read_through_next(fresh_client(filled, config), filled.total)


def kinsumer_async_for(filled: Filled, config: Config | None = None) -> Measure:
    """One kinsumer client through ``async for`` in an asyncio program."""
    return read_through_async_for(fresh_client(filled, config), filled.total)


def kinsumer_process(filled: Filled, config: Config | None = None) -> Measure:
    """One kinsumer client through ``process()`` at concurrency 1."""
    return read_through_process(fresh_client(filled, config), filled.total)


def async_kinesis(filled: Filled, python: str | None) -> Measure | str:
    """async-kinesis in its own environment (``python``); a reason string if it can't run."""
    if python is None or not os.path.exists(python):
        return "not installed (make bench installs it in .venv-bench-peers)"
    command = [python, str(HERE / "peer_async_kinesis.py"), filled.server.endpoint, filled.stream, str(filled.total)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        return f"failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return Measure(int(result["records"]), float(result["seconds"]))
