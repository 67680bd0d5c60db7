#!/usr/bin/env python3
"""How fast a consumer process leaves cleanly on a signal: a stress run, not a test (issue 19).

    .venv/bin/python scripts/stress_signals.py [--runs 200] [--only idle-sigint,...]

Starts moto's server on 127.0.0.1 with an idle and a busy stream, then, for each scenario, runs
``--runs`` processes one after the other. Each process runs a Kinsumer in a ``with`` block and
blocks in ``for record in k`` (no timeout); once it is reading, the signal is sent, and the time
until the process has exited is measured. A clean exit also means its heartbeat row is gone and
none of its shards is still owned. Scenarios: SIGINT to the process, SIGINT to one of its
threads other than the main one (what the kernel may do with a Ctrl-C), SIGTERM (the program
turns it into SystemExit, as a service does), each on the idle and on the busy stream, and
``kinsumer tail --app --commit`` with SIGINT. Prints the distribution per scenario; goal: every exit
within 2 s.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]

from demo import servers  # noqa: E402
from kinsumer import Config, Kinsumer  # noqa: E402

SHARDS = 4
GOAL = 2.0
SCENARIOS = (
    "idle-sigint", "idle-sigint-thread", "idle-sigterm",
    "busy-sigint", "busy-sigint-thread", "busy-sigterm", "tail-app-sigint",
)  # fmt: skip
_SYS_TGKILL = 234  # x86_64


def child(endpoint: str, stream: str, app: str) -> int:
    """The process under test: a Kinsumer in a with block, iterating without a timeout."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # what a service does with SIGTERM
    helper = threading.Thread(target=threading.Event().wait, daemon=True)  # a thread a signal may land on
    helper.start()
    config = Config(shard_check_frequency=0.5, commit_frequency=0.5)
    kinesis, dynamodb = servers.client(endpoint, "kinesis"), servers.client(endpoint, "dynamodb")
    try:
        with Kinsumer(stream, app, "stress", config, kinesis=kinesis, dynamodb=dynamodb) as k:
            print(json.dumps({"helper": helper.native_id}), flush=True)
            for _ in k:
                pass
    except KeyboardInterrupt:
        return 130
    return 0


def tgkill(pid: int, tid: int, signum: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(_SYS_TGKILL, pid, tid, signum) != 0:
        raise OSError(ctypes.get_errno(), "tgkill failed")


def left_cleanly(db: Any, app: str) -> bool:
    """No heartbeat row, no owned shard."""
    if db.scan(TableName=f"{app}_clients", ConsistentRead=True)["Items"]:
        return False
    rows = db.scan(TableName=f"{app}_checkpoints", ConsistentRead=True)["Items"]
    return not any("OwnerID" in row for row in rows)


def one_run(server: Any, scenario: str, stream: str, app: str) -> tuple[float, bool]:
    """Seconds from the signal to the process's exit, and whether it left cleanly."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    db = server.client("dynamodb")
    if scenario.startswith("tail"):
        command = [sys.executable, "-m", "kinsumer", "tail", stream, "--app", app, "--commit", "--from", "trim-horizon",
                   "--endpoint-url", server.endpoint]  # fmt: skip
    else:
        command = [sys.executable, __file__, "--child", server.endpoint, stream, app]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO, env=env)
    try:
        helper = 0
        if scenario.startswith("tail"):
            deadline = time.monotonic() + 30
            while not db.scan(TableName=f"{app}_clients")["Items"] and time.monotonic() < deadline:
                time.sleep(0.05)  # until it is a member
        else:
            assert proc.stdout is not None
            helper = json.loads(proc.stdout.readline())["helper"]
        deadline = time.monotonic() + 30
        while not any("OwnerID" in r for r in db.scan(TableName=f"{app}_checkpoints")["Items"]):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{scenario}: the process never owned a shard")
            time.sleep(0.05)  # until it reads
        sent = time.monotonic()
        if scenario.endswith("sigint-thread"):
            tgkill(proc.pid, helper, signal.SIGINT)
        elif scenario.endswith("sigterm"):
            proc.send_signal(signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=60)
            seconds = time.monotonic() - sent
        except subprocess.TimeoutExpired:
            return float("inf"), False
        return seconds, left_cleanly(db, app)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)


def produce(kinesis: Any, stream: str, stop: threading.Event) -> None:
    """About 400 records/s into the busy stream."""
    n = 0
    while not stop.wait(0.05):
        entries = [{"Data": json.dumps({"n": n + i}).encode(), "PartitionKey": f"k{n + i}"} for i in range(20)]
        kinesis.put_records(StreamName=stream, Records=entries)
        n += 20


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        return child(*sys.argv[2:5])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--only", default=",".join(SCENARIOS))
    args = parser.parse_args()
    # Started in the background by a non-interactive shell (`cmd &`), this process ignores SIGINT,
    # and so would the processes it starts (an ignored signal stays ignored across exec), which
    # would then never see the SIGINT under test. A Python handler is reset to the default at exec.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "stress")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "stress")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with servers.moto_server() as server:
        kinesis = server.client("kinesis")
        streams = {}
        for kind in ("idle", "busy"):
            streams[kind] = f"stress-{kind}-{uuid.uuid4().hex[:6]}"
            kinesis.create_stream(StreamName=streams[kind], ShardCount=SHARDS)
            kinesis.get_waiter("stream_exists").wait(StreamName=streams[kind], WaiterConfig={"Delay": 0.2})
        stop = threading.Event()
        producer = threading.Thread(target=produce, args=(kinesis, streams["busy"], stop), daemon=True)
        producer.start()
        try:
            for scenario in args.only.split(","):
                stream = streams["busy" if scenario.startswith("busy") else "idle"]
                app = f"stress-{uuid.uuid4().hex[:6]}"
                Kinsumer(
                    stream, app, "admin", kinesis=kinesis, dynamodb=server.client("dynamodb")
                ).create_required_tables()
                results = [one_run(server, scenario, stream, app) for _ in range(args.runs)]
                times = sorted(t for t, _ in results)
                within = sum(1 for t, clean in results if t <= GOAL and clean)
                print(
                    f"{scenario:20s} {within}/{len(results)} clean within {GOAL:g} s; exit after "
                    f"p50 {statistics.median(times):.2f} s, p99 {times[int(0.99 * (len(times) - 1))]:.2f} s, "
                    f"max {times[-1]:.2f} s; unclean {sum(1 for _, clean in results if not clean)}",
                    flush=True,
                )
        finally:
            stop.set()
            producer.join(5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
