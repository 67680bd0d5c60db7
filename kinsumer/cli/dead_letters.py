"""``kinsumer dead-letters``: what failed, and sending it again.

    kinsumer dead-letters list SINK [--app APP] [--stream S] [--shard ID] [--since TIME] [--json]
    kinsumer dead-letters show SINK ID [--data]
    kinsumer dead-letters redrive SINK --to STREAM [the filters of list] [--delete] [--yes]

SINK is ``s3://BUCKET/PREFIX``, ``sqs:QUEUE_URL`` or ``kinesis:STREAM`` (see
:mod:`kinsumer.dead_letters.reading`); claim checks are followed. A re-drive puts each record's data
into STREAM with its own partition key (and explicit hash key), in calls of up to 100 records, and
prints each one sent once Kinesis has it; with ``--delete`` each call's letters are then removed from
the sink (S3, SQS). It is at least once: a re-drive cut short may have sent some letters it did not
delete, and those go again the next time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Iterator

from ..aws.kinesis import ensure_stream_active
from ..aws.stream_ref import StreamRef
from ..dead_letters.reading import (
    Filters,
    KinesisSource,
    Letter,
    S3Source,
    SinkName,
    Source,
    SqsSource,
    Unreadable,
    sink_name,
)
from ..errors import KinsumerError
from ..writing.writer import RecordWriter
from .aws import add_aws_options, clients, service_client
from .prompt import confirmed, usage

__all__ = ["add_dead_letter_commands"]

_REDRIVE_BATCH = 100  # letters sent (and deleted) at a time


def add_dead_letter_commands(group: argparse.ArgumentParser) -> None:
    """``list``, ``show`` and ``redrive`` under the ``dead-letters`` command."""
    commands = group.add_subparsers(title="dead-letters commands", required=True, metavar="DEAD_LETTERS_COMMAND")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        add_aws_options(sub, suppress=True)
        sub.add_argument("sink", metavar="SINK", help="s3://BUCKET/PREFIX, sqs:QUEUE_URL or kinesis:STREAM")
        sub.add_argument(
            "--visibility-timeout", type=int, default=60, metavar="SECONDS",
            help="SQS: seconds the messages read stay hidden from the queue's other readers (default 60); they "
            "are made visible again when the command ends",
        )  # fmt: skip
        return sub

    def filters(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--app", help="only the dead letters of this application")
        sub.add_argument("--stream", help="only those of records of this stream")
        sub.add_argument("--shard", help="only those of records of this shard (a shard ID)")
        sub.add_argument("--since", metavar="TIME", help="only those that failed at or after this ISO 8601 time")
        sub.add_argument("--limit", type=int, help="at most this many")

    sub = command("list", "the dead letters of a sink: one line each (id, when, why, where from)")
    filters(sub)
    sub.add_argument("--json", action="store_true", help="one JSON object per dead letter: its id and envelope")
    sub.set_defaults(run=_list)

    sub = command("show", "one dead letter's envelope (a claim check followed), as JSON")
    sub.add_argument("id", metavar="ID", help="its id, as list prints it")
    sub.add_argument("--data", action="store_true", help="print the record's data alone, as it was in the stream")
    sub.set_defaults(run=_show)

    sub = command(
        "redrive",
        "send dead letters again: each record's data into a stream, with its partition key (at least once)",
    )
    sub.add_argument("--to", required=True, metavar="STREAM", help="the stream to put the records into")
    filters(sub)
    sub.add_argument("--delete", action="store_true", help="delete each letter from the sink once it is re-driven")
    sub.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    sub.set_defaults(run=_redrive)


def _source(args: argparse.Namespace) -> tuple[SinkName, Source]:
    try:
        sink = sink_name(args.sink)
    except ValueError as exc:
        raise usage(str(exc)) from None
    if args.visibility_timeout < 0 or args.visibility_timeout > 43_200:
        raise usage(f"--visibility-timeout must be 0 to 43200 seconds, got {args.visibility_timeout}")
    s3 = service_client(args, "s3")
    if sink.kind == "s3":
        return sink, S3Source(s3, sink.name, sink.prefix)
    if sink.kind == "sqs":
        return sink, SqsSource(service_client(args, "sqs"), s3, sink.name, visibility_timeout=args.visibility_timeout)
    StreamRef(sink.name, field="kinesis:STREAM")  # a stream's name or ARN
    kinesis, _ = clients(args, sink.name)
    return sink, KinesisSource(kinesis, s3, sink.name)


def _filters(args: argparse.Namespace) -> Filters:
    since = None
    if args.since:
        try:
            since = dt.datetime.fromisoformat(args.since)
        except ValueError:
            raise usage(f"--since must be ISO 8601, e.g. 2026-11-22T10:00:00Z; got {args.since!r}") from None
        since = since if since.tzinfo else since.replace(tzinfo=dt.UTC)
    if args.limit is not None and args.limit < 1:
        raise usage(f"--limit must be >= 1, got {args.limit}")
    return Filters(application=args.app, stream=args.stream, shard_id=args.shard, since=since)


def _taken(source: Source, filters: Filters, limit: int | None, unreadable: list[Unreadable]) -> Iterator[Letter]:
    """The letters ``filters`` admits, up to ``limit``; each unreadable thing is said on stderr and added to
    ``unreadable``."""
    count = 0
    for read in source.letters(filters):
        if isinstance(read, Unreadable):
            print(f"kinsumer: {read.id}: {read.reason}", file=sys.stderr)
            unreadable.append(read)
            continue
        yield read
        count += 1
        if limit is not None and count >= limit:
            return


def _line(letter: Letter) -> str:
    dead = letter.dead
    size = len(dead.data or b"")
    claim = f"\tclaim check {letter.claim_check}" if letter.claim_check else ""
    return (
        f"{letter.id}\t{dead.failed_at.isoformat()}\t{dead.reason}\t{dead.attempts} attempts\t{dead.application}\t"
        f"{dead.stream} {dead.position}\tkey {dead.partition_key}\t{size} bytes\t{dead.error[:200]}{claim}"
    )


def _shown(letter: Letter) -> dict[str, object]:
    shown = dict(letter.dead.fields)
    if letter.claim_check is not None:
        shown["claim_check"] = {"bucket": letter.claim_check.bucket, "key": letter.claim_check.key}
    return shown


def _list(args: argparse.Namespace) -> int:
    filters = _filters(args)
    sink, source = _source(args)
    count, unreadable = 0, list[Unreadable]()
    try:
        for letter in _taken(source, filters, args.limit, unreadable):
            if args.json:
                print(json.dumps({"id": letter.id, "envelope": _shown(letter)}), flush=True)
            else:
                print(_line(letter), flush=True)
            count += 1
    finally:
        source.release()
    bad = f", and {len(unreadable)} unreadable (see above)" if unreadable else ""
    print(f"{count} dead letters in {sink}{bad}", file=sys.stderr)
    return 0


def _show(args: argparse.Namespace) -> int:
    sink, source = _source(args)
    try:
        found = source.find(args.id)
    finally:
        source.release()
    if found is None:
        listing = f"kinsumer dead-letters list {args.sink} lists them"
        raise KinsumerError(f"{sink} has no dead letter {args.id!r} ({listing})")
    if isinstance(found, Unreadable):
        raise KinsumerError(f"{found.id}: {found.reason}")
    if args.data:
        sys.stdout.buffer.write(found.dead.data or b"")
        sys.stdout.flush()
    else:
        print(json.dumps(_shown(found), indent=2))
    return 0


def _redrive(args: argparse.Namespace) -> int:
    StreamRef(args.to, field="--to")  # a stream's name or ARN
    filters = _filters(args)
    sink, source = _source(args)
    if args.delete and sink.kind == "kinesis":
        raise usage(f"--delete: records cannot be deleted from a Kinesis stream ({sink.name})")
    deleting = " and delete them from the sink" if args.delete else ""
    question = f"send the dead letters of {sink} into {args.to}{deleting}?"
    if not confirmed(question, f"re-driving writes the dead letters of {sink} into {args.to}", args.yes):
        print("nothing sent")
        return 0
    kinesis, _ = clients(args, args.to)
    ensure_stream_active(kinesis, args.to)
    writer = RecordWriter(kinesis, args.to)
    batch: list[Letter] = []
    sent = deleted = 0
    unreadable: list[Unreadable] = []

    def send() -> None:
        nonlocal sent, deleted
        writer.flush()  # every record of the batch is in the stream
        for letter in batch:
            print(f"sent {letter.id}\t{letter.dead.stream} {letter.dead.position}\tkey {letter.dead.partition_key}")
        sent += len(batch)
        if args.delete:
            deleted += source.delete(batch)
        batch.clear()

    try:
        for letter in _taken(source, filters, args.limit, unreadable):
            writer.put(letter.dead.data or b"", letter.dead.partition_key, letter.dead.explicit_hash_key)
            batch.append(letter)
            if len(batch) >= _REDRIVE_BATCH:
                send()
        send()
    finally:
        source.release()
    summary = f"sent {sent} dead letters of {sink} into {args.to}"
    summary += f"; deleted {deleted} from the sink" if args.delete else ""
    summary += f"; {len(unreadable)} unreadable left where they are (see above)" if unreadable else ""
    print(summary)
    return 1 if unreadable else 0
