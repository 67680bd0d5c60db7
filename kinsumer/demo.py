"""A self-contained demo: several kinsumer processes share one stream on a local moto server.

``python -m kinsumer.demo`` (what ``make demo`` runs) needs no AWS account and no network:

1. it starts ``moto.server`` on a free port of 127.0.0.1 (and always stops it again);
2. creates a Kinesis stream and the application's DynamoDB tables there;
3. produces records with unique ids from a background thread;
4. consumes them with several clients, each a separate OS process;
5. prints one progress line per second, then a tally: every produced id must be
   delivered exactly once. The exit code is 0 only then.

Options: ``--records``, ``--shards``, ``--clients``, ``--timeout`` (see ``--help``).
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import queue
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any, TypedDict, cast

from . import local_server
from .config import Config
from .consumer import Kinsumer
from .record import Record
from .stats import StatReceiver

if TYPE_CHECKING:
    from multiprocessing.context import SpawnContext, SpawnProcess
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Event

    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kinesis import KinesisClient
    from mypy_boto3_kinesis.type_defs import PutRecordsRequestEntryTypeDef

__all__ = ["main"]

STREAM = "kinsumer-demo"
APPLICATION = "kinsumer-demo"
REGION = "us-east-1"
BATCH = 500  # records per PutRecords call (the Kinesis maximum)
PARTITION_KEYS = 97

JOIN_TIMEOUT = 5.0  # seconds to wait for a terminated worker or the producer
STREAM_ACTIVE_TIMEOUT = 30.0
POLL = 0.1  # seconds between two checks of a polling loop with a deadline
WORKER_STOP_TIMEOUT = 30.0  # Kinsumer.stop() is bounded by handoff_timeout + 10 s
REPORT_EVERY = 0.2  # seconds between two reports of a worker
REPORT_IDS = 500  # ... or as soon as it has this many new ids
PUT_ATTEMPTS = 10

EXIT_INTERRUPTED = 130


class DemoError(Exception):
    """The demo could not set itself up; the message says why."""


# ----------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class Settings:
    records: int
    shards: int
    clients: int
    timeout: float


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def parse_args(argv: Sequence[str] | None) -> Settings:
    parser = argparse.ArgumentParser(
        prog="python -m kinsumer.demo",
        description="Produce records into a Kinesis stream on a local moto server and consume them with "
        "several kinsumer processes; check that every record is delivered exactly once.",
    )
    parser.add_argument("--records", type=_positive_int, default=20_000, help="records to produce (default 20000)")
    parser.add_argument("--shards", type=_positive_int, default=4, help="shards of the stream (default 4)")
    parser.add_argument("--clients", type=_positive_int, default=3, help="consumer processes (default 3)")
    parser.add_argument(
        "--timeout", type=_positive_float, default=120.0, help="give up after this many seconds (default 120)"
    )
    args = parser.parse_args(argv)
    return Settings(records=args.records, shards=args.shards, clients=args.clients, timeout=args.timeout)


def demo_config(stats: StatReceiver) -> Config:
    """Short periods, so that joins, rebalances and stops happen within seconds."""
    return Config(
        shard_check_frequency=1.0,
        commit_frequency=0.5,
        leader_action_frequency=5.0,
        handoff_timeout=5.0,
        stats=stats,
    )


# ----------------------------------------------------------------------------- AWS clients and setup


_CLIENT_OPTIONS: dict[str, Any] = {"max_pool_connections": 32, "retries": {"mode": "standard", "max_attempts": 5}}


def kinesis_client(endpoint: str) -> KinesisClient:
    return cast("KinesisClient", local_server.client(endpoint, "kinesis", **_CLIENT_OPTIONS))


def dynamodb_client(endpoint: str) -> DynamoDBClient:
    return cast("DynamoDBClient", local_server.client(endpoint, "dynamodb", **_CLIENT_OPTIONS))


def new_kinsumer(endpoint: str, client_name: str, config: Config) -> Kinsumer:
    return Kinsumer(
        STREAM, APPLICATION, client_name, config, kinesis=kinesis_client(endpoint), dynamodb=dynamodb_client(endpoint)
    )


def create_stream(kinesis: KinesisClient, shards: int) -> None:
    kinesis.create_stream(StreamName=STREAM, ShardCount=shards)
    deadline = time.monotonic() + STREAM_ACTIVE_TIMEOUT
    while kinesis.describe_stream_summary(StreamName=STREAM)["StreamDescriptionSummary"]["StreamStatus"] != "ACTIVE":
        if time.monotonic() > deadline:
            raise DemoError(f"stream {STREAM} is not ACTIVE after {STREAM_ACTIVE_TIMEOUT:g} s")
        time.sleep(POLL)


def set_up(endpoint: str, shards: int) -> None:
    create_stream(kinesis_client(endpoint), shards)
    new_kinsumer(endpoint, "demo-setup", demo_config(StatReceiver())).create_required_tables()
    print(f"stream {STREAM!r} ({shards} shards) and the tables of application {APPLICATION!r} are ready", flush=True)


# ----------------------------------------------------------------------------- the producer


def encode(record_id: int) -> PutRecordsRequestEntryTypeDef:
    data = json.dumps({"id": record_id, "ts": time.time()}).encode()
    return {"Data": data, "PartitionKey": str(record_id % PARTITION_KEYS)}


class Producer(threading.Thread):
    """Puts ``total`` records with the ids 0..total-1, retrying every failed entry."""

    def __init__(self, kinesis: KinesisClient, total: int) -> None:
        super().__init__(name="demo-producer", daemon=True)
        self._kinesis = kinesis
        self._total = total
        self._lock = threading.Lock()
        self._ids: list[int] = []
        self.stopping = threading.Event()
        self.error: str | None = None

    @property
    def produced(self) -> int:
        with self._lock:
            return len(self._ids)

    def produced_ids(self) -> set[int]:
        with self._lock:
            return set(self._ids)

    def run(self) -> None:
        try:
            for start in range(0, self._total, BATCH):
                if self.stopping.is_set():
                    return
                self._put(list(range(start, min(start + BATCH, self._total))))
        except Exception as exc:  # noqa: BLE001 - reported in the tally
            self.error = f"{type(exc).__name__}: {exc}"

    def _put(self, ids: list[int]) -> None:
        pending = {record_id: encode(record_id) for record_id in ids}
        for attempt in range(PUT_ATTEMPTS):
            response = self._kinesis.put_records(StreamName=STREAM, Records=list(pending.values()))
            results = zip(list(pending), response["Records"], strict=True)
            accepted = [record_id for record_id, result in results if "ErrorCode" not in result]
            with self._lock:
                self._ids.extend(accepted)
            for record_id in accepted:
                del pending[record_id]
            if not pending or self.stopping.wait(min(0.05 * 2**attempt, 2.0)):  # back off before a retry
                return
        raise RuntimeError(f"{len(pending)} records still failed after {PUT_ATTEMPTS} PutRecords attempts")


# ----------------------------------------------------------------------------- the workers


class Report(TypedDict):
    """What a worker sends the parent (built-in types only, so it pickles anywhere)."""

    client: str
    ids: list[int]
    first_at: float | None  # time.time() of the first and last delivery in ``ids``
    last_at: float | None
    shards: list[str]
    handoffs: int
    unclean_handoffs: int
    done: bool
    error: str | None


class ShardWatch(StatReceiver):
    """The public way to see which shards a client reads: the shard_gained / shard_lost hooks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._shards: set[str] = set()
        self.handoffs = 0
        self.unclean_handoffs = 0

    def shard_gained(self, shard_id: str) -> None:
        with self._lock:
            self._shards.add(shard_id)

    def shard_lost(self, shard_id: str) -> None:
        with self._lock:
            self._shards.discard(shard_id)

    def handoff(self, shard_id: str, seconds: float, clean: bool) -> None:
        with self._lock:
            self.handoffs += 1
            self.unclean_handoffs += not clean

    def shards(self) -> list[str]:
        with self._lock:
            return sorted(self._shards)


