"""A self-contained demo: several kinsumer processes share one stream on a local moto server.

``python -m demo`` (what ``make demo`` runs, from the repository's top folder) needs no AWS account and no network.
Its phases:

1. start ``moto.server`` on a free port of 127.0.0.1 (and always stop it again);
2. create a Kinesis stream and the application's DynamoDB tables there;
3. start the clients, each a separate OS process (see :mod:`demo.worker`), and the
   process of the client that joins later (it waits); wait until the clients share the shards;
4. produce uniquely numbered records at ``--rate`` from a thread (``kinsumer.cli.produce.produce``,
   what ``kinsumer produce`` runs) while the clients consume them; print a progress block a second:
   per client its shards (``3?``: assigned, not captured yet), its records/s over the last second, and the leader;
5. rebalance while the producer writes (unless ``--no-rebalance``, or with a single client):
   once ``--leave-at`` of the records are delivered, client-0 stops cleanly: ``Kinsumer.stop()``
   counts its last record as processed and hands its shards off. As soon as it is gone the new
   client joins (at once: its process is up since phase 3), and the clients share the shards again;
6. when every produced record was delivered and the rebalance settled, stop every client
   cleanly and print a tally, with a line per client (the one that left and the one that
   joined too): every produced id must be delivered exactly once, but the poison record
   (``--poison``, the middle one by default), which the clients' handler cannot handle: it is
   tried 3 times, then goes to the dead-letter sink, once. The exit code is 0 only then.

Options: ``--records``, ``--shards``, ``--clients``, ``--rate``, ``--aggregate``, ``--leave-at``,
``--no-rebalance``, ``--poison``, ``--timeout`` (see ``--help``).
"""

from __future__ import annotations

import argparse
import multiprocessing
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING

from kinsumer.aws.kinesis import list_shards
from kinsumer.cli.produce import produce
from kinsumer.stats import StatReceiver

from . import servers
from .worker import (
    APPLICATION,
    STREAM,
    Report,
    Tally,
    Worker,
    demo_config,
    drain,
    kinesis_client,
    new_kinsumer,
    start_workers,
    stop_workers,
)

if TYPE_CHECKING:
    from multiprocessing.queues import Queue

    from mypy_boto3_kinesis import KinesisClient

__all__ = ["main"]

JOIN_TIMEOUT = 5.0  # seconds to wait for the producer
STREAM_ACTIVE_TIMEOUT = 30.0
POLL = 0.1  # seconds between two checks of the parent's loop
SHARE_TIMEOUT = 30.0  # seconds to wait for the clients to share the shards before producing anyway
SETTLE_TIMEOUT = 10.0  # seconds to wait for a leave to end, or for the clients to share the shards after a join

EXIT_INTERRUPTED = 130


class DemoError(Exception):
    """The demo could not set itself up; the message says why."""


# ----------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class Settings:
    records: int
    shards: int
    clients: int
    rate: float  # records/s; 0: as fast as possible
    leave_at: float  # share of the records delivered when client-0 leaves
    rebalance: bool
    timeout: float
    aggregate: int = 1  # user records per Kinesis record (KPL format); 1: plain records
    poison: int = -1  # the id of the record the handler cannot handle (-1: none)


def parse_args(argv: Sequence[str] | None) -> Settings:
    parser = argparse.ArgumentParser(
        prog="python -m demo",
        description="Produce records into a Kinesis stream on a local moto server and consume them with "
        "several kinsumer processes, one of which leaves while another joins; check that every record is "
        "delivered exactly once.",
    )
    add = parser.add_argument
    add("--records", type=int, default=20_000, metavar="N", help="records to produce (default 20000)")
    add("--shards", type=int, default=4, metavar="N", help="shards of the stream (default 4)")
    add("--clients", type=int, default=3, metavar="N", help="consumer processes at the start (default 3)")
    add("--rate", type=float, default=5000, metavar="R", help="records/s to produce; 0: unpaced (default 5000)")
    add(
        "--leave-at",
        type=float,
        default=0.35,
        metavar="F",
        help="client-0 leaves once this share is delivered (default 0.35)",
    )
    add("--no-rebalance", dest="rebalance", action="store_false", help="no client leaves, none joins")
    add(
        "--aggregate",
        type=int,
        default=1,
        metavar="N",
        help="write KPL aggregates of N records, as the Kinesis Producer Library does (default 1: plain records)",
    )
    add(
        "--poison",
        type=int,
        default=None,
        metavar="ID",
        help="the handler raises on record ID: tried 3 times, then dead-lettered (default: the middle one; -1: none)",
    )
    add("--timeout", type=float, default=120.0, metavar="S", help="give up after S seconds (default 120)")
    a = parser.parse_args(argv)
    rules = [
        ("--records", a.records >= 1, ">= 1"),
        ("--shards", a.shards >= 1, ">= 1"),
        ("--clients", a.clients >= 1, ">= 1"),
        ("--rate", a.rate >= 0, ">= 0"),
        ("--leave-at", 0 < a.leave_at < 1, "between 0 and 1"),
        ("--timeout", a.timeout > 0, "> 0"),
        ("--aggregate", a.aggregate >= 1, ">= 1"),
    ]
    if broken := [f"{option} must be {rule}" for option, ok, rule in rules if not ok]:
        parser.error("; ".join(broken))
    poison = a.records // 2 if a.poison is None else a.poison
    if not -1 <= poison < a.records:
        parser.error(f"--poison must be an id from 0 to {a.records - 1}, or -1 for none")
    return Settings(a.records, a.shards, a.clients, a.rate, a.leave_at, a.rebalance, a.timeout, a.aggregate, poison)


