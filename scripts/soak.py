"""``make soak``: two clients under churn for minutes, handling records with ``process()`` and concurrency.

The scenario of issue 35, as a new user would run it: moto's servers (Kinesis and DynamoDB apart),
a stream of 32 shards, a producer at 200 records/s. Client A runs ``process(handler, concurrency=4)``
in its own process for the whole run; client B joins every minute for 30 s, running
``process(handler, concurrency=2)``, and leaves cleanly (SIGTERM: ``stop()``). Default ``Config``.
The handler appends the record to a file (``tests/procs/client.py``).

It fails (exit 1), saying why, on:
- a record not handled within 60 s of the producer's end;
- a shard whose checkpoint does not move for 60 s while records wait in it;
- a ``stop()`` over its bound (``handoff_timeout`` + 10 s), or a client that does not exit after it;
- a handoff that timed out; a record handled twice, or out of its shard's order;
- client A's memory growing: in a run of 50 minutes or more, its RSS slope after a warm-up of 20 minutes
  over 5 MB an hour; in a shorter one, its RSS growing more than 20% after the first quarter of the run;
- a client process with more than 48 threads.

Memory. A's RSS rises for its first 20 minutes or so (measured: 62 MB, 70 MB at 10 minutes, 73 MB at 20,
then flat within a megabyte for the next 40): glibc's per-thread malloc arenas (up to 8 a core) grow to the
working set of the threads that come and go and keep the memory they freed. A short run ends inside that
warm-up, so it only catches a gross leak; `make soak SOAK_MINUTES=120` judges a few MB an hour.
``--tracemalloc`` has A trace its Python allocations and prints what grew after the first quarter, by line.

    make soak                       # 10 minutes
    make soak SOAK_MINUTES=120      # the long tier: memory judged after its warm-up
    make soak SOAK_ARGS="--minutes 2 --tracemalloc"
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import shutil
import signal
import sys
import tempfile
import threading
import time
import tracemalloc
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

import attrs

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from demo.servers import LocalServer, moto_server  # noqa: E402
from kinsumer import Config, Kinsumer  # noqa: E402
from kinsumer.running import _STOP_GRACE  # noqa: E402
from tests.procs.harness import ClientProcess, Deployment, ProcessAudit  # noqa: E402

DEFAULTS = Config()
#: stop() takes at most this long (the consumer's own bound).
STOP_BOUND = DEFAULTS.handoff_timeout + _STOP_GRACE
EXIT_MARGIN = 10.0  # seconds a process may take to exit after its stop() returned
HANDLED_WITHIN = 60.0  # seconds after the producer's end by which every record is handled
STALL_LIMIT = 60.0  # seconds a shard's checkpoint may stay put while records wait in it
RSS_GROWTH = 0.20  # in a run too short to judge the slope: growth after the first quarter (the warm-up: about 10%)
WARM_UP = 20 * 60.0  # seconds during which A's RSS rises to its working set (see the module's description)
JUDGED_AFTER = 30 * 60.0  # seconds of run after the warm-up that resolve a slope of a few MB an hour
RSS_SLOPE_LIMIT = 5.0  # MB an hour after the warm-up
MAX_THREADS = 48
SAMPLE_EVERY = 2.0  # seconds between two looks at the clients and the checkpoints
REPORT_EVERY = 30.0  # seconds between two lines of progress


class Producer(threading.Thread):
    """Writes ``rate`` records a second (numbered, a counter per partition key) and notes each shard's last
    sequence number."""

    def __init__(self, kinesis: Any, stream: str, rate: int, keys: int = 50) -> None:
        super().__init__(name="soak-producer", daemon=True)
        self.kinesis, self.stream, self.rate, self.keys = kinesis, stream, rate, keys
        self.ids = 0  # records written: ids 0 .. ids - 1
        self.last_sequence: dict[str, int] = {}
        self.error: BaseException | None = None
        self._counters: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._stopping = threading.Event()

    def run(self) -> None:
        """A batch every 0.1 s, as large as keeps the rate (a slow answer is made up by the next batch)."""
        started = time.monotonic()
        try:
            while not self._stopping.wait(0.1):
                behind = int(self.rate * (time.monotonic() - started)) - self.ids
                if behind > 0:
                    self._write(min(behind, 500))
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def _write(self, size: int) -> None:
        entries = []
        for rid in range(self.ids, self.ids + size):
            key = f"user-{rid % self.keys}"
            body = {"id": rid, "key": key, "counter": self._counters[key]}
            self._counters[key] += 1
            entries.append({"Data": json.dumps(body).encode(), "PartitionKey": key})
        while entries:  # a record Kinesis refused goes again, in order with the rest of its key's
            answer = self.kinesis.put_records(StreamName=self.stream, Records=entries)
            failed = []
            with self._lock:
                for entry, result in zip(entries, answer["Records"], strict=True):
                    if "ErrorCode" in result:
                        failed.append(entry)
                    else:
                        seq = int(result["SequenceNumber"])
                        shard = result["ShardId"]
                        self.last_sequence[shard] = max(seq, self.last_sequence.get(shard, 0))
            entries = failed
        self.ids += size

    def waiting(self) -> dict[str, int]:
        with self._lock:
            return dict(self.last_sequence)

    def stop(self) -> int:
        """Stop writing; how many records were written (ids 0 .. n-1)."""
        self._stopping.set()
        self.join(60)
        if self.error is not None:
            raise RuntimeError(f"the producer failed: {self.error!r}") from self.error
        return self.ids


def proc_status(pid: int) -> tuple[int, int] | None:
    """(RSS in KiB, threads) of a live process; None once it is gone (or exiting: a zombie has no VmRSS)."""
    try:
        text = pathlib.Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    if "VmRSS" not in fields:
        return None
    return int(fields["VmRSS"].split()[0]), int(fields["Threads"])


@attrs.define
class ShardWatch:
    """When each shard's checkpoint last moved (or had nothing waiting), and the longest stall seen."""

    moved: dict[str, tuple[int, float]] = attrs.Factory(dict)  # shard -> (checkpoint, since)
    longest: dict[str, float] = attrs.Factory(dict)
    stalled: set[str] = attrs.Factory(set)

    def look(self, db: Any, table: str, last_sequence: dict[str, int], now: float) -> None:
        rows = {}
        for page in db.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
            for item in page["Items"]:
                rows[item["Shard"]["S"]] = int(item.get("SequenceNumber", {}).get("S", "0") or 0)
        for shard, last in last_sequence.items():
            checkpoint = rows.get(shard, 0)
            seen = self.moved.get(shard)
            if seen is None or seen[0] != checkpoint or checkpoint >= last:
                self.moved[shard] = (checkpoint, now)  # moved, or nothing waits in it
                continue
            stall = now - seen[1]
            self.longest[shard] = max(self.longest.get(shard, 0.0), stall)
            if stall > STALL_LIMIT:
                self.stalled.add(shard)