class Reporter:
    """Batches a worker's delivered ids and sends them with its state to the parent."""

    def __init__(self, client: str, reports: Queue[Report], watch: ShardWatch) -> None:
        self._client = client
        self._reports = reports
        self._watch = watch
        self._ids: list[int] = []
        self._first_at: float | None = None
        self._last_at: float | None = None
        self._due = time.monotonic() + REPORT_EVERY

    def delivered(self, record: Record) -> None:
        now = time.time()
        self._ids.append(int(json.loads(record.data)["id"]))
        self._first_at = self._first_at or now
        self._last_at = now
        if len(self._ids) >= REPORT_IDS:
            self.send()

    def send_if_due(self) -> None:
        if time.monotonic() >= self._due:
            self.send()

    def send(self, *, done: bool = False, error: str | None = None) -> None:
        watch = self._watch
        report = Report(
            client=self._client,
            ids=self._ids,
            first_at=self._first_at,
            last_at=self._last_at,
            shards=[] if done else watch.shards(),
            handoffs=watch.handoffs,
            unclean_handoffs=watch.unclean_handoffs,
            done=done,
            error=error,
        )
        self._reports.put(report)
        self._ids, self._first_at, self._last_at = [], None, None
        self._due = time.monotonic() + REPORT_EVERY


