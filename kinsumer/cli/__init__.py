"""The ``kinsumer`` command: tables, status, tail, test records, resets, imports.

    kinsumer create-tables APP            kinsumer status STREAM APP [--json] [--watch [SECONDS]]
    kinsumer delete-tables APP --yes      kinsumer tail STREAM [--from latest] [--app APP [--commit]]
    kinsumer create-stream STREAM         kinsumer produce STREAM --count N [--aggregate N]
    kinsumer reset --app APP --stream S --to TRIM_HORIZON | LATEST | AT_TIMESTAMP TIME [--shard ID ...]
    kinsumer import-kcl LEASE_TABLE --app APP --stream S [--dry-run] [--at-timestamp TIME] [--yes]
    kinsumer dead-letters list | show ID | redrive --to STREAM  SINK (s3://BUCKET/PREFIX, sqs:URL, kinesis:STREAM)

AWS options (``--region``, ``--profile``, ``--endpoint-url``...) default to the standard
environment. Errors print one line and exit 1; Ctrl-C stops cleanly with exit 130.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, cast

from .. import admin
from .._version import __version__
from ..aws.kinesis import ensure_stream_active, list_shards, stream_exists
from ..aws.stream_ref import StreamRef
from ..aws.tables import Tables, ensure_tables_ready
from ..config import Config, InitialPosition, validate_names
from ..consumer import Kinsumer
from ..coordination import checkpoints_table, clients_table, metadata_table
from ..coordination.home_stream import stream_scope
from ..coordination.kcl_import import apply_import, check_import, plan_import
from ..coordination.rewind import ResetPlan
from ..coordination.streams import agreed_streams, listed_streams
from ..errors import KinsumerError
from ..reading.position import StartPosition
from ..status import read_status
from .aws import add_aws_options, clients, describe_error
from .dead_letters import add_dead_letter_commands
from .efo import add_efo_commands
from .produce import produce
from .prompt import confirmed, usage
from .status_view import render, watch
from .tail import StreamTail, format_record

__all__ = ["main"]

EXIT_ERROR, EXIT_INTERRUPTED, EXIT_TERMINATED = 1, 130, 143


class Terminated(KeyboardInterrupt):
    """SIGTERM (systemd, docker stop), handled as Ctrl-C is: a tail --app --commit leaves the application."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if in_main else None
    try:
        args = _parser().parse_args(argv)
        return int(args.run(args))
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, Terminated)
        print(f"kinsumer: {'terminated' if terminated else 'interrupted'}", file=sys.stderr)
        return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `kinsumer tail ... | head`
        return 0
    except Exception as exc:
        message = describe_error(exc)
        if message is None:
            raise
        print(f"kinsumer: error: {message}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kinsumer", description="Consume Kinesis streams with cooperating clients coordinated in DynamoDB."
    )
    parser.add_argument("--version", action="version", version=f"kinsumer {__version__}")
    add_aws_options(parser, suppress=False)
    commands = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        add_aws_options(sub, suppress=True)
        return sub

    sub = command("create-tables", "create an application's three DynamoDB tables (idempotent)")
    sub.add_argument("app", help="application name (the tables' prefix)")
    sub.add_argument("--billing-mode", choices=["PAY_PER_REQUEST", "PROVISIONED"], default="PAY_PER_REQUEST")
    sub.add_argument("--read-capacity", type=int, default=10, help="with PROVISIONED (default 10)")
    sub.add_argument("--write-capacity", type=int, default=10, help="with PROVISIONED (default 10)")
    sub.set_defaults(run=_create_tables)

    sub = command("create-stream", "create a Kinesis stream and wait until it is ACTIVE (for a first try; idempotent)")
    sub.add_argument("stream", help="stream name")
    sub.add_argument("--shards", type=int, default=2, help="shards of a new stream (default 2)")
    sub.set_defaults(run=_create_stream)

    sub = command("delete-tables", "delete an application's tables, and with them every checkpoint")
    sub.add_argument("app", help="application name")
    sub.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    sub.set_defaults(run=_delete_tables)

    sub = command("status", "an application's clients, leader, shard cache, and shards with owner and lag")
    sub.add_argument("stream", help="stream name, or ARN (another account's, say)")
    sub.add_argument("app", help="application name")
    sub.add_argument("--json", action="store_true", help="print JSON for machines")
    sub.add_argument(
        "--watch", nargs="?", type=float, const=2.0, default=None, metavar="SECONDS",
        help="show it again every SECONDS (default 2) until Ctrl-C: in place in a terminal",
    )  # fmt: skip
    sub.add_argument("--watch-count", type=int, default=None, help=argparse.SUPPRESS)  # refreshes, then exit (tests)
    _max_age_option(sub)
    sub.set_defaults(run=_status)

    sub = command(
        "tail",
        "print records as they arrive; read-only (nothing is written) unless --commit is given with --app",
    )
    sub.add_argument("stream", help="stream name, or ARN (another account's, say)")
    sub.add_argument(
        "--from", dest="start", choices=["trim-horizon", "latest", "at-timestamp"], default="latest",
        help="where shards without a checkpoint start (default: latest, records written from now on)",
    )  # fmt: skip
    sub.add_argument("--timestamp", help="ISO 8601 time, with --from at-timestamp")
    sub.add_argument("--json", action="store_true", help="one JSON object per record")
    sub.add_argument(
        "--app",
        help="start each shard after this application's checkpoint (read-only: the application is not joined "
        "and nothing is written); see --commit",
    )
    committing = sub.add_mutually_exclusive_group()
    committing.add_argument(
        "--commit", action="store_true",
        help="with --app: consume as a member of the application: take shards from its clients while this runs "
        "and checkpoint what is printed (those records never reach the application's consumers)",
    )  # fmt: skip
    committing.add_argument("--no-commit", action="store_true", help="with --app: read-only (the default)")
    sub.add_argument("--count", type=int, help="stop after this many records")
    sub.add_argument("--idle-timeout", type=float, help="stop after this many seconds without a record")
    sub.set_defaults(run=_tail)

    sub = command("produce", "write test records: JSON {id, key, ts} with ids counting up from --first-id")
    sub.add_argument("stream", help="stream name, or ARN (another account's, say)")
    sub.add_argument("--count", type=int, default=1000, help="records to write; 0: until Ctrl-C (default 1000)")
    sub.add_argument("--rate", type=float, help="records per second at most (default: as fast as possible)")
    sub.add_argument("--partition-keys", type=int, default=100, help="distinct partition keys (default 100)")
    sub.add_argument("--size", type=int, default=100, help="bytes per record, at least (default 100)")
    sub.add_argument("--first-id", type=int, default=0, help="id of the first record (default 0)")
    sub.add_argument(
        "--aggregate", type=int, default=1, metavar="N",
        help="pack N records into each Kinesis record, as the KPL does (default 1: no aggregation)",
    )  # fmt: skip
    sub.set_defaults(run=_produce)

    sub = command(
        "reset",
        "rewind or fast-forward an application: each shard starts over at a position (no client may be running)",
    )
    sub.add_argument("--app", required=True, help="application name")
    sub.add_argument("--stream", required=True, help="stream name, or ARN (another account's, say)")
    sub.add_argument(
        "--to", required=True, nargs="+", metavar="POSITION",
        help="TRIM_HORIZON, LATEST (now) or AT_TIMESTAMP followed by an ISO 8601 time",
    )  # fmt: skip
    sub.add_argument("--shard", action="append", help="only this shard (repeatable; default: every shard)")
    sub.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    _max_age_option(sub)
    sub.set_defaults(run=_reset)

    sub = command(
        "import-kcl",
        "move an application from KCL or kclpy to kinsumer in place: each shard goes on where KCL's lease "
        "stands (no KCL worker nor kinsumer client may be running)",
    )
    sub.add_argument("lease_table", metavar="LEASE_TABLE", help="the KCL application's lease table (its name)")
    sub.add_argument("--app", required=True, help="kinsumer application name (its tables must exist)")
    sub.add_argument("--stream", required=True, help="stream name, or ARN (another account's, say)")
    sub.add_argument(
        "--at-timestamp", metavar="TIME",
        help="ISO 8601: the timestamp of KCL's initialPositionInStream, for leases checkpointed at AT_TIMESTAMP",
    )  # fmt: skip
    sub.add_argument(
        "--kcl-stream-identifier", metavar="ACCOUNT:STREAM:EPOCH",
        help="in a multi-stream lease table, the stream whose leases to import (if it holds several of STREAM)",
    )  # fmt: skip
    sub.add_argument(
        "--failover-time", type=float, default=10.0, metavar="SECONDS",
        help="KCL's failoverTimeMillis in seconds (default 10): the leases are read twice this far apart, and "
        "a lease renewed meanwhile refuses the import",
    )  # fmt: skip
    sub.add_argument("--force", action="store_true", help="import without looking for KCL workers still running")
    sub.add_argument("--overwrite", action="store_true", help="replace rows that hold kinsumer's own progress")
    sub.add_argument("--dry-run", action="store_true", help="print the plan and write nothing")
    sub.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    _max_age_option(sub)
    sub.set_defaults(run=_import_kcl)

    sub = command("efo", "a stream's enhanced fan-out consumers: list, register, deregister")
    add_efo_commands(sub)

    sub = command("dead-letters", "read back what process() sent to a dead-letter sink, and send it again")
    add_dead_letter_commands(sub)
    return parser