@attrs.define
class Samples:
    """What was seen of the client processes over the run."""

    rss: list[tuple[float, int]] = attrs.Factory(list)  # (seconds into the run, A's RSS KiB)
    threads: dict[str, int] = attrs.Factory(dict)  # most threads seen per client

    def look(self, clients: list[ClientProcess], since: float, a: ClientProcess) -> None:
        for proc in clients:
            if proc.process is None or not proc.alive:
                continue
            status = proc_status(proc.process.pid)
            if status is None:
                continue
            rss, threads = status
            self.threads[proc.name] = max(self.threads.get(proc.name, 0), threads)
            if proc is a:
                self.rss.append((time.monotonic() - since, rss))


@attrs.define
class Stop:
    client: str
    stop_seconds: float | None  # stop()'s own time ("stopping" to "stopped" in the client's events)
    exit_seconds: float  # SIGTERM to the process's exit
    code: int | None


def stop_client(proc: ClientProcess, while_waiting: Any) -> Stop:
    """SIGTERM once the client listens for it; wait (looking around meanwhile) for its exit."""
    deadline = time.monotonic() + 60
    while not proc.events("listening") and proc.alive and time.monotonic() < deadline:
        time.sleep(0.1)
    sent = time.monotonic()
    if proc.alive:
        proc.signal(signal.SIGTERM)
    limit = sent + STOP_BOUND + EXIT_MARGIN + 30  # past the bound: measured, then killed
    assert proc.process is not None
    while proc.process.poll() is None and time.monotonic() < limit:
        while_waiting()
        with contextlib.suppress(Exception):
            proc.process.wait(0.5)
    exit_seconds = time.monotonic() - sent
    code = proc.process.poll()
    if code is None:
        proc.ensure_dead()
    stopping, stopped = proc.events("stopping"), proc.events("stopped")
    stop_seconds = stopped[-1].at - stopping[-1].at if stopping and stopped else None
    return Stop(proc.name, stop_seconds, exit_seconds, code)