# ----------------------------------------------------------------------------- setup


def create_stream(kinesis: KinesisClient, shards: int) -> list[str]:
    """Create the stream, wait until it is ACTIVE; its shard ids."""
    kinesis.create_stream(StreamName=STREAM, ShardCount=shards)
    deadline = time.monotonic() + STREAM_ACTIVE_TIMEOUT
    while kinesis.describe_stream_summary(StreamName=STREAM)["StreamDescriptionSummary"]["StreamStatus"] != "ACTIVE":
        if time.monotonic() > deadline:
            raise DemoError(f"stream {STREAM} is not ACTIVE after {STREAM_ACTIVE_TIMEOUT:g} s")
        time.sleep(POLL)
    return sorted(shard.shard_id for shard in list_shards(kinesis, STREAM))


def set_up(endpoint: str, shards: int) -> list[str]:
    shard_ids = create_stream(kinesis_client(endpoint), shards)
    new_kinsumer(endpoint, "demo-setup", demo_config(StatReceiver())).create_required_tables()
    print(f"stream {STREAM!r} ({shards} shards) and the tables of application {APPLICATION!r} are ready", flush=True)
    return shard_ids


class Producer(threading.Thread):
    """Writes the ids 0..total-1 with :func:`kinsumer.cli.produce.produce` (in order, every batch complete)."""

    def __init__(self, kinesis: KinesisClient, total: int, rate: float, aggregate: int = 1) -> None:
        super().__init__(name="demo-producer", daemon=True)
        self._kinesis, self._total, self._rate, self._aggregate = kinesis, total, rate, aggregate
        self.produced = 0  # the ids 0..produced-1 are in the stream
        self.stopping = threading.Event()
        self.error: str | None = None

    def run(self) -> None:
        try:
            rate = self._rate or None
            produce(
                self._kinesis, STREAM, count=self._total, rate=rate, stop=self.stopping, on_batch=self._add,
                aggregate=self._aggregate,
            )  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - reported in the tally
            self.error = f"{type(exc).__name__}: {exc}"

    def _add(self, ids: range) -> None:
        self.produced = ids.stop

    def done(self) -> bool:
        return self.ident is not None and not self.is_alive()


# ----------------------------------------------------------------------------- the parent's loop


