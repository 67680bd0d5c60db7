"""Scale: one client, then two, on streams of 8 to 1,024 shards; this version against the thread-per-shard design.

For each shard count, on a fresh stream of kinesalite (DynamoDB on moto's server: two server
processes), each design in turn runs client processes of its own (``scale_client.py``, default
``Config``): the thread-per-shard design is kinsumer as of :data:`THREAD_PER_SHARD`, unpacked
from git into a temporary folder and put first on the client's ``PYTHONPATH``.

1. Client A starts: seconds until it has captured every shard; its threads and RSS then.
2. Idle (nothing written), from :func:`settle_seconds` after the capture (once every shard is read
   at its longest wait, ``max_idle_poll_interval``) for :data:`IDLE_SECONDS`: A's CPU (share of one
   core) and GetRecords/s.
3. A record written every 50 ms to a random shard: put -> ``next()`` latency, p50 and p99.
4. Client B joins while records flow: seconds until each client has captured its half.
5. B stops cleanly: seconds until A has captured every shard again, and how long B's stop took.
6. Every record written is delivered: duplicates (none may come of a clean join and leave)
   and warnings of a shard taken from a live owner.
7. With a slow consumer (1 ms per record) on a stream with a backlog of 4 KiB records (256 MB at
   256 shards), the most RSS the client reached: what reading ahead holds in memory.
8. At 8 and 256 shards, one client reads a backlog of 100,000 records of 100 bytes: records/s.

At :data:`LARGE_SHARD_COUNTS` (512 and 1,024) only this version runs, and only steps 1-6: a thread
per shard would start a thousand threads, and the backlog steps say nothing more than at 256.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import attrs

from demo.servers import LocalServer
from kinsumer import Config
from kinsumer.reading.reader import ReaderSettings

from .common import HERE, REPO, Row

__all__ = ["LARGE_SHARD_COUNTS", "MAX_SHARDS", "SHARD_COUNTS", "THREAD_PER_SHARD", "scale_rows"]

#: The last commit whose clients ran a thread per shard (today's design before issue 28).
THREAD_PER_SHARD = "047f1fd"
SHARD_COUNTS = (8, 32, 128, 256, 512, 1024)
#: Shard counts measured for this version only, steps 1-6 (see the module's description).
LARGE_SHARD_COUNTS = (512, 1024)
MAX_SHARDS = 2048  # kinesalite's shard limit (tests/kinesalite/server.js)
BUSY_SHARDS = 256  # the memory step's stream; the backlog step reads at 8 and at this many shards
IDLE_SECONDS = 10.0
LATENCY_SECONDS = 10.0
DEADLINE = 120.0
BACKLOG_RECORDS = 250  # per shard, of 4 KiB, for the memory step: 256 MB at 256 shards, four times the budget
BACKLOG_SIZE = 4096
THROUGHPUT_RECORDS = 100_000  # of 100 bytes, for the busy step (8 and 256 shards)


@attrs.frozen
class Figures:
    capture: float | None = None
    threads: int | None = None
    rss_mb: float | None = None
    idle_cpu: float | None = None
    #: the same span's CPU read from outside the process (/proc/<pid>/stat), the bench's reporting included
    idle_cpu_outside: float | None = None
    get_records_per_s: float | None = None
    latency: tuple[float, float] | None = None
    join: float | None = None
    leave: float | None = None
    stop_b: float | None = None
    stop_a: float | None = None
    duplicates: int | None = None
    lost: int | None = None
    taken: int | None = None
    busy_rss_mb: float | None = None
    backlog_rate: float | None = None
    failure: str | None = None


class Client:
    """One scale_client process."""

    def __init__(self, source: pathlib.Path, out: pathlib.Path, name: str, spec: dict[str, Any]) -> None:
        self.prefix = out / name
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(source), str(REPO)])}
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "scale_client.py"), "--spec", json.dumps({**spec, "name": name,
                                                                                   "out": str(self.prefix)})],
            env=env, stdout=subprocess.DEVNULL, stderr=open(f"{self.prefix}.stderr", "wb"),  # noqa: SIM115
        )  # fmt: skip

    def cpu_seconds(self) -> float | None:
        """The process's CPU time (user and system) as the kernel counts it, read from outside; None off Linux."""
        try:
            fields = pathlib.Path(f"/proc/{self.process.pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime

    def last(self) -> dict[str, Any]:
        path = pathlib.Path(f"{self.prefix}.status")
        if not path.exists():
            return {}
        lines = path.read_text().splitlines()
        return json.loads(lines[-1]) if lines else {}

    def samples(self) -> list[dict[str, Any]]:
        path = pathlib.Path(f"{self.prefix}.status")
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def deliveries(self) -> list[tuple[int, str, float, float]]:
        path = pathlib.Path(f"{self.prefix}.deliveries")
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 4:
                out.append((int(parts[0]), parts[1], float(parts[2]), float(parts[3])))
        return out

    def stop(self) -> float | None:
        """SIGTERM; the seconds stop() took, as the client measured it."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
            return None
        path = pathlib.Path(f"{self.prefix}.stopped")
        return float(path.read_text()) if path.exists() else None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def _wait(condition: Any, timeout: float = DEADLINE) -> float | None:
    """Seconds until ``condition()`` held; None if it never did within ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if condition():
            return time.monotonic() - start
        time.sleep(0.1)
    return None


class Producer:
    """Records ``{"id", "t"}`` to random shards (by explicit hash key), ``per_second`` of them."""

    def __init__(self, kinesis: Any, stream: str, keys: list[str], first_id: int = 0) -> None:
        self._kinesis, self._stream, self._keys = kinesis, stream, keys
        self._rng = random.Random(7)
        self.next_id = first_id
        self.rate = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self, per_second: float) -> None:
        self.rate = per_second
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            batch = max(1, int(self.rate / 20))
            entries = [self._entry() for _ in range(batch)]
            self._kinesis.put_records(StreamName=self._stream, Records=entries)
            self._stop.wait(batch / self.rate)

    def _entry(self) -> dict[str, Any]:
        rid, self.next_id = self.next_id, self.next_id + 1
        body = json.dumps({"id": rid, "t": time.time()}).encode()
        return {"Data": body, "PartitionKey": str(rid), "ExplicitHashKey": self._rng.choice(self._keys)}