@contextlib.contextmanager
def servers() -> Iterator[tuple[LocalServer, LocalServer]]:
    with moto_server() as kinesis, moto_server() as dynamodb:
        yield kinesis, dynamodb


def soak(
    minutes: float, shards: int, rate: int, period: float, stay: float, out: pathlib.Path, *, trace: bool = False
) -> list[str]:
    """Run the scenario; the reasons it failed (none: it passed). ``trace``: client A traces its allocations
    (tracemalloc) and the top lines of their growth after the first quarter are printed."""
    failures: list[str] = []
    with servers() as (kinesis_server, dynamodb_server):
        kinesis, db = kinesis_server.client("kinesis"), dynamodb_server.client("dynamodb")
        stream, app = f"soak-{uuid.uuid4().hex[:6]}", f"soak-{uuid.uuid4().hex[:6]}"
        kinesis.create_stream(StreamName=stream, ShardCount=shards)
        kinesis.get_waiter("stream_exists").wait(StreamName=stream, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})
        admin = Kinsumer(stream, app, "admin", kinesis=kinesis, dynamodb=db)
        admin.create_required_tables()
        deployment = Deployment(kinesis_server.endpoint, dynamodb_server.endpoint, stream, app, out)
        clients: list[ClientProcess] = []
        traced = out / "tracemalloc"
        tracing: dict[str, Any] = {}
        if trace:
            traced.mkdir()
            tracing = {"tracemalloc": {"dir": str(traced), "warm": minutes * 15, "every": 30}}
        a = ClientProcess(deployment, "a", config={}, process={"concurrency": 4}, **tracing).start()
        clients.append(a)
        producer = Producer(kinesis, stream, rate)
        producer.start()
        watch, samples, stops = ShardWatch(), Samples(), []
        started = time.monotonic()
        ends = started + minutes * 60

        def look() -> None:
            now = time.monotonic()
            samples.look(clients, started, a)
            watch.look(db, admin.tables.checkpoints, producer.waiting(), now)

        b: ClientProcess | None = None
        generation, reported = 0, 0.0
        next_join = started + min(15.0, period / 4)
        print(f"soak: {minutes:g} min, {shards} shards, {rate} records/s; B joins every {period:g} s for {stay:g} s")
        while time.monotonic() < ends:
            now = time.monotonic()
            if b is None and now >= next_join and now + stay < ends:
                generation += 1
                b = ClientProcess(deployment, f"b{generation}", config={}, process={"concurrency": 2}).start()
                clients.append(b)
                leave_at = now + stay
                next_join += period
            if b is not None and now >= leave_at:
                stops.append(stop_client(b, look))
                b = None
            look()
            elapsed = time.monotonic() - started
            if elapsed >= reported + REPORT_EVERY:
                reported += REPORT_EVERY
                rss, stall = samples.rss[-1][1] / 1024 if samples.rss else 0, max(watch.longest.values(), default=0)
                print(f"  {elapsed:4.0f} s: {producer.ids:,} records produced, {len(ProcessAudit(clients).ids()):,} "
                      f"handled; A {rss:.1f} MB; longest checkpoint stall {stall:.0f} s", flush=True)  # fmt: skip
            time.sleep(SAMPLE_EVERY)
        produced = producer.stop()
        print(f"producer stopped after {produced:,} records; waiting for the rest to be handled")
        stopped_at = time.monotonic()
        missing: set[int] = set(range(produced))
        while missing and time.monotonic() < stopped_at + HANDLED_WITHIN:
            missing -= ProcessAudit(clients).ids()
            look()
            time.sleep(SAMPLE_EVERY)
        drained = time.monotonic() - stopped_at
        stops.append(stop_client(a, look))
        audit = ProcessAudit(clients)
        duplicates = audit.duplicates()
        order = audit.shard_order_violations()
        handoffs = Counter(
            "clean" if e.fields[-1] == "1" else "timed out" for proc in clients for e in proc.events("handoff")
        )

    # ----------------------------------------------------------------- the verdict
    if missing:
        failures.append(f"{len(missing):,} records not handled {HANDLED_WITHIN:g} s after the producer's end")
    if watch.stalled:
        failures.append(f"{len(watch.stalled)} shards whose checkpoint stayed put over {STALL_LIMIT:g} s with records "
                        f"waiting: {sorted(watch.stalled)[:8]}")  # fmt: skip
    for s in stops:
        if s.code != 0:
            failures.append(f"{s.client} exited with {s.code} ({s.exit_seconds:.1f} s after SIGTERM)")
        elif s.stop_seconds is None or s.stop_seconds > STOP_BOUND:
            failures.append(f"{s.client}'s stop() took {s.stop_seconds} s, over its bound of {STOP_BOUND:g} s")
        elif s.exit_seconds > STOP_BOUND + EXIT_MARGIN:
            failures.append(f"{s.client} exited {s.exit_seconds:.1f} s after SIGTERM")
    if handoffs["timed out"]:
        failures.append(f"{handoffs['timed out']} handoffs timed out")
    if duplicates:
        failures.append(f"{len(duplicates)} records handled twice (all stops were clean)")
    if order:
        failures.append(f"{len(order)} records handled out of their shard's order")
    quarter = [rss for at, rss in samples.rss if at <= minutes * 15]
    later = [rss for at, rss in samples.rss if at > minutes * 15]
    growth = (max(later) / quarter[-1] - 1) if quarter and later else 0.0
    first_mb, most_mb = (quarter[-1] // 1024 if quarter else 0), (max(later) // 1024 if later else 0)
    judged = minutes * 60 >= WARM_UP + JUDGED_AFTER
    slope = rss_slope([(at, rss) for at, rss in samples.rss if at > (WARM_UP if judged else minutes * 15)])
    if judged and slope is not None and slope > RSS_SLOPE_LIMIT:
        failures.append(f"A's RSS grows {slope:+.1f} MB an hour after its warm-up (bound {RSS_SLOPE_LIMIT:g})")
    if not judged and growth > RSS_GROWTH:
        failures.append(f"A's RSS grew {growth:.0%} after the first quarter ({first_mb} -> {most_mb} MB)")
    crowded = {name: n for name, n in samples.threads.items() if n > MAX_THREADS}
    if crowded:
        failures.append(f"clients over {MAX_THREADS} threads: {crowded}")

    by_client: dict[str, int] = defaultdict(int)
    for d in audit.deliveries:
        by_client[d.client[0]] += 1
    stop_times = ", ".join(
        f"{s.client} {s.stop_seconds:.1f} s" if s.stop_seconds is not None else f"{s.client} -" for s in stops
    )
    slope_text = "-" if slope is None else f"{slope:+.1f} MB an hour"
    if judged:
        slope_when = f"after its warm-up of {WARM_UP / 60:g} min (bound {RSS_SLOPE_LIMIT:g} MB an hour)"
    else:
        judged_from = (WARM_UP + JUDGED_AFTER) / 60
        slope_when = f"after the first quarter (warm-up not over: judged in runs of {judged_from:g} min)"
    max_b_threads = max((n for name, n in samples.threads.items() if name != "a"), default=0)
    print(f"""
| figure | value |
|---|---|
| run | {minutes:g} min, {shards} shards, {rate} records/s, B joined {generation} times |
| records produced / handled / lost | {produced:,} / {len(audit.ids()):,} / {len(missing):,} |
| handled by A / by the Bs | {by_client['a']:,} / {by_client['b']:,} |
| duplicates / shard-order violations | {len(duplicates)} / {len(order)} |
| handoffs clean / timed out | {handoffs['clean']} / {handoffs['timed out']} |
| every record handled, after the producer's end | {drained:.1f} s |
| longest checkpoint stall with records waiting | {max(watch.longest.values(), default=0.0):.1f} s |
| stop() (bound {STOP_BOUND:g} s) | {stop_times} |
| A's RSS at the first quarter / most after | {first_mb} MB / {most_mb} MB ({growth:+.1%}) |
| A's RSS slope {slope_when} | {slope_text} |
| most threads (A / any B) | {samples.threads.get('a', 0)} / {max_b_threads} |
""")  # fmt: skip
    if trace:
        print_growth(traced)
    return failures


def rss_slope(samples: list[tuple[float, int]]) -> float | None:
    """The least-squares slope of (seconds, RSS in KiB) samples, in MB an hour; None with fewer than 10."""
    if len(samples) < 10:
        return None
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_r = sum(r for _, r in samples) / n
    spread = sum((t - mean_t) ** 2 for t, _ in samples)
    slope = sum((t - mean_t) * (r - mean_r) for t, r in samples) / spread  # KiB a second
    return slope * 3600 / 1024


def print_growth(traced: pathlib.Path, top: int = 15) -> None:
    """What client A allocated after the first quarter and still held at its last snapshot, by line."""
    warm, last = traced / "warm.snapshot", traced / "last.snapshot"
    if not (warm.exists() and last.exists()):
        print("tracemalloc: no snapshots (the run was too short)")
        return
    before, after = tracemalloc.Snapshot.load(str(warm)), tracemalloc.Snapshot.load(str(last))
    total = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    print(f"tracemalloc: {total / 2**20:+.2f} MB traced between the first quarter and the last snapshot; top lines:")
    for stat in after.compare_to(before, "lineno")[:top]:
        frame = stat.traceback[0]
        name = frame.filename.removeprefix(f"{REPO}/")
        print(f"  {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks  {name}:{frame.lineno}")
    print("the largest growth by traceback:")
    for stat in after.compare_to(before, "traceback")[:3]:
        print(f"  {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks")
        for line in stat.traceback.format(limit=8):
            print("    " + line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0, help="how long records are produced (default 10)")
    parser.add_argument("--shards", type=int, default=32)
    parser.add_argument("--rate", type=int, default=200, help="records a second (default 200)")
    parser.add_argument("--period", type=float, default=60.0, help="seconds between two joins of B (default 60)")
    parser.add_argument("--stay", type=float, default=30.0, help="seconds B stays each time (default 30)")
    parser.add_argument("--keep", action="store_true", help="keep the clients' files (deliveries, events, logs)")
    parser.add_argument(
        "--tracemalloc", action="store_true",
        help="client A traces its allocations; print what grew after the first quarter, by line (slows A down)",
    )  # fmt: skip
    args = parser.parse_args()
    out = pathlib.Path(tempfile.mkdtemp(prefix="kinsumer-soak-"))
    try:
        failures = soak(args.minutes, args.shards, args.rate, args.period, args.stay, out, trace=args.tracemalloc)
    finally:
        if args.keep:
            print(f"the clients' files: {out}")
        else:
            shutil.rmtree(out, ignore_errors=True)
    for failure in failures:
        print(f"FAILED: {failure}")
    if not failures:
        print("soak passed")
    return 1 if failures else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