def _max_age_option(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--max-age", type=float, default=Config().effective_client_record_max_age,
        help="seconds of silence after which a client counts as dead (default: the Config default)",
    )  # fmt: skip


def _name(stream: str) -> str:
    """The name of ``stream``, a name or an ARN (:class:`~kinsumer.ConfigError` if it is neither)."""
    return StreamRef(stream, field="stream").name


def _positive(name: str, value: float | None, minimum: float = 1) -> None:
    if value is not None and value < minimum:
        raise usage(f"{name} must be >= {minimum:g}, got {value:g}")


def _create_tables(args: argparse.Namespace) -> int:
    tables = admin.application_tables(args.app)
    _, dynamodb = clients(args)
    admin.create_tables(
        dynamodb,
        tables,
        billing_mode=args.billing_mode,
        read_capacity=args.read_capacity,
        write_capacity=args.write_capacity,
    )
    print(f"tables of {args.app} are ACTIVE: {tables.clients}, {tables.checkpoints}, {tables.metadata}")
    return 0


def _create_stream(args: argparse.Namespace) -> int:
    validate_names(args.stream, "create-stream", "cli")
    _positive("--shards", args.shards)
    kinesis, _ = clients(args)
    if stream_exists(kinesis, args.stream):
        print(f"stream {args.stream} exists already")
    else:
        kinesis.create_stream(StreamName=args.stream, ShardCount=args.shards)
    kinesis.get_waiter("stream_exists").wait(StreamName=args.stream, WaiterConfig={"Delay": 1, "MaxAttempts": 300})
    shards = len(list_shards(kinesis, args.stream))
    print(f"stream {args.stream} is ACTIVE with {shards} shards")
    return 0


