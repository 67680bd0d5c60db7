"""``process()`` measured over the in-memory Kinesis: a hot shard by key, and the cost per record of its options."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any, Protocol

from kinsumer import Config, Failure, Kinsumer, Record

from .common import Measure
from .overhead import MemoryKinesis

__all__ = ["Clients", "process_in_memory"]


class Clients(Protocol):
    """Where the DynamoDB client comes from (a :class:`~demo.servers.LocalServer`, say)."""

    def client(self, service: str) -> Any: ...


def process_in_memory(
    server: Clients, kinesis: MemoryKinesis, work: float = 0.0, *, config: Config | None = None, **options: Any
) -> Measure:
    """One client's ``process(handler, **options)`` over the in-memory stream until every record is handled;
    the handler sleeps ``work`` seconds (a call waiting on I/O). The clock runs from ``run()`` to the last record."""
    app = f"bench-{uuid.uuid4().hex[:8]}"
    k = Kinsumer(kinesis.stream, app, "bench", config, kinesis=kinesis, dynamodb=server.client("dynamodb"))  # type: ignore[arg-type]
    lock = threading.Lock()
    handled = [0]
    first: list[float] = []
    ended: list[float] = []
    first_cpu: list[float] = []  # the process's CPU time at the first record and the last
    ended_cpu: list[float] = []

    def handler(record: Record) -> None:
        if work:
            time.sleep(work)
        with lock:
            handled[0] += 1
            if not first:
                first.append(time.perf_counter())
                first_cpu.append(time.process_time())
            if handled[0] == kinesis.total:
                ended.append(time.perf_counter())
                ended_cpu.append(time.process_time())
                threading.Thread(target=k.stop, daemon=True).start()

    def sink(failure: Failure) -> None:
        raise RuntimeError(f"a record failed in the benchmark: {failure.error}")

    k.create_required_tables()
    try:
        started, cpu = time.perf_counter(), time.process_time()
        with k:
            k.process(handler, dead_letter=sink, **options)
        cpu = time.process_time() - cpu
    finally:
        k.delete_tables()
    if not ended:
        raise RuntimeError(f"process() returned after {handled[0]} of {kinesis.total} records")
    steady = ended_cpu[0] - first_cpu[0]
    return Measure(kinesis.total, ended[0] - started, startup=first[0] - started, cpu=cpu, steady_cpu=steady)