def _new_stream(kinesis: Any, shards: int) -> tuple[str, list[str]]:
    stream = f"scale-{uuid.uuid4().hex[:8]}"
    kinesis.create_stream(StreamName=stream, ShardCount=shards)
    _wait(lambda: kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamStatus"]
          == "ACTIVE", 60)  # fmt: skip
    keys, token = [], None
    while True:
        page = kinesis.list_shards(NextToken=token) if token else kinesis.list_shards(StreamName=stream)
        keys += [s["HashKeyRange"]["StartingHashKey"] for s in page["Shards"]]
        token = page.get("NextToken")
        if not token:
            return stream, keys


@contextlib.contextmanager
def thread_per_shard_source() -> Iterator[pathlib.Path | None]:
    """kinsumer as of :data:`THREAD_PER_SHARD`, unpacked from git (None if git cannot)."""
    with tempfile.TemporaryDirectory(prefix="kinsumer-thread-per-shard-") as tmp:
        archive = pathlib.Path(tmp) / "src.tar"
        done = subprocess.run(
            ["git", "-C", str(REPO), "archive", "--format=tar", "-o", str(archive), THREAD_PER_SHARD, "kinsumer"],
            capture_output=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            yield None
            return
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        yield pathlib.Path(tmp)


def measure(kinesalite: LocalServer, moto: LocalServer, source: pathlib.Path, shards: int) -> Figures:
    """Steps 1-6 for one design and shard count."""
    kinesis = kinesalite.client("kinesis")
    stream, keys = _new_stream(kinesis, shards)
    spec = {"kinesis": kinesalite.endpoint, "dynamodb": moto.endpoint, "stream": stream, "app": stream}
    out = pathlib.Path(tempfile.mkdtemp(prefix="kinsumer-scale-"))
    a = Client(source, out, "a", spec)
    b: Client | None = None
    producer = Producer(kinesis, stream, keys)
    try:
        capture = _wait(lambda: a.last().get("owned") == shards)
        if capture is None:
            return Figures(failure=f"client A did not capture {shards} shards within {DEADLINE:.0f} s")
        time.sleep(settle_seconds())
        settled, outside_from, outside_at = a.last(), a.cpu_seconds(), time.monotonic()
        time.sleep(IDLE_SECONDS)  # the measure itself: the client's cost while nothing comes
        idle, outside_to = a.last(), a.cpu_seconds()
        idle_cpu_outside = None
        if outside_from is not None and outside_to is not None:
            idle_cpu_outside = (outside_to - outside_from) / (time.monotonic() - outside_at)
        span = idle["t"] - settled["t"]
        reporter = idle.get("reporter_cpu", 0.0) - settled.get("reporter_cpu", 0.0)  # the bench's own reporting
        idle_cpu = (idle["cpu"] - settled["cpu"] - reporter) / span
        get_records = (idle["get_records"] - settled["get_records"]) / span
        latency_from = time.time()
        producer.start(20.0)
        time.sleep(LATENCY_SECONDS)
        ages = sorted(got - sent for _, _, got, sent in a.deliveries() if sent >= latency_from)
        latency = (_percentile(ages, 0.5), _percentile(ages, 0.99)) if ages else None
        b = Client(source, out, "b", spec)
        half = shards // 2

        joiner = b

        def balanced() -> bool:
            owned = (int(a.last().get("owned", 0)), int(joiner.last().get("owned", 0)))
            return min(owned) >= half and sum(owned) == shards

        join = _wait(balanced)
        leave_started = time.monotonic()
        stop_b = b.stop()
        left = _wait(lambda: a.last().get("owned") == shards)
        leave = None if left is None else time.monotonic() - leave_started
        producer.stop()
        sent = set(range(producer.next_id))
        everything = lambda: sent <= {d[0] for c in (a, b) for d in c.deliveries()}  # noqa: E731
        _wait(everything, 60)
        stop_a = a.stop()
        counts = Counter(d[0] for c in (a, b) for d in c.deliveries())
        warnings = [c.samples()[-1]["warnings"] for c in (a, b) if c.samples()]
        taken = sum(w["release_lost"] + w["dropped_owned_elsewhere"] for w in warnings)
        return Figures(
            capture=capture, threads=settled["threads"], rss_mb=settled["rss_kb"] / 1024, idle_cpu=idle_cpu,
            idle_cpu_outside=idle_cpu_outside,
            get_records_per_s=get_records, latency=latency, join=join, leave=leave, stop_b=stop_b, stop_a=stop_a,
            duplicates=sum(1 for n in counts.values() if n > 1), lost=len(sent - set(counts)), taken=taken,
        )  # fmt: skip
    finally:
        with contextlib.suppress(Exception):
            producer.stop()
        for c in (a, b):
            if c is not None:
                c.kill()
        kinesis.delete_stream(StreamName=stream)  # kinesalite holds at most 2,048 shards (tests/kinesalite/server.js)


def busy_rss(kinesalite: LocalServer, moto: LocalServer, source: pathlib.Path, shards: int) -> float | None:
    """Step 7: the most RSS (MiB) a slow client reaches on a backlog of 1 KiB records."""
    kinesis = kinesalite.client("kinesis")
    stream, keys = _new_stream(kinesis, shards)
    pad = "x" * (BACKLOG_SIZE - 40)
    for start in range(0, shards * BACKLOG_RECORDS, 500):
        entries = [
            {"Data": json.dumps({"id": i, "t": time.time(), "p": pad}).encode(), "PartitionKey": str(i),
             "ExplicitHashKey": keys[i % shards]}
            for i in range(start, min(start + 500, shards * BACKLOG_RECORDS))
        ]  # fmt: skip
        kinesis.put_records(StreamName=stream, Records=entries)
    spec = {"kinesis": kinesalite.endpoint, "dynamodb": moto.endpoint, "stream": stream, "app": stream, "slow": 0.001}
    out = pathlib.Path(tempfile.mkdtemp(prefix="kinsumer-scale-"))
    client = Client(source, out, "busy", spec)
    try:
        if _wait(lambda: client.last().get("owned") == shards) is None:
            return None
        time.sleep(IDLE_SECONDS)  # reading ahead while the consumer is slow
        return max(float(s["max_rss_kb"]) for s in client.samples()) / 1024
    finally:
        client.kill()
        kinesis.delete_stream(StreamName=stream)


def backlog_rate(kinesalite: LocalServer, moto: LocalServer, source: pathlib.Path, shards: int) -> float | None:
    """Step 8: records/s of one client reading a backlog of :data:`THROUGHPUT_RECORDS` records of 100 bytes,
    from ``run()`` to the last record."""
    kinesis = kinesalite.client("kinesis")
    stream, keys = _new_stream(kinesis, shards)
    for start in range(0, THROUGHPUT_RECORDS, 500):
        entries = [
            {"Data": json.dumps({"id": i, "t": 0.0, "p": "x" * 60}).encode(), "PartitionKey": str(i),
             "ExplicitHashKey": keys[i % shards]}
            for i in range(start, min(start + 500, THROUGHPUT_RECORDS))
        ]  # fmt: skip
        kinesis.put_records(StreamName=stream, Records=entries)
    spec = {"kinesis": kinesalite.endpoint, "dynamodb": moto.endpoint, "stream": stream, "app": stream}
    out = pathlib.Path(tempfile.mkdtemp(prefix="kinsumer-scale-"))
    client = Client(source, out, "reader", spec)
    try:
        if _wait(lambda: len(client.deliveries()) >= THROUGHPUT_RECORDS, DEADLINE) is None:
            return None
        started = float(pathlib.Path(f"{client.prefix}.started").read_text())
        return THROUGHPUT_RECORDS / (max(d[2] for d in client.deliveries()) - started)
    finally:
        client.kill()
        kinesis.delete_stream(StreamName=stream)


def settle_seconds(config: Config | None = None) -> float:
    """Seconds from a shard's first read until its reads come at the longest wait (the default ``Config``'s
    schedule: see :class:`~kinsumer.reading.reader.ReaderSettings`), and a second more."""
    cfg = config or Config()
    settings = ReaderSettings(cfg.throttle_delay, cfg.max_records_per_call, cfg.idle_poll_interval,
                              cfg.effective_max_idle_poll_interval)  # fmt: skip
    seconds, reads = 0.0, 0
    while settings.delay(reads) < settings.longest_wait:
        seconds, reads = seconds + settings.delay(reads), reads + 1
    return seconds + settings.longest_wait + 1.0


def _percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))]


