"""``kinsumer efo``: an administrator's commands for a stream's enhanced fan-out consumers."""

from __future__ import annotations

import argparse
from typing import Any

from .. import admin
from ..aws.kinesis import ensure_stream_active
from ..aws.stream_consumers import ensure_stream_consumer, stream_arn
from ..aws.stream_ref import StreamRef
from ..config import validate_names
from .aws import add_aws_options, clients
from .prompt import confirmed

__all__ = ["add_efo_commands"]


def add_efo_commands(efo: argparse.ArgumentParser) -> None:
    """``efo list``, ``efo register`` and ``efo deregister`` under the ``efo`` command."""
    commands = efo.add_subparsers(title="efo commands", required=True, metavar="EFO_COMMAND")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        add_aws_options(sub, suppress=True)
        sub.add_argument("stream", help="stream name, or ARN (another account's, say)")
        return sub

    sub = command("list", "the stream's enhanced fan-out consumers and their status")
    sub.set_defaults(run=_list)

    sub = command("register", "register a consumer (idempotent; waits until it is ACTIVE)")
    sub.add_argument("name", help="the consumer's name (Config.efo_consumer_name)")
    sub.set_defaults(run=_register)

    sub = command("deregister", "deregister a consumer: clients reading through it stop receiving records")
    sub.add_argument("name", help="the consumer's name (Config.efo_consumer_name)")
    sub.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    sub.set_defaults(run=_deregister)


def _kinesis(args: argparse.Namespace) -> Any:
    validate_names(StreamRef(args.stream, field="stream").name, "efo", "cli")
    kinesis, _ = clients(args, args.stream)
    return kinesis


def _stream(args: argparse.Namespace) -> tuple[Any, str]:
    kinesis = _kinesis(args)
    return kinesis, stream_arn(ensure_stream_active(kinesis, args.stream))


def _list(args: argparse.Namespace) -> int:
    kinesis, stream = _stream(args)
    found = kinesis.list_stream_consumers(StreamARN=stream).get("Consumers", [])
    for consumer in sorted(found, key=lambda c: c["ConsumerName"]):
        print(f"{consumer['ConsumerName']}\t{consumer['ConsumerStatus']}\t{consumer['ConsumerARN']}")
    if not found:
        print(f"{args.stream} has no enhanced fan-out consumer")
    return 0


def _register(args: argparse.Namespace) -> int:
    kinesis, stream = _stream(args)
    arn = ensure_stream_consumer(kinesis, stream, args.name)
    print(f"consumer {args.name} of {args.stream} is ACTIVE: {arn}")
    return 0


def _deregister(args: argparse.Namespace) -> int:
    question = f"deregister {args.name} of {args.stream}? clients reading through it stop receiving records"
    if not confirmed(question, f"deregistering {args.name} stops every client reading through it", args.yes):
        print("nothing deregistered")
        return 0
    if admin.deregister_stream_consumer(_kinesis(args), [args.stream], args.name):
        print(f"consumer {args.name} of {args.stream} is being deregistered")
    else:
        print(f"{args.stream} has no consumer named {args.name}")
    return 0