class Run:
    """The phases after the setup: share, produce, leave, join, settle; a progress block a second."""

    def __init__(
        self, settings: Settings, shard_ids: list[str], workers: dict[str, Worker], producer: Producer
    ) -> None:
        self.settings, self.shard_ids, self.workers, self.producer = settings, shard_ids, workers, producer
        self.tally = Tally.for_clients(list(workers))
        names = list(workers)
        self.clients = set(names[: settings.clients])  # the clients expected to share the shards
        rebalance = len(names) > settings.clients
        self.leaver: str | None = names[0] if rebalance else None
        self.joiner: str | None = names[-1] if rebalance else None
        self.started = self._line_at = time.monotonic()
        self.phase_at = self.started  # when the current phase began
        self.left_at: float | None = None
        self.joined_at: float | None = None
        self.settled = not rebalance
        self.produced_all = False
        self._handoffs_before_leave = 0
        self._counts = dict.fromkeys(names, 0)  # deliveries at the last progress block

    def loop(self, reports: Queue[Report]) -> float:
        """Run until every record is delivered and the rebalance settled, or time is up; the seconds."""
        deadline = self.started + self.settings.timeout
        while True:
            drain(reports, self.tally, min(time.monotonic() + POLL, deadline))
            self.advance()
            now = time.monotonic()
            ended = self.everything_delivered() and (self.settled or self.producer.error is not None)
            if ended or now >= deadline or self.nobody_reads():
                return now - self.started
            if now >= self._line_at + 1.0:
                self.print_progress(now)

    def advance(self) -> None:
        """Enter the next phase once it is due: produce, leave, join, settled."""
        shared = self.tally.shared_by(self.clients, self.shard_ids)
        late = time.monotonic() - self.phase_at > SETTLE_TIMEOUT
        if self.producer.done() and not self.produced_all:
            self.produced_all = True
            self.event(f"the producer is done: {self.producer.produced} records written")
        if self.producer.ident is None:
            if shared or time.monotonic() - self.started > SHARE_TIMEOUT:
                self.start_producing(shared)
        elif self.leaver is None or self.joiner is None or self.settled:
            return
        elif self.left_at is None:
            if len(self.tally.first_client) >= self.settings.leave_at * self.settings.records:
                self.leave(self.leaver)
        elif self.joined_at is None:
            if self.tally.clients[self.leaver].done or late:
                self.join(self.leaver, self.joiner)
        elif shared or late:
            self.settled = True
            self.event(f"rebalance {'done' if shared else 'not settled, going on'}: {self.owners()}")

    def event(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:5.1f}s] >> {text}", flush=True)

    def start_producing(self, shared: bool) -> None:
        rate = f"{self.settings.rate:g}/s" if self.settings.rate else "full speed"
        if self.settings.aggregate > 1:
            rate += f", {self.settings.aggregate} to a Kinesis record (KPL aggregates)"
        how = "share" if shared else f"still do not share (after {SHARE_TIMEOUT:g} s)"
        self.event(
            f"the clients {how} the shards ({self.owners()}); producing {self.settings.records} records at {rate}"
        )
        self.producer.start()
        self.phase_at = time.monotonic()

    def leave(self, leaver: str) -> None:
        """Tell the worker to stop: Kinsumer.stop() counts its last record as processed and hands its shards off."""
        self._handoffs_before_leave = self.tally.clients[leaver].handoffs
        self.left_at = self.phase_at = time.monotonic()
        self.workers[leaver].stop.set()
        self.clients.discard(leaver)
        self.event(f"{leaver} leaves (clean stop)")

    def join(self, leaver: str, joiner: str) -> None:
        state = self.tally.clients[leaver]
        handed_off = state.handoffs - self._handoffs_before_leave
        self.event(f"{leaver} has left (handoffs {handed_off}, {state.unclean_handoffs} timed out); {self.owners()}")
        self.joined_at = self.phase_at = time.monotonic()
        self.workers[joiner].join.set()
        self.clients.add(joiner)
        self.event(f"{joiner} joins")

    def owners(self) -> str:
        running = [(n, s) for n, s in self.tally.clients.items() if s.state == "running" and not s.done]
        return ", ".join(f"{name} owns {state.shard_list()}" for name, state in running)

    def everything_delivered(self) -> bool:
        """Every produced record was handled, or (the poison) went to the dead-letter sink."""
        produced, delivered, dead = self.producer.produced, self.tally.first_client, self.tally.dead_lettered
        if not self.producer.done() or len(delivered) + len(dead) < produced:
            return False
        return all(i in delivered or i in dead for i in range(produced))

    def nobody_reads(self) -> bool:
        """Every client that joined has stopped (failed, or left with nobody to take over)."""
        joined = [w for w in self.workers.values() if w.join.is_set() and w.name in self.clients]
        return all(self.tally.clients[w.name].done or not w.process.is_alive() for w in joined)

    def print_progress(self, now: float) -> None:
        seconds, self._line_at = now - self._line_at, now
        rate = (self.tally.deliveries - sum(self._counts.values())) / seconds
        lines = [
            f"[{now - self.started:5.1f}s] produced {self.producer.produced:6d}/{self.settings.records}  "
            f"delivered {len(self.tally.first_client):6d}  {rate:5.0f} rec/s"
        ]
        for name, state in self.tally.clients.items():
            rate = (state.delivered - self._counts[name]) / seconds
            lines.append(state.line(name, rate, self.workers[name].join.is_set()))
            self._counts[name] = state.delivered
        print("\n".join(lines), flush=True)


# ----------------------------------------------------------------------------- the verdict


def print_tally(run: Run, wall_seconds: float, timed_out: bool) -> list[str]:
    """Print the final tally; return the reasons for failure (empty: success)."""
    tally = run.tally
    produced = set(range(run.producer.produced))
    lost = produced - tally.first_client.keys() - tally.dead_lettered.keys()
    unknown = tally.first_client.keys() - produced
    print("---- tally ----")
    print(f"produced    {len(produced)}")
    print(f"delivered   {tally.deliveries}")
    print(f"lost        {len(lost)}")
    print(f"duplicates  {len(tally.duplicates)}")
    print(f"dead-lettered {len(tally.dead_lettered)}" + "".join(
        f"  (id {i}: {why})" for i, why in sorted(tally.dead_lettered.items())
    ))  # fmt: skip
    span, what = tally.delivery_span(wall_seconds)
    rate = tally.deliveries / span if span > 0 else 0.0
    print(f"records/s   {rate:.0f}  ({tally.deliveries} deliveries in {span:.2f} s {what})")
    for name, state in tally.clients.items():
        handoffs = f"handoffs {state.handoffs:2d} ({state.unclean_handoffs} timed out)"
        print(f"{name:<11} delivered {state.delivered:6d}  {handoffs}{rebalance_note(run, name)}")
    return failure_reasons(run, lost, unknown, wall_seconds if timed_out else None)


