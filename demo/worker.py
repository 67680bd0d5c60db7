"""The workers of ``python -m demo``: the consumer processes, and the parent's handle on them.

Each worker is a separate OS process running one :class:`Kinsumer`. It waits until the parent
lets it join (the initial clients at once, the client that joins during the rebalance later),
handles records with ``Kinsumer.process()`` until the parent tells it to stop, then stops
cleanly: every handled record is checkpointed, and its shards are handed off. Its handler cannot
handle one record (the poison): it is tried 3 times, then goes to the dead-letter sink. Every
``REPORT_EVERY`` seconds it sends the parent a :class:`Report`: the ids it delivered since the
last one, those that went to the dead-letter sink, ``Kinsumer.status()`` (leader, shards and
whether each is captured yet) and its handoff counts (the ``handoff`` stats hook).

The parent starts and stops the processes (:func:`start_workers`, :func:`stop_workers`) and
merges their reports into a :class:`Tally`.
"""

from __future__ import annotations

import json
import logging
import queue
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict, cast

from kinsumer import Config, Failure, Kinsumer, Record, StatReceiver

from . import servers

if TYPE_CHECKING:
    from multiprocessing.context import SpawnContext, SpawnProcess
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Event

    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kinesis import KinesisClient

STREAM = "kinsumer-demo"
APPLICATION = "kinsumer-demo"
REPORT_EVERY = 0.2  # seconds between two reports of a worker
REPORT_IDS = 500  # ... or as soon as it has this many new ids
POLL = 0.1  # seconds between two checks of a waiting loop
WORKER_STOP_TIMEOUT = 30.0  # Kinsumer.stop() is bounded by handoff_timeout + 10 s
JOIN_TIMEOUT = 5.0  # seconds to wait for a terminated worker


# ----------------------------------------------------------------------------- shared with the parent


def demo_config(stats: StatReceiver) -> Config:
    """Short periods, so that joins, rebalances and stops happen within seconds."""
    return Config(
        shard_check_frequency=1.0,
        commit_frequency=0.5,
        leader_action_frequency=5.0,
        handoff_timeout=5.0,
        stats=stats,
    )


_CLIENT_OPTIONS: dict[str, Any] = {"max_pool_connections": 32, "retries": {"mode": "standard", "max_attempts": 5}}


def kinesis_client(endpoint: str) -> KinesisClient:
    return cast("KinesisClient", servers.client(endpoint, "kinesis", **_CLIENT_OPTIONS))


def dynamodb_client(endpoint: str) -> DynamoDBClient:
    return cast("DynamoDBClient", servers.client(endpoint, "dynamodb", **_CLIENT_OPTIONS))


def new_kinsumer(endpoint: str, client_name: str, config: Config) -> Kinsumer:
    return Kinsumer(
        STREAM, APPLICATION, client_name, config, kinesis=kinesis_client(endpoint), dynamodb=dynamodb_client(endpoint)
    )


class Report(TypedDict):
    """What a worker sends the parent (built-in types only, so it pickles anywhere)."""

    client: str
    ids: list[int]
    first_at: float | None  # time.time() of the first and last delivery in ``ids``
    last_at: float | None
    state: str  # of the Kinsumer: new (not joined yet), running or stopped
    leader: bool
    client_count: int  # live clients, as this client's last membership round saw them
    shards: list[tuple[str, bool]]  # (shard id, captured yet) of the shards it is assigned
    handoffs: int
    unclean_handoffs: int  # handoffs that timed out: their unacknowledged records come again
    done: bool  # the last report: the worker stopped
    error: str | None
    dead: list[tuple[int, str]]  # ids handed to the dead-letter sink since the last report, with why


# ----------------------------------------------------------------------------- reporting