def consume(kinsumer: Kinsumer, stop: Event, reporter: Reporter) -> None:
    """Take records until the parent says stop (or the consumer stops by itself)."""
    while not stop.is_set():
        try:
            record = kinsumer.next_record(timeout=REPORT_EVERY)
        except TimeoutError:
            reporter.send_if_due()
            continue
        if record is None:
            return
        reporter.delivered(record)
        reporter.send_if_due()


def worker_main(index: int, endpoint: str, reports: Queue[Report], stop: Event) -> None:
    """One consumer process: read until ``stop`` is set, stop cleanly, send a final report."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited already; the parent handles Ctrl-C and sets ``stop``
    client = f"client-{index}"
    logging.basicConfig(format=f"%(asctime)s {client} %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kinsumer").setLevel(logging.WARNING)
    watch = ShardWatch()
    reporter = Reporter(client, reports, watch)
    error: str | None = None
    kinsumer = new_kinsumer(endpoint, client, demo_config(watch))
    try:
        kinsumer.run()
        consume(kinsumer, stop, reporter)
    except Exception as exc:  # noqa: BLE001 - sent to the parent, which reports it
        error = f"{type(exc).__name__}: {exc}"
    finally:
        kinsumer.stop()  # the last record taken counts as processed
        reporter.send(done=True, error=error)


def start_workers(
    context: SpawnContext, count: int, endpoint: str, reports: Queue[Report], stop: Event
) -> list[SpawnProcess]:
    workers = [
        context.Process(target=worker_main, args=(i, endpoint, reports, stop), name=f"client-{i}", daemon=True)
        for i in range(count)
    ]
    # started with SIGINT ignored, they inherit that: a Ctrl-C during their imports is ours to handle
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        for worker in workers:
            worker.start()
    finally:
        signal.signal(signal.SIGINT, previous)
    return workers


# ----------------------------------------------------------------------------- the tally


@dataclass
class ClientState:
    delivered: int = 0
    shards: list[str] = field(default_factory=list)
    handoffs: int = 0
    unclean_handoffs: int = 0
    done: bool = False
    error: str | None = None


@dataclass
class Tally:
    """Everything the workers reported, merged."""

    clients: dict[str, ClientState]
    first_client: dict[int, str] = field(default_factory=dict)  # id -> the client that delivered it first
    deliveries: int = 0
    duplicates: list[tuple[int, str, str]] = field(default_factory=list)  # (id, first client, again by)
    first_at: float | None = None
    last_at: float | None = None

    @classmethod
    def for_clients(cls, count: int) -> Tally:
        return cls(clients={f"client-{i}": ClientState() for i in range(count)})

    def add(self, report: Report) -> None:
        state = self.clients[report["client"]]
        for record_id in report["ids"]:
            first = self.first_client.get(record_id)
            if first is None:
                self.first_client[record_id] = report["client"]
            else:
                self.duplicates.append((record_id, first, report["client"]))
        self.deliveries += len(report["ids"])
        state.delivered += len(report["ids"])
        state.shards, state.done, state.error = report["shards"], report["done"], report["error"]
        state.handoffs, state.unclean_handoffs = report["handoffs"], report["unclean_handoffs"]
        if report["first_at"] is not None and report["last_at"] is not None:
            self.first_at = min(self.first_at or report["first_at"], report["first_at"])
            self.last_at = max(self.last_at or report["last_at"], report["last_at"])

    def all_done(self) -> bool:
        return all(state.done for state in self.clients.values())

    def delivery_span(self, fallback_seconds: float) -> tuple[float, str]:
        """Seconds from the first delivery to the last (else the consume wall time), and which it is."""
        if self.first_at is not None and self.last_at is not None and self.last_at > self.first_at:
            return self.last_at - self.first_at, "from first to last delivery"
        return fallback_seconds, "of consuming"


def drain(reports: Queue[Report], tally: Tally, until: float) -> None:
    """Merge reports as they come until the monotonic time ``until``; at least what is queued."""
    while True:
        try:
            tally.add(reports.get(timeout=max(0.0, until - time.monotonic())))
        except queue.Empty:
            return


# ----------------------------------------------------------------------------- the parent's loop


def short_shard(shard_id: str) -> str:
    return shard_id.rsplit("-", 1)[-1].lstrip("0") or "0"


def progress_line(elapsed: float, producer: Producer, tally: Tally, rate: float) -> str:
    head = f"[{elapsed:5.1f}s] produced {producer.produced:6d}  delivered {tally.deliveries:6d}"
    parts = [f"{head}  rate {rate:5.0f} rec/s"]
    for name, state in tally.clients.items():
        shards = ",".join(short_shard(s) for s in state.shards) or "-"
        parts.append(f"{name} {state.delivered:6d} [{shards}]")
    return "  | ".join(parts)


def everything_delivered(producer: Producer, tally: Tally) -> bool:
    if producer.is_alive() or len(tally.first_client) < producer.produced:
        return False
    return producer.produced_ids() <= tally.first_client.keys()


def watch_progress(settings: Settings, producer: Producer, reports: Queue[Report], tally: Tally) -> float:
    """Print a line a second until everything produced was delivered or time is up; return the seconds."""
    started = time.monotonic()
    deadline = started + settings.timeout
    last_line, last_count = started, 0
    while True:
        drain(reports, tally, min(last_line + 1.0, deadline))
        now = time.monotonic()
        if everything_delivered(producer, tally) or now >= deadline or tally.all_done():
            return now - started
        if now >= last_line + 1.0:
            rate = (tally.deliveries - last_count) / (now - last_line)
            print(progress_line(now - started, producer, tally, rate), flush=True)
            last_line, last_count = now, tally.deliveries


def stop_workers(workers: list[SpawnProcess], reports: Queue[Report], stop: Event, tally: Tally) -> None:
    """Ask every worker to stop, collect their final reports, and make sure none is left running."""
    stop.set()
    deadline = time.monotonic() + WORKER_STOP_TIMEOUT
    while not tally.all_done() and time.monotonic() < deadline and any(w.is_alive() for w in workers):
        drain(reports, tally, min(time.monotonic() + 0.5, deadline))
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
        if worker.is_alive():
            print(f"{worker.name} did not stop within {WORKER_STOP_TIMEOUT:g} s; terminating it", flush=True)
            worker.terminate()
            worker.join(JOIN_TIMEOUT)
            if worker.is_alive():
                worker.kill()
                worker.join()
    drain(reports, tally, time.monotonic() + POLL)


# ----------------------------------------------------------------------------- the verdict


def print_tally(producer: Producer, tally: Tally, wall_seconds: float, timed_out: bool) -> list[str]:
    """Print the final tally; return the reasons for failure (empty: success)."""
    produced = producer.produced_ids()
    lost = produced - tally.first_client.keys()
    unknown = tally.first_client.keys() - produced
    print("---- tally ----")
    print(f"produced    {len(produced)}")
    print(f"delivered   {tally.deliveries}")
    print(f"lost        {len(lost)}")
    print(f"duplicates  {len(tally.duplicates)}")
    span, what = tally.delivery_span(wall_seconds)
    rate = tally.deliveries / span if span > 0 else 0.0
    print(f"records/s   {rate:.0f}  ({tally.deliveries} deliveries in {span:.2f} s {what})")
    for name, state in tally.clients.items():
        unclean = f", {state.unclean_handoffs} timed out" if state.unclean_handoffs else ""
        print(f"{name:<11} {state.delivered}  (handoffs {state.handoffs}{unclean})")
    return failure_reasons(producer, tally, lost, unknown, wall_seconds if timed_out else None)


def failure_reasons(
    producer: Producer, tally: Tally, lost: set[int], unknown: set[int], timed_out_after: float | None
) -> list[str]:
    reasons = []
    if timed_out_after is not None:
        reasons.append(f"timed out after {timed_out_after:.0f} s (--timeout) before every record was delivered")
    if lost:
        reasons.append(f"{len(lost)} records were never delivered, e.g. ids {sorted(lost)[:10]}")
    if tally.duplicates:
        examples = ", ".join(f"{i} ({a} then {b})" for i, a, b in tally.duplicates[:10])
        reasons.append(f"{len(tally.duplicates)} deliveries were duplicates, e.g. ids {examples}")
    if unknown:
        reasons.append(f"{len(unknown)} delivered ids were never produced, e.g. {sorted(unknown)[:10]}")
    if producer.error:
        reasons.append(f"the producer failed: {producer.error}")
    reasons.extend(f"{name} failed: {state.error}" for name, state in tally.clients.items() if state.error)
    reasons.extend(f"{name} sent no final report" for name, state in tally.clients.items() if not state.done)
    return reasons


# ----------------------------------------------------------------------------- main


def run_demo(settings: Settings, endpoint: str) -> int:
    set_up(endpoint, settings.shards)
    context = multiprocessing.get_context("spawn")
    reports: Queue[Report] = context.Queue()
    stop = context.Event()
    tally = Tally.for_clients(settings.clients)
    producer = Producer(kinesis_client(endpoint), settings.records)
    print(f"producing {settings.records} records; consuming with {settings.clients} processes", flush=True)
    workers = start_workers(context, settings.clients, endpoint, reports, stop)
    try:
        producer.start()
        seconds = watch_progress(settings, producer, reports, tally)
    finally:
        producer.stopping.set()
        stop_workers(workers, reports, stop, tally)
        producer.join(JOIN_TIMEOUT)
    timed_out = seconds >= settings.timeout and not everything_delivered(producer, tally)
    reasons = print_tally(producer, tally, seconds, timed_out)
    for reason in reasons:
        print(f"FAILED: {reason}")
    print("OK: every record was delivered exactly once" if not reasons else "FAILED", flush=True)
    return 1 if reasons else 0


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)  # `timeout` or a CI runner: clean up as for Ctrl-C
    try:
        with local_server.moto_server() as server:
            print(f"moto server at {server.endpoint}", flush=True)
            return run_demo(settings, server.endpoint)
    except KeyboardInterrupt:
        print("interrupted; stopped the workers and the moto server", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (DemoError, RuntimeError) as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