def rebalance_note(run: Run, name: str) -> str:
    if name == run.leaver and run.left_at is not None:
        return f"  left at {run.left_at - run.started:.1f} s"
    if name == run.joiner:
        return f"  joined at {run.joined_at - run.started:.1f} s" if run.joined_at is not None else "  never joined"
    return ""


def failure_reasons(run: Run, lost: set[int], unknown: set[int], timed_out_after: float | None) -> list[str]:
    tally, reasons = run.tally, []
    if timed_out_after is not None:
        reasons.append(f"timed out after {timed_out_after:.0f} s (--timeout) before every record was delivered")
    if lost:
        reasons.append(f"{len(lost)} records were never delivered, e.g. ids {sorted(lost)[:10]}")
    if tally.duplicates:
        examples = ", ".join(f"{i} ({a} then {b})" for i, a, b in tally.duplicates[:10])
        reasons.append(f"{len(tally.duplicates)} deliveries were duplicates, e.g. ids {examples}")
    if unknown:
        reasons.append(f"{len(unknown)} delivered ids were never produced, e.g. {sorted(unknown)[:10]}")
    poison = run.settings.poison
    if poison in tally.first_client:
        reasons.append(f"the poison record {poison} was delivered as handled")
    if 0 <= poison < run.producer.produced and poison not in tally.dead_lettered:
        reasons.append(f"the poison record {poison} never went to the dead-letter sink")
    if wrongly := sorted(set(tally.dead_lettered) - {poison}):
        reasons.append(f"records other than the poison went to the dead-letter sink: {wrongly[:10]}")
    if run.producer.error:
        reasons.append(f"the producer failed: {run.producer.error}")
    reasons.extend(f"{name} failed: {state.error}" for name, state in tally.clients.items() if state.error)
    reasons.extend(f"{name} sent no final report" for name, state in tally.clients.items() if not state.done)
    return reasons


# ----------------------------------------------------------------------------- main


def client_names(settings: Settings) -> list[str]:
    """client-0..client-N-1, and client-N if it joins during the rebalance (which needs 2 clients)."""
    names = [f"client-{i}" for i in range(settings.clients)]
    if not settings.rebalance:
        print("no rebalance (--no-rebalance)")
    elif settings.clients < 2:
        print("no rebalance: it needs at least 2 clients (--clients 1)")
    else:
        names.append(f"client-{settings.clients}")
        share = f"{settings.leave_at:.0%}"
        print(f"rebalance: client-0 leaves once {share} of the records are delivered, then {names[-1]} joins")
    return names


def run_demo(settings: Settings, endpoint: str) -> int:
    shard_ids = set_up(endpoint, settings.shards)
    context = multiprocessing.get_context("spawn")
    reports: Queue[Report] = context.Queue()
    names = client_names(settings)
    print(f"starting {settings.clients} clients; per client: leader, shards (3? = not captured yet), records/s")
    producer = Producer(kinesis_client(endpoint), settings.records, settings.rate, settings.aggregate)
    workers = start_workers(context, names, settings.clients, endpoint, reports, settings.poison)
    run = Run(settings, shard_ids, workers, producer)
    try:
        seconds = run.loop(reports)
    finally:
        producer.stopping.set()
        stop_workers(list(run.workers.values()), reports, run.tally)
        if producer.ident is not None:
            producer.join(JOIN_TIMEOUT)
    timed_out = seconds >= settings.timeout and not run.everything_delivered()
    reasons = print_tally(run, seconds, timed_out)
    for reason in reasons:
        print(f"FAILED: {reason}")
    if reasons:
        print("FAILED", flush=True)
    elif 0 <= settings.poison < run.producer.produced:
        print("OK: every record was delivered exactly once, but the poison record: dead-lettered", flush=True)
    else:
        print("OK: every record was delivered exactly once", flush=True)
    return 1 if reasons else 0


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)  # `timeout` or a CI runner: clean up as for Ctrl-C
    try:
        with servers.moto_server() as server:
            print(f"moto server at {server.endpoint}", flush=True)
            return run_demo(settings, server.endpoint)
    except KeyboardInterrupt:
        print("interrupted; stopped the workers and the moto server", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (DemoError, servers.ServerError) as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