class HandoffCounter(StatReceiver):
    """Counts the ends of handoffs (the ``handoff`` hook), clean and timed out."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.handoffs = 0
        self.unclean_handoffs = 0

    def handoff(self, shard_id: str, seconds: float, clean: bool) -> None:
        with self._lock:
            self.handoffs += 1
            self.unclean_handoffs += not clean


class Reporter:
    """Batches a worker's delivered ids and sends them with its status to the parent."""

    def __init__(self, reports: Queue[Report], kinsumer: Kinsumer, handoffs: HandoffCounter) -> None:
        self._reports = reports
        self._kinsumer = kinsumer
        self._handoffs = handoffs
        self._lock = threading.Lock()  # the handler and the reporting thread both send
        self._ids: list[int] = []
        self._dead: list[tuple[int, str]] = []
        self._first_at: float | None = None
        self._last_at: float | None = None
        self._due = time.monotonic() + REPORT_EVERY

    def delivered(self, record: Record) -> None:
        now = time.time()
        with self._lock:
            self._ids.append(int(json.loads(record.data)["id"]))
            self._first_at = self._first_at or now
            self._last_at = now
            due = len(self._ids) >= REPORT_IDS or time.monotonic() >= self._due
        if due:
            self.send()

    def dead_letter(self, failure: Failure) -> None:
        """The dead-letter sink: the parent's tally lists what went to it."""
        why = f"{failure.reason} after {failure.attempts} attempts ({failure.error})"
        with self._lock:
            self._dead.append((int(json.loads(failure.record.data)["id"]), why))
        self.send()

    def send_if_due(self) -> None:
        if time.monotonic() >= self._due:
            self.send()

    def send(self, *, done: bool = False, error: str | None = None) -> None:
        """Send the ids delivered since the last report, the client's status and its handoffs."""
        with self._lock:
            self._send(done, error)

    def _send(self, done: bool, error: str | None) -> None:
        status = self._kinsumer.status()
        report = Report(
            client=self._kinsumer.client_name,
            ids=self._ids,
            first_at=self._first_at,
            last_at=self._last_at,
            state=status.state,
            leader=status.is_leader,
            client_count=status.client_count,
            shards=[(s.shard_id, s.captured) for s in status.shards] if status.state == "running" else [],
            handoffs=self._handoffs.handoffs,
            unclean_handoffs=self._handoffs.unclean_handoffs,
            done=done,
            error=error,
            dead=self._dead,
        )
        self._reports.put(report)
        self._ids, self._dead, self._first_at, self._last_at = [], [], None, None
        self._due = time.monotonic() + REPORT_EVERY


# ----------------------------------------------------------------------------- the process


def consume(kinsumer: Kinsumer, stop: Event, reporter: Reporter, poison: int) -> None:
    """Handle records with ``Kinsumer.process()`` until the parent says stop (or the consumer stops by
    itself). The handler cannot handle the record ``poison``: it raises, the record is tried 3 times,
    then goes to the dead-letter sink (the parent's tally), and the shard goes on."""

    def handle(record: Record) -> None:
        if int(json.loads(record.data)["id"]) == poison:
            raise ValueError("a poison record: this handler cannot process it")
        reporter.delivered(record)

    def report_and_stop() -> None:  # reports while idle too; stop() ends process()
        while not stop.wait(REPORT_EVERY):
            reporter.send_if_due()
        kinsumer.stop()

    helper = threading.Thread(target=report_and_stop, name="demo-reports", daemon=True)
    helper.start()
    kinsumer.process(handle, max_attempts=3, backoff=0.1, dead_letter=reporter.dead_letter)
    stop.set()  # process() ended by itself (an error): let the helper go
    helper.join()


def wait_to_join(join: Event, stop: Event) -> bool:
    """Wait for the parent's go; False if told to stop first."""
    while not join.wait(POLL):
        if stop.is_set():
            return False
    return not stop.is_set()