def _delete_tables(args: argparse.Namespace) -> int:
    tables = admin.application_tables(args.app)
    question = f"delete {tables.clients}, {tables.checkpoints} and {tables.metadata}?"
    if not confirmed(question, f"deleting the tables of {args.app} loses every checkpoint", args.yes):
        print("nothing deleted")
        return 0
    _, dynamodb = clients(args)
    admin.delete_tables(dynamodb, tables)
    print(f"tables of {args.app} are deleted")
    return 0


def _status(args: argparse.Namespace) -> int:
    validate_names(_name(args.stream), args.app, "cli")
    _positive("--watch", args.watch, 0.1)
    _positive("--watch-count", args.watch_count)
    kinesis, dynamodb = clients(args, args.stream)

    def show() -> str:
        status = read_status(kinesis, dynamodb, args.stream, args.app, max_age=args.max_age)
        return json.dumps(status.to_json(), indent=2) if args.json else render(status)

    if args.watch is None:
        print(show())
        return 0
    try:
        watch(show, args.watch, sys.stdout, tty=sys.stdout.isatty(), count=args.watch_count, describe=_described)
    except KeyboardInterrupt as exc:  # Ctrl-C ends a watch: that is how it is left
        if isinstance(exc, Terminated):
            raise
    return 0


def _described(exc: Exception) -> str:
    return describe_error(exc) or f"{type(exc).__name__}: {exc}"


def _reset(args: argparse.Namespace) -> int:
    validate_names(_name(args.stream), args.app, "cli")
    to = _reset_target(args.to)
    kinesis, dynamodb = clients(args, args.stream)

    def confirm(plan: ResetPlan) -> bool:
        print(plan.describe())
        question = f"reset {len(plan.shards)} shards of {args.app}?"
        return confirmed(question, f"resetting {args.app} moves its checkpoints", args.yes)

    plan = admin.reset(
        kinesis, dynamodb, args.stream, args.app, to, shards=args.shard, max_age=args.max_age, confirm=confirm
    )
    if plan is None:
        print("nothing changed")
        return 0
    print(f"{args.app} is reset: its next clients start each shard as shown")
    return 0


