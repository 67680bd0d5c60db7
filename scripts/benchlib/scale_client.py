"""One kinsumer client in a process of its own, for the scale benchmark (``scale.py``).

    python scale_client.py --spec '{"kinesis": URL, "dynamodb": URL, "stream": S, "app": A, "name": N,
                                    "out": PREFIX, "slow": 0.0}'

Runs with whichever ``kinsumer`` comes first on ``PYTHONPATH`` (this version, or an earlier one
unpacked by the benchmark), with the default ``Config``. Writes:

- ``PREFIX.status``: a JSON line every 0.25 s: shards captured, threads, RSS (kB), CPU-seconds
  of the process (and of the reporter thread, which the bench subtracts), GetRecords answered so far,
  and warnings seen (a shard taken from this client,
  a release that found its row taken, a stop that timed out);
- ``PREFIX.deliveries``: ``id shard received-at sent-at`` per record (records are JSON with
  ``id`` and ``t``, the time they were sent);
- ``PREFIX.stopped``: the seconds ``stop()`` took, after SIGTERM.

``slow``: seconds spent on each record (a slow consumer, so that records pile up in the client).
"""

from __future__ import annotations

import json
import logging
import os
import resource
import signal
import sys
import threading
import time
from typing import Any

import boto3
import botocore.config

from kinsumer import Config, Kinsumer, StatReceiver

WARNINGS = {
    "release_lost": "could not store the release",
    "dropped_owned_elsewhere": "is owned by another client now",
    "stop_timed_out": "stop timed out",
    "handoff_timed_out": "timed out after",
}


class Counting(StatReceiver):
    def __init__(self) -> None:
        self.get_records = 0

    def records_fetched(self, shard_id: str, count: int, millis_behind_latest: int | None) -> None:
        self.get_records += 1  # one per GetRecords answered (a single int add: no lock needed under the GIL)


class WarningCounter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts = dict.fromkeys(WARNINGS, 0)

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        for key, text in WARNINGS.items():
            if text in message:
                self.counts[key] += 1


def rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def client(endpoint: str, service: str) -> Any:
    return boto3.client(  # type: ignore[call-overload]
        service, endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="local",
        aws_secret_access_key="local", config=botocore.config.Config(max_pool_connections=64),
    )  # fmt: skip


def main() -> int:
    spec: dict[str, Any] = json.loads(sys.argv[sys.argv.index("--spec") + 1])
    out = spec["out"]
    stats = Counting()
    warnings = WarningCounter()
    logging.getLogger("kinsumer").addHandler(warnings)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    consumer = Kinsumer(
        spec["stream"], spec["app"], spec["name"], Config(stats=stats),
        kinesis=client(spec["kinesis"], "kinesis"), dynamodb=client(spec["dynamodb"], "dynamodb"),
    )  # fmt: skip
    stopping, stopped = threading.Event(), threading.Event()

    def stop(*_: object) -> None:
        if stopping.is_set():
            return
        stopping.set()

        def run() -> None:
            started = time.monotonic()
            consumer.stop()
            with open(out + ".stopped.tmp", "w") as f:
                f.write(f"{time.monotonic() - started:.3f}\n")
            os.replace(out + ".stopped.tmp", out + ".stopped")
            stopped.set()

        threading.Thread(target=run, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    consumer.create_required_tables()  # idempotent: the first client of the application makes them
    started = time.time()
    consumer.run()
    with open(out + ".started", "w") as f:
        f.write(f"{started:.6f}\n")
    status = open(out + ".status", "a", buffering=1)  # noqa: SIM115 - written by the reporter thread until the end

    def report() -> None:
        while True:
            times = os.times()
            shards = consumer.status().shards
            line = {
                "t": time.time(),
                "owned": sum(1 for s in shards if s.captured),
                "assigned": len(shards),
                "threads": threading.active_count(),
                "rss_kb": rss_kb(),
                "max_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                "cpu": times.user + times.system,
                "reporter_cpu": time.thread_time(),  # this thread's own (status() of every shard): not the client's
                "get_records": stats.get_records,
                "warnings": warnings.counts,
            }
            status.write(json.dumps(line) + "\n")
            if stopped.wait(0.25):
                return

    reporter = threading.Thread(target=report, daemon=True)
    reporter.start()
    slow = float(spec.get("slow", 0.0))
    with open(out + ".deliveries", "a", buffering=1) as deliveries:  # line by line: the bench reads it live
        while (record := consumer.next_record()) is not None:
            body = json.loads(record.data)
            deliveries.write(f"{body['id']} {record.shard_id} {time.time():.6f} {body['t']:.6f}\n")
            if slow:
                time.sleep(slow)
    stopped.wait(300)  # stop() measured and written
    reporter.join(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
