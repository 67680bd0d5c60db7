"""Steady state at a low rate: end-to-end latency (put → ``next()``) and DynamoDB calls.

Two clients (default config) share an 8-shard stream while a producer puts one record every
20 ms carrying its send time. After a warm-up, each client's DynamoDB calls are counted with
a botocore ``before-call`` hook for ``WINDOW`` seconds, and every delivery's latency noted.
Then the producer stops and the calls are counted again for ``WINDOW`` seconds: idle. The same
with the clients running ``process(handler)``: its crash-loop guard writes with the commits.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import attrs

from demo.servers import LocalServer
from kinsumer import Kinsumer

from .common import PutToNext, new_stream

__all__ = ["CallCounter", "SteadyState", "steady_state"]

SHARDS = 8
INTERVAL = 0.02  # seconds between two puts
WARM_UP = 8.0
WINDOW = 30.0


@attrs.frozen
class SteadyState:
    latencies: tuple[float, ...]  # seconds, put → next(), of records put during the window
    dynamodb_calls_per_minute: tuple[float, ...]  # per client, records flowing into every shard
    idle_calls_per_minute: tuple[float, ...]  # per client, nothing written to the stream


class CallCounter:
    def __init__(self) -> None:
        self.counting = False
        self.calls = 0

    def __call__(self, **kwargs: Any) -> None:
        if self.counting:
            self.calls += 1


def steady_state(server: LocalServer, handler: bool = False) -> SteadyState:
    """``handler``: the clients run ``process(handler)`` instead of a ``next()`` loop."""
    kinesis = server.client("kinesis")
    stream, app = new_stream(kinesis, "steady", SHARDS), f"steady-{uuid.uuid4().hex[:8]}"
    counters, clients = [], []
    for n in range(2):
        dynamodb = server.client("dynamodb")
        counter = CallCounter()
        dynamodb.meta.events.register("before-call.dynamodb", counter)
        counters.append(counter)
        clients.append(Kinsumer(stream, app, f"steady-{n}", kinesis=server.client("kinesis"), dynamodb=dynamodb))
    clients[0].create_required_tables()
    timing = PutToNext(kinesis, stream, INTERVAL)
    for k in clients:
        k.run()
    readers = [threading.Thread(target=timing.handle if handler else timing.consume, args=(k,)) for k in clients]
    for thread in readers:
        thread.start()
    timing.start()
    try:
        time.sleep(WARM_UP)  # the clients share the shards and settle
        for counter in counters:
            counter.counting = True
        timing.measure(WINDOW)
        busy = [c.calls for c in counters]
        timing.stop()
        time.sleep(2.0 + 3.0)  # the last records arrive, and their commits are made
        for counter in counters:
            counter.calls = 0
        time.sleep(WINDOW)
        idle = [c.calls for c in counters]
        for counter in counters:
            counter.counting = False
    finally:
        timing.stop()
        for k in clients:
            k.stop()
        for thread in readers:
            thread.join()
        clients[0].delete_tables()
        kinesis.delete_stream(StreamName=stream)
    return SteadyState(
        tuple(timing.latencies()), tuple(n * 60 / WINDOW for n in busy), tuple(n * 60 / WINDOW for n in idle)
    )
