"""Fail-over: seconds from SIGKILL of a client until a survivor delivers from each of its shards.

Two client processes share a 4-shard stream on a moto server while a producer writes about
400 records/s. Once each client delivers from its own shards, one is killed; the clock stops
when the other has delivered a record from every shard the killed one was reading.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable

from demo.servers import LocalServer
from kinsumer import Kinsumer

from .common import HERE, REPO, new_stream

__all__ = ["failover_seconds"]

SHARDS = 4
RECENT = 1.5  # seconds: a shard a client delivered from this recently is that client's
DEADLINE = 90.0


def _shards_since(log: pathlib.Path, since: float) -> set[str]:
    if not log.exists():
        return set()
    shards = set()
    for line in log.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and float(parts[0]) >= since:
            shards.add(parts[1])
    return shards


def _produce(server: LocalServer, stream: str, stop: threading.Event) -> None:
    kinesis = server.client("kinesis")
    i = 0
    while not stop.is_set():
        kinesis.put_records(
            StreamName=stream, Records=[{"Data": b"%d" % (i + j), "PartitionKey": f"k{i + j}"} for j in range(20)]
        )
        i += 20
        stop.wait(0.05)


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"failover benchmark: timed out waiting for {what}")
        time.sleep(0.05)


def failover_seconds(server: LocalServer, variant: str) -> float:
    """One fail-over with the ``default`` or ``tuned`` configuration."""
    kinesis = server.client("kinesis")
    stream, app = new_stream(kinesis, "failover", SHARDS), f"failover-{uuid.uuid4().hex[:8]}"
    admin = Kinsumer(stream, app, "admin", kinesis=kinesis, dynamodb=server.client("dynamodb"))
    admin.create_required_tables()
    stop = threading.Event()
    producer = threading.Thread(target=_produce, args=(server, stream, stop), daemon=True)
    producer.start()
    with tempfile.TemporaryDirectory() as out:
        logs = {name: pathlib.Path(out) / f"{name}.log" for name in ("victim", "survivor")}
        procs = {
            name: subprocess.Popen(
                [
                    sys.executable,
                    str(HERE / "failover_worker.py"),
                    server.endpoint,
                    stream,
                    app,
                    name,
                    variant,
                    str(log),
                ],
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )
            for name, log in logs.items()
        }
        try:

            def sharing() -> bool:
                recent = [_shards_since(log, time.time() - RECENT) for log in logs.values()]
                return all(recent) and len(set.union(*recent)) == SHARDS

            _wait(sharing, "both clients to read their share of the shards")
            owned = _shards_since(logs["victim"], time.time() - RECENT)
            killed = time.time()
            procs["victim"].send_signal(signal.SIGKILL)
            procs["victim"].wait()
            _wait(lambda: owned <= _shards_since(logs["survivor"], killed), "the survivor to take the shards over")
            return (
                max(
                    min(
                        float(line.split()[0])
                        for line in logs["survivor"].read_text().splitlines()
                        if line.endswith(shard) and float(line.split()[0]) >= killed
                    )
                    for shard in owned
                )
                - killed
            )
        finally:
            stop.set()
            producer.join(5)
            for proc in procs.values():
                if proc.poll() is None:
                    proc.terminate()
                    try:
                        proc.wait(30)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
            admin.delete_tables()
            kinesis.delete_stream(StreamName=stream)