def worker_main(client: str, endpoint: str, reports: Queue[Report], join: Event, stop: Event, poison: int) -> None:
    """One consumer process: join when told, read until ``stop`` is set, stop cleanly, send a final report."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited already; the parent handles Ctrl-C and sets ``stop``
    logging.basicConfig(format=f"%(asctime)s {client} %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kinsumer").setLevel(logging.WARNING)
    handoffs = HandoffCounter()
    kinsumer = new_kinsumer(endpoint, client, demo_config(handoffs))  # before the wait: a quick join
    reporter = Reporter(reports, kinsumer, handoffs)
    error: str | None = None
    try:
        if wait_to_join(join, stop):
            kinsumer.run()
            reporter.send()
            consume(kinsumer, stop, reporter, poison)
    except Exception as exc:  # noqa: BLE001 - sent to the parent, which reports it
        error = f"{type(exc).__name__}: {exc}"
    finally:
        kinsumer.stop()  # every handled record is checkpointed; every shard is handed off
        reporter.send(done=True, error=error)


# ----------------------------------------------------------------------------- the parent's handles on the workers


@dataclass
class Worker:
    name: str
    process: SpawnProcess
    join: Event  # set: join the application (at once for the initial clients)
    stop: Event  # set: stop cleanly and send a final report


def start_workers(
    context: SpawnContext, names: list[str], initial: int, endpoint: str, reports: Queue[Report], poison: int = -1
) -> dict[str, Worker]:
    """Start a process per name; the first ``initial`` join at once, the others when told."""
    workers = {}
    for i, name in enumerate(names):
        join, stop = context.Event(), context.Event()
        if i < initial:
            join.set()
        process = context.Process(
            target=worker_main, args=(name, endpoint, reports, join, stop, poison), name=name, daemon=True
        )
        workers[name] = Worker(name, process, join, stop)
    # started with SIGINT ignored, they inherit that: a Ctrl-C during their imports is ours to handle
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        for worker in workers.values():
            worker.process.start()
    finally:
        signal.signal(signal.SIGINT, previous)
    return workers


def stop_workers(workers: list[Worker], reports: Queue[Report], tally: Tally) -> None:
    """Ask every worker to stop, collect their final reports, and make sure none is left running."""
    for worker in workers:
        worker.stop.set()
    deadline = time.monotonic() + WORKER_STOP_TIMEOUT
    while not tally.all_done() and time.monotonic() < deadline and any(w.process.is_alive() for w in workers):
        drain(reports, tally, min(time.monotonic() + 0.5, deadline))
    for worker in workers:
        process = worker.process
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            print(f"{worker.name} did not stop within {WORKER_STOP_TIMEOUT:g} s; terminating it", flush=True)
            process.terminate()
            process.join(JOIN_TIMEOUT)
            if process.is_alive():
                process.kill()
                process.join()
    drain(reports, tally, time.monotonic() + POLL)


# ----------------------------------------------------------------------------- what the workers reported


@dataclass
class ClientState:
    delivered: int = 0
    state: str = "new"  # of its Kinsumer: new (not joined yet), running, stopped
    leader: bool = False
    client_count: int = 0
    shards: list[tuple[str, bool]] = field(default_factory=list)  # (shard id, captured)
    handoffs: int = 0
    unclean_handoffs: int = 0
    done: bool = False
    error: str | None = None

    def shard_list(self) -> str:
        """Its shards, short: ``0,3?`` (``?``: assigned, not captured yet; the previous owner hands it off)."""
        return ",".join(_short(shard) + ("" if captured else "?") for shard, captured in self.shards) or "-"

    def line(self, name: str, rate: float, joined: bool) -> str:
        """Its line in a progress block: leader, shards, records/s over the last second, delivered."""
        if self.state == "new" and not self.done:
            return f"    {name:<9} {'starting' if joined else 'waiting to join'}"
        delivered = f"delivered {self.delivered:6d}"
        if self.done or self.state != "running":
            return f"    {name:<9} {'failed' if self.error else 'left':<32} {delivered}"
        role = "leader" if self.leader else ""
        return f"    {name:<9} {role:<6} shards {self.shard_list():<12} {rate:5.0f} rec/s  {delivered}"


def _short(shard_id: str) -> str:
    return shard_id.rsplit("-", 1)[-1].lstrip("0") or "0"


@dataclass
class Tally:
    """Everything the workers reported, merged."""

    clients: dict[str, ClientState]
    first_client: dict[int, str] = field(default_factory=dict)  # id -> the client that delivered it first
    deliveries: int = 0
    duplicates: list[tuple[int, str, str]] = field(default_factory=list)  # (id, first client, again by)
    first_at: float | None = None
    last_at: float | None = None
    dead_lettered: dict[int, str] = field(default_factory=dict)  # id -> why, as the sink got it (first time)

    @classmethod
    def for_clients(cls, names: list[str]) -> Tally:
        return cls(clients={name: ClientState() for name in names})

    def add(self, report: Report) -> None:
        state = self.clients[report["client"]]
        for record_id in report["ids"]:
            first = self.first_client.get(record_id)
            if first is None:
                self.first_client[record_id] = report["client"]
            else:
                self.duplicates.append((record_id, first, report["client"]))
        for record_id, why in report["dead"]:
            self.dead_lettered.setdefault(record_id, f"{why}, by {report['client']}")
        self.deliveries += len(report["ids"])
        state.delivered += len(report["ids"])
        state.state, state.leader, state.client_count = report["state"], report["leader"], report["client_count"]
        state.shards, state.done, state.error = report["shards"], report["done"], report["error"]
        state.handoffs, state.unclean_handoffs = report["handoffs"], report["unclean_handoffs"]
        if report["first_at"] is not None and report["last_at"] is not None:
            self.first_at = min(self.first_at or report["first_at"], report["first_at"])
            self.last_at = max(self.last_at or report["last_at"], report["last_at"])

    def all_done(self) -> bool:
        return all(state.done for state in self.clients.values())

    def shared_by(self, names: set[str], shard_ids: list[str]) -> bool:
        """Exactly ``names`` are running, each sees them all, and each shard is captured by one of them."""
        running = {name for name, state in self.clients.items() if state.state == "running" and not state.done}
        shards = [shard for name in running for shard in self.clients[name].shards]
        counts = {self.clients[name].client_count for name in running}
        all_captured = all(captured for _, captured in shards)
        return (
            running == names and counts == {len(names)} and all_captured and sorted(s for s, _ in shards) == shard_ids
        )

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