def _reset_target(words: list[str]) -> str | dt.datetime:
    kind = words[0].upper()
    if kind in ("TRIM_HORIZON", "LATEST") and len(words) == 1:
        return kind
    if kind == "AT_TIMESTAMP" and len(words) == 2:
        try:
            when = dt.datetime.fromisoformat(words[1])
        except ValueError:
            example = "2026-11-22T10:00:00Z"
            raise usage(f"--to AT_TIMESTAMP needs an ISO 8601 time, e.g. {example}; got {words[1]!r}") from None
        return when if when.tzinfo else when.replace(tzinfo=dt.UTC)
    raise usage(f"--to must be TRIM_HORIZON, LATEST or AT_TIMESTAMP <ISO 8601 time>; got {' '.join(words)!r}")


def _import_kcl(args: argparse.Namespace) -> int:
    validate_names(_name(args.stream), args.app, "cli")
    if not re.fullmatch(r"[A-Za-z0-9_.-]{3,255}", args.lease_table):
        raise usage(f"LEASE_TABLE must be a DynamoDB table name (3-255 of A-Z a-z 0-9 _ . -); got {args.lease_table!r}")
    _positive("--failover-time", args.failover_time, 0.001)
    at_timestamp = None
    if args.at_timestamp:
        try:
            when = dt.datetime.fromisoformat(args.at_timestamp)
        except ValueError:
            example = "2026-11-22T10:00:00Z"
            raise usage(f"--at-timestamp must be ISO 8601, e.g. {example}; got {args.at_timestamp!r}") from None
        at_timestamp = int((when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp() * 1000)
    kinesis, dynamodb = clients(args, args.stream)
    plan = plan_import(
        kinesis, dynamodb, args.lease_table, args.app, args.stream, failover_time=args.failover_time,
        max_age=args.max_age, at_timestamp=at_timestamp, force=args.force, overwrite=args.overwrite,
        kcl_stream_identifier=args.kcl_stream_identifier,
    )  # fmt: skip
    print(plan.describe())
    if args.dry_run:
        print("dry run: nothing written" + ("; the import would be refused (see above)" if plan.problems else ""))
        return 0
    if plan.problems:
        raise KinsumerError("the import is refused: " + "; ".join(plan.problems))
    if not plan.writes:
        print(f"nothing changed: the rows of {args.app} already say where KCL's leases stand")
    else:
        question = f"write {len(plan.writes)} row{'s' if len(plan.writes) != 1 else ''} of {args.app}_checkpoints?"
        if not confirmed(question, f"importing into {args.app} writes its checkpoints", args.yes):
            print("nothing changed")
            return 0
        written = apply_import(dynamodb, plan, max_age=args.max_age)
        print(f"wrote {written} row{'s' if written != 1 else ''} of {args.app}_checkpoints")
    check = check_import(dynamodb, plan)
    print(check.describe())
    if check.differing:
        raise KinsumerError(
            f"after the import, the rows of {', '.join(check.differing)} do not say what KCL's leases say (see the "
            "table above): stop every KCL worker and run the import again"
        )
    return 0


def _start_position(args: argparse.Namespace) -> StartPosition:
    if args.start == "at-timestamp":
        if not args.timestamp:
            raise usage("--from at-timestamp needs --timestamp (ISO 8601)")
        try:
            when = dt.datetime.fromisoformat(args.timestamp)
        except ValueError:
            raise usage(f"--timestamp must be ISO 8601, e.g. 2026-11-22T10:00:00Z; got {args.timestamp!r}") from None
        return StartPosition.at_timestamp(when if when.tzinfo else when.replace(tzinfo=dt.UTC))
    if args.timestamp:
        raise usage("--timestamp goes with --from at-timestamp")
    return StartPosition.trim_horizon() if args.start == "trim-horizon" else StartPosition.latest()


def _tail(args: argparse.Namespace) -> int:
    validate_names(_name(args.stream), args.app or "tail", "cli")
    _positive("--count", args.count)
    _positive("--idle-timeout", args.idle_timeout, 0)
    position = _start_position(args)
    for flag, given in (("--commit", args.commit), ("--no-commit", args.no_commit)):
        if given and not args.app:
            raise usage(f"{flag} needs --app (the application whose checkpoints to start from)")
    kinesis, dynamodb = clients(args, args.stream)
    ensure_stream_active(kinesis, args.stream)
    printed = 0
    if args.app and args.commit:
        return _tail_as_client(args, position, kinesis, dynamodb)
    starts, finished = _checkpoints(dynamodb, args.app, args.stream) if args.app else ({}, set())
    tail = StreamTail(kinesis, args.stream, position, starts=starts, finished=finished)
    try:
        for record in tail.records(idle_timeout=args.idle_timeout):
            print(format_record(record, args.stream, args.json), flush=True)
            printed += 1
            if args.count and printed >= args.count:
                break
    finally:
        tail.stop()
    return 0


def _checkpoints(dynamodb: Any, app: str, stream: str) -> tuple[dict[str, StartPosition], set[str]]:
    """Where each shard of ``stream`` stands in ``app``: a start after its checkpoint (or at its recorded
    start), and the shards it finished. Read only."""
    tables = Tables.for_application(app)
    ensure_tables_ready(dynamodb, tables)
    scope = stream_scope(dynamodb, tables, stream)
    starts: dict[str, StartPosition] = {}
    finished: set[str] = set()
    for key, row in checkpoints_table.load_rows(dynamodb, tables.checkpoints).items():
        if (shard := scope.shard_id(key)) is None:
            continue  # a row of another of the application's streams
        if row.finished:
            finished.add(shard)
        elif (start := row.resume_at) is not None:
            starts[shard] = start
    return starts, finished


def _application_streams(dynamodb: Any, app: str, stream: str, max_age: float) -> list[str]:
    """``stream``, then the other streams every live client of ``app`` lists: a tail that joins lists
    them too, so that joining does not pause them for the application (see coordination.streams)."""
    tables = Tables.for_application(app)
    ensure_tables_ready(dynamodb, tables)
    name = _name(stream)  # the clients list names; a stream given by ARN keeps its ARN here
    home = metadata_table.read_home_stream(dynamodb, tables.metadata) or name
    lists = [listed_streams(row.streams, home) for row in clients_table.live_clients(dynamodb, tables.clients, max_age)]
    if not lists:
        return [stream]
    return [stream, *(s for s in agreed_streams(lists[0], lists) if s != name)]


def _tail_as_client(args: argparse.Namespace, position: StartPosition, kinesis: Any, dynamodb: Any) -> int:
    initial = cast("InitialPosition", position.kind)  # TRIM_HORIZON, LATEST or AT_TIMESTAMP here
    config = Config(initial_position=initial, initial_timestamp=position.timestamp)
    streams = _application_streams(dynamodb, args.app, args.stream, config.effective_client_record_max_age)
    consumer = Kinsumer(streams, args.app, "kinsumer-tail", config, kinesis=kinesis, dynamodb=dynamodb)
    printed = 0
    unprinted = False  # a record was taken but not yet printed
    with consumer:
        try:
            while True:
                try:
                    record = consumer.next_record(timeout=args.idle_timeout)
                except TimeoutError:
                    return 0
                if record is None:
                    return 0
                unprinted = True
                print(format_record(record, record.stream, args.json, named=len(streams) > 1), flush=True)
                unprinted = False
                printed += 1
                if args.count and printed >= args.count:
                    return 0
        except KeyboardInterrupt:
            if not unprinted:
                consumer.stop()  # every record taken was printed: count them all as processed
            raise


def _produce(args: argparse.Namespace) -> int:
    validate_names(_name(args.stream), "produce", "cli")
    _positive("--count", args.count, 0)
    _positive("--rate", args.rate, 0.001)
    _positive("--partition-keys", args.partition_keys)
    _positive("--size", args.size)
    _positive("--aggregate", args.aggregate)
    kinesis, _ = clients(args, args.stream)
    ensure_stream_active(kinesis, args.stream)
    stop = threading.Event()
    started = time.monotonic()
    written = 0

    def progress(ids: range) -> None:
        nonlocal written
        written += len(ids)

    try:
        produce(
            kinesis, args.stream, count=args.count or None, rate=args.rate, keys=args.partition_keys,
            size=args.size, first_id=args.first_id, stop=stop, on_batch=progress, aggregate=args.aggregate,
        )  # fmt: skip
    except KeyboardInterrupt:
        stop.set()
        print(f"kinsumer: interrupted after {written} records", file=sys.stderr)
        return EXIT_INTERRUPTED
    seconds = time.monotonic() - started
    print(f"wrote {written} records to {args.stream} in {seconds:.1f} s ({written / max(seconds, 1e-9):.0f} records/s)")
    return 0