def scale_rows(
    kinesalite: LocalServer, moto: LocalServer, say: Any, shard_counts: tuple[int, ...] = SHARD_COUNTS
) -> list[Row]:
    rows: list[Row] = []
    with thread_per_shard_source() as old:
        designs = [("this version", REPO)]
        if old is not None:
            designs.append((f"thread per shard ({THREAD_PER_SHARD})", old))
        else:
            say(f"  scale: git could not unpack {THREAD_PER_SHARD}; only this version is measured")
        for shards in shard_counts:
            for name, source in designs[:1] if shards in LARGE_SHARD_COUNTS else designs:
                say(f"  scale: {shards} shards, {name}")
                figures = measure(kinesalite, moto, source, shards)
                if shards == BUSY_SHARDS and figures.failure is None:
                    figures = attrs.evolve(figures, busy_rss_mb=busy_rss(kinesalite, moto, source, shards))
                if shards in (min(SHARD_COUNTS), BUSY_SHARDS) and figures.failure is None:
                    figures = attrs.evolve(figures, backlog_rate=backlog_rate(kinesalite, moto, source, shards))
                say(f"    {figures}")
                rows.append(_row(name, shards, figures))
    return rows


def _row(design: str, shards: int, f: Figures) -> Row:
    if f.failure is not None:
        return Row(f"scale, {shards} shards, {design}", "kinesalite + moto", "failed", f.failure)
    parts = [
        f"captured in {f.capture:.1f} s; {f.threads} threads, {f.rss_mb:.0f} MB RSS",
        f"idle: {100 * f.idle_cpu:.0f}% of a core ({_outside(f)} from outside), "  # type: ignore[operator]
        f"{f.get_records_per_s:.0f} GetRecords/s",
    ]
    if f.latency is not None:
        parts.append(f"latency p50 / p99 {1000 * f.latency[0]:.0f} / {1000 * f.latency[1]:.0f} ms")
    parts.append(f"join balanced in {_s(f.join)}, leave in {_s(f.leave)}; stops {_s(f.stop_b)}, {_s(f.stop_a)}")
    parts.append(f"{f.duplicates} duplicates, {f.lost} lost, {f.taken} shards taken from a live owner")
    if f.busy_rss_mb is not None:
        backlog = f"{BACKLOG_RECORDS} x {BACKLOG_SIZE // 1024} KiB per shard"
        parts.append(f"slow consumer on a backlog of {backlog}: {f.busy_rss_mb:.0f} MB RSS")
    if f.backlog_rate is not None:
        parts.append(f"a backlog of {THROUGHPUT_RECORDS:,} records read at {f.backlog_rate / 1000:.1f}k records/s")
    figure = f"{f.threads} threads, {100 * f.idle_cpu:.0f}% CPU idle"  # type: ignore[operator]
    return Row(f"scale, {shards} shards, {design}", "kinesalite + moto", figure, "; ".join(parts))


def _s(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds:.1f} s"


def _outside(f: Figures) -> str:
    """The idle CPU measured from outside the process, as a share of a core."""
    return "n/a" if f.idle_cpu_outside is None else f"{100 * f.idle_cpu_outside:.0f}%"
