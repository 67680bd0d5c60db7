"""Enhanced fan-out against polling, on kinesis-mock, in the same run.

Latency: one client on a 4-shard stream while a producer puts one record every 20 ms carrying
its send time; put → ``next()`` of the records sent in a window, after a warm-up. Throughput:
records written beforehand, read through ``next()`` (see ``read_through_next``). Threads: one
fan-out client on streams of more and more shards, every shard subscribed, a record written to
each and read: the most threads the process ran meanwhile. Each reading mode runs on a stream
of its own; DynamoDB is moto's server.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from demo.servers import LocalServer
from kinsumer import Config, Kinsumer

from .common import Measure, PutToNext, new_stream, read_through_next

__all__ = ["MODES", "SHARDS", "THREAD_SHARDS", "WINDOW", "latencies", "threads", "throughput"]

SHARDS = 4
INTERVAL = 0.02  # seconds between two puts
WARM_UP = 5.0
WINDOW = 20.0
#: The reading modes compared: polling with the default settings, and fan-out.
MODES = {"polling": Config(), "fan-out": Config(efo_consumer_name="bench")}
#: The shards of the streams the threads of a fan-out client are counted on.
THREAD_SHARDS = (8, 80, 256)


def _client(kinesis: LocalServer, dynamodb: LocalServer, stream: str, config: Config) -> Kinsumer:
    app = f"fanout-{uuid.uuid4().hex[:8]}"
    clients = {"kinesis": kinesis.client("kinesis"), "dynamodb": dynamodb.client("dynamodb")}
    return Kinsumer(stream, app, "bench", config, **clients)


def latencies(kinesis: LocalServer, dynamodb: LocalServer, mode: str) -> list[float]:
    """Seconds put → ``next()``, sorted, of the records sent during the window."""
    client = kinesis.client("kinesis")
    stream = new_stream(client, f"latency-{mode}", SHARDS)
    k = _client(kinesis, dynamodb, stream, MODES[mode])
    k.create_required_tables()
    timing = PutToNext(client, stream, INTERVAL)
    reader = threading.Thread(target=timing.consume, args=(k,))
    k.run()
    reader.start()
    timing.start()
    try:
        time.sleep(WARM_UP)
        timing.measure(WINDOW)
    finally:
        timing.stop()
        k.stop()
        reader.join()
        k.delete_tables()
        client.delete_stream(StreamName=stream, EnforceConsumerDeletion=True)
    return timing.latencies()


def throughput(kinesis: LocalServer, dynamodb: LocalServer, mode: str, records: int, size: int) -> Measure:
    """``records`` of ``size`` bytes written first, then read through ``next()``."""
    client = kinesis.client("kinesis")
    stream = new_stream(client, f"fanout-{mode}", SHARDS)
    body = b"x" * size
    for start in range(0, records, 500):
        batch = [{"Data": body, "PartitionKey": f"k{i}"} for i in range(start, min(records, start + 500))]
        while batch:
            answer = client.put_records(StreamName=stream, Records=batch)
            batch = [e for e, r in zip(batch, answer["Records"], strict=True) if "ErrorCode" in r]
    try:
        return read_through_next(_client(kinesis, dynamodb, stream, MODES[mode]), records)
    finally:
        client.delete_stream(StreamName=stream, EnforceConsumerDeletion=True)


def threads(kinesis: LocalServer, dynamodb: LocalServer, shards: int) -> int:
    """The most threads the process ran while one fan-out client subscribed to ``shards`` shards and read a
    record from each (the process's own threads included: the benchmark's main thread, the servers' pipes)."""
    client = kinesis.client("kinesis")
    stream = new_stream(client, f"threads-{shards}", shards)
    k = _client(kinesis, dynamodb, stream, MODES["fan-out"])
    k.create_required_tables()
    most = threading.active_count()
    try:
        k.run()
        deadline = time.monotonic() + 120
        while sum(1 for s in k.status().shards if s.captured) < shards:
            most = max(most, threading.active_count())
            if time.monotonic() > deadline:
                raise RuntimeError(f"not every one of {shards} shards was subscribed within 120 s")
            time.sleep(0.1)
        for listed in _shards(client, stream):
            low, high = int(listed["HashKeyRange"]["StartingHashKey"]), int(listed["HashKeyRange"]["EndingHashKey"])
            key = str((low + high) // 2)
            client.put_record(StreamName=stream, Data=b"x", PartitionKey="k", ExplicitHashKey=key)
        for _ in range(shards):
            if k.next(timeout=60) is None:
                raise RuntimeError("the consumer stopped")
            most = max(most, threading.active_count())
    finally:
        k.stop()
        k.delete_tables()
        client.delete_stream(StreamName=stream, EnforceConsumerDeletion=True)
    return most


def _shards(client: Any, stream: str) -> list[dict[str, Any]]:
    """Every shard of ``stream`` (ListShards gives 100 at a time)."""
    shards: list[dict[str, Any]] = []
    params: dict[str, Any] = {"StreamName": stream}
    while True:
        page = client.list_shards(**params)
        shards += page["Shards"]
        if not page.get("NextToken"):
            return shards
        params = {"NextToken": page["NextToken"]}
