"""Enhanced fan-out against polling, on kinesis-mock, in the same run.

Latency: one client on a 4-shard stream while a producer puts one record every 20 ms carrying
its send time; put → ``next()`` of the records sent in a window, after a warm-up. Throughput:
records written beforehand, read through ``next()`` (see ``read_through_next``). Each reading
mode runs on a stream of its own; DynamoDB is moto's server.
"""

from __future__ import annotations

import threading
import time
import uuid

from demo.servers import LocalServer
from kinsumer import Config, Kinsumer

from .common import Measure, PutToNext, new_stream, read_through_next

__all__ = ["MODES", "SHARDS", "WINDOW", "latencies", "throughput"]

SHARDS = 4
INTERVAL = 0.02  # seconds between two puts
WARM_UP = 5.0
WINDOW = 20.0
#: The reading modes compared: polling with the default settings, and fan-out.
MODES = {"polling": Config(), "fan-out": Config(efo_consumer_name="bench")}


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
