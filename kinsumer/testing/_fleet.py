"""A fleet: N clients of one application, each running the user's handler with ``process()`` on a thread of
its own, on a :class:`~kinsumer.testing.LocalAWS`; clients join, leave cleanly, or crash."""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any

import attrs

from ..config import Config
from ..consumer import Kinsumer
from ..record import Record
from ._client import ServiceClient
from ._handlers import CALLS, LOOPS, MANUAL, Call, PerClient, for_client
from ._kinesis import LocalKinesis
from ._ledger import Ledger
from ._local import LocalAWS
from ._quiet import QuietCrashes
from ._report import Report
from ._tables import LocalDynamoDB
from ._watch import fleet_stats, watch_takeovers

__all__ = ["FAST_CONFIG", "Fleet"]

log = logging.getLogger("kinsumer.testing")

#: A configuration that makes a fleet's events take a second or two instead of the defaults' ten or more: a
#: round (heartbeat, membership) every 0.25 s (``shard_check_frequency``), a client silent for 1 s counts as
#: dead (``client_record_max_age``: a crashed client's shards move after about 1.5 s), commits every 0.1 s
#: (``commit_frequency``), the leader lists shards every 0.5 s (``leader_action_frequency``), a handoff waits
#: 1 s at most (``handoff_timeout``), GetRecords every 0.2 s a shard at most (``throttle_delay``). Real time,
#: not virtual: a handler slower than these makes handoffs time out (and records handled twice).
FAST_CONFIG = Config(
    shard_check_frequency=0.25, client_record_max_age=1.0, commit_frequency=0.1, leader_action_frequency=0.5,
    throttle_delay=0.2, handoff_timeout=1.0,
)  # fmt: skip
_STOP_WAIT = 30.0  # seconds a client's thread may take to end after stop()
_SETTLE_WAIT = 10.0  # seconds report() waits for the ends of the captures a duplicate involves


@attrs.define(eq=False)
class _Member:
    name: str
    kinsumer: Kinsumer
    kinesis: LocalKinesis
    dynamodb: LocalDynamoDB
    handler: Callable[..., Any]  # the ledger's wrapping of the user's, for the call the fleet makes
    options: dict[str, Any]
    thread: threading.Thread | None = None
    error: BaseException | None = None
    crashed: bool = False
    paused: bool = False


def _each_with_checkpointer(k: Kinsumer, handler: Callable[..., Any], name: str) -> None:
    """Manual mode: ``handler(record, checkpoint)`` for each record until stop(). A call that raises is logged and
    the loop goes on, as a record processor's loop does: the record counts as not handled, and unless its
    checkpoint was called it is delivered again once its shard moves (the stored checkpoint stays before it)."""
    while (got := k.next_record_with_checkpointer()).checkpoint is not None:
        try:
            handler(got.value, got.checkpoint)
        except Exception:  # noqa: BLE001 - logged (_failed); the loop goes on, the record not counted
            _failed(name, got.value)


async def _each_async_with_checkpointer(k: Kinsumer, handler: Callable[..., Any], name: str) -> None:
    """:func:`_each_with_checkpointer` on an event loop: ``await handler(record, checkpoint)``."""
    while (got := await k.anext_record_with_checkpointer()).checkpoint is not None:
        try:
            await handler(got.value, got.checkpoint)
        except Exception:  # noqa: BLE001 - logged (_failed); the loop goes on, the record not counted
            _failed(name, got.value)


def _failed(name: str, record: Record) -> None:
    log.warning(
        "%s: the handler failed on %s, %s; the loop goes on", name, record.shard_id, record.sequence_number,
        exc_info=True,
    )  # fmt: skip


async def _each_async(k: Kinsumer, handler: Callable[..., Any]) -> None:
    async for record in k:
        await handler(record)


class Fleet:
    """Clients of ``application`` on ``stream``, each calling ``handler`` through ``process(**options)`` (``call``:
    or ``process_batches``, ``aprocess``, ``aprocess_batches``, with a handler to match: a batch handler, an async
    one; or ``"next"``, ``"anext"``: a loop over the client's records, ``for record in k`` or ``async for``, with no
    options; or ``"next_with_checkpointer"``: a loop that checkpoints by hand, in manual mode, calling
    ``handler(record, checkpoint)`` for each record of ``next_record_with_checkpointer()``, which calls the record's
    :class:`~kinsumer.Checkpoint` when it decides; a handler that raises is logged, and the loop goes on;
    ``"anext_with_checkpointer"``: the same with an async handler, on an event loop of the client's own); a
    :class:`~kinsumer.testing.PerClient` in place of ``handler`` makes a handler (and hooks) for each client.

    Every handling is recorded in :attr:`ledger` (see :class:`~kinsumer.testing.Ledger`), and :meth:`report`
    holds it against the records put. ``config``: every client's (:data:`FAST_CONFIG` by default; a ``client_id`` in
    it is refused: each client has its own). Use it as a context manager: its end stops every client left.

    What the ledger learns besides the handler's calls: each client's ``Config.stats`` is a receiver of the
    fleet's that tells it of captures and handoffs, then passes every call on to yours (``config.stats``); the
    ``dead_letter`` sink's calls count their records as handled; with any lifecycle hook given (``on_assigned``,
    ``on_revoked``, ``on_lost``) all three are recorded (those not given do nothing else), and their order
    checked; a capture of a shard from a client that did not release it is seen in the checkpoint table; with
    manual checkpoints, each checkpoint called, and whether it came while its shard was the client's.
    """

    def __init__(
        self,
        aws: LocalAWS,
        stream: str,
        application: str,
        handler: Callable[[Record], object] | Callable[..., object] | PerClient,
        *,
        config: Config = FAST_CONFIG,
        call: Call = "process",
        **options: Any,
    ) -> None:
        if call not in CALLS:
            raise ValueError(f"call: one of {', '.join(CALLS)}, not {call!r}")
        if call in LOOPS and options:
            raise ValueError(f"{', '.join(sorted(options))}: options of process(); a loop over {call}() takes none")
        if config.client_id is not None:
            raise ValueError("config: a fleet's clients each have their own client_id; leave Config.client_id unset")
        if config.manual_checkpointing and call not in MANUAL:
            raise ValueError(
                f"config: manual_checkpointing=True is for call='next_with_checkpointer' or "
                f"'anext_with_checkpointer' (this fleet's call is {call!r}); those calls set it for you"
            )
        if call in MANUAL:
            config = attrs.evolve(config, manual_checkpointing=True)
        self.aws, self.stream, self.application = aws, stream, application
        self.config = config
        by_key = options.get("ordering") == "key" and options.get("concurrency", 1) > 1  # per key order only
        self.ledger = Ledger(shard_order=not by_key)
        self._handler, self._options, self._call = handler, options, call
        self._members: dict[str, _Member] = {}
        self._names = (f"client-{i}" for i in itertools.count(1))
        self._stoppers: list[threading.Thread] = []
        self._tables_made = False
        self._ids: dict[str, str] = {}  # client ID -> name, for the takeovers the ledger is told of
        self._quiet = QuietCrashes()  # what crashed clients log of their cut-off calls is not news
        self._quiet.install()

    @property
    def members(self) -> list[str]:
        """The names of the clients running (joined, neither gone nor crashed)."""
        return [m.name for m in self._members.values() if not m.crashed and m.thread is not None]

    def shards(self, name: str) -> list[str]:
        """The shards client ``name`` holds now (as its ``StatReceiver`` was told: captured, not given up)."""
        return self.ledger.held(name)

    def start(self, count: int) -> list[str]:
        """:meth:`join` ``count`` clients; their names."""
        return [self.join() for _ in range(count)]

    def join(self) -> str:
        """A new client joins: ``run()``, then ``process()`` on a thread of its own; its name."""
        name = next(self._names)
        handler, options = for_client(self.ledger, name, self._handler, self._options, self._call)  # its errors first
        kinesis, dynamodb = self.aws.kinesis.connection(), self.aws.dynamodb.connection()
        config = attrs.evolve(self.config, stats=fleet_stats(self.ledger, name, self.config.stats))
        k = Kinsumer(self.stream, self.application, name, config, kinesis=kinesis,  # type: ignore[arg-type]
                     dynamodb=dynamodb)  # type: ignore[arg-type]  # fmt: skip
        self._ids[k.client_id] = name
        watch_takeovers(dynamodb, self._ids, self.ledger)
        if not self._tables_made:
            k.create_required_tables()
            self._tables_made = True
        member = _Member(name, k, kinesis, dynamodb, handler, options)
        k.run()
        member.thread = threading.Thread(target=self._process, args=(member,), name=f"fleet-{name}", daemon=True)
        self._members[name] = member
        member.thread.start()
        return name

    def _process(self, member: _Member) -> None:
        k, handler = member.kinsumer, member.handler
        try:
            if self._call == "next":
                for record in k:  # until stop(); asking for the next counts the one in hand processed
                    handler(record)
            elif self._call == "next_with_checkpointer":
                _each_with_checkpointer(k, handler, member.name)
            elif self._call.startswith("a"):  # on an event loop of the client's own, as a process runs one
                if self._call == "anext":
                    loop = _each_async(k, handler)
                elif self._call == "anext_with_checkpointer":
                    loop = _each_async_with_checkpointer(k, handler, member.name)
                else:
                    loop = getattr(k, self._call)(handler, **member.options)
                asyncio.run(loop)
            else:
                getattr(k, self._call)(handler, **member.options)
        except BaseException as exc:  # noqa: BLE001 - kept for check(), which raises it unless the client crashed
            member.error = exc

    def leave(self, name: str) -> None:
        """``name`` stops cleanly (its shards handed off); returns once its ``process()`` returned. A paused
        client is resumed first."""
        member = self._member(name)
        if member.paused:
            self.resume(name)
        member.kinsumer.stop()
        if member.thread is not None:
            member.thread.join(_STOP_WAIT)
        del self._members[name]
        self.check()

    def crash(self, name: str) -> None:
        """``name``'s process dies: none of its calls reaches Kinesis or DynamoDB from now on (no release, no
        last checkpoint, its heartbeat row stays until it ages), and its handler is no longer called. The
        others take its shards once it counts as dead (``client_record_max_age``)."""
        member = self._member(name)

        def cut() -> None:
            member.kinesis.cut()
            member.dynamodb.cut()

        self.ledger.crash(name, cut)
        member.crashed = True
        stopper = threading.Thread(target=member.kinsumer.stop, name=f"fleet-{name}-remains", daemon=True)
        stopper.start()  # frees its threads; nothing it does reaches the service
        self._stoppers.append(stopper)

    def pause(self, name: str) -> None:
        """``name``'s process stops (as with SIGSTOP) until :meth:`resume`: its calls to Kinesis and DynamoDB
        wait, and so do calls of its handler, sink and hooks (a call already under way finishes). Silent longer
        than ``client_record_max_age``, it counts as dead and the others take its shards; resumed, it learns
        so at its next write (``on_lost``), and what it handles late of them is allowed twice (``"taken"``)."""
        member = self._member(name)
        member.paused = True
        self.ledger.pause(name)
        member.kinesis.pause()
        member.dynamodb.pause()

    def resume(self, name: str) -> None:
        """``name``'s process goes on where it stopped."""
        member = self._member(name)
        member.paused = False
        member.kinesis.resume()
        member.dynamodb.resume()
        self.ledger.resume(name)

    def fail(
        self, name: str, seconds: float, error: str = "ProvisionedThroughputExceededException",
        service: str | None = None, operations: Iterable[str] | None = None,
    ) -> None:  # fmt: skip
        """For ``seconds``, ``name``'s calls to ``service`` (``"kinesis"``, ``"dynamodb"``; None: both), of
        ``operations`` only if given (``"GetRecords"``, ``"PutItem"``...), are refused with ``error``: the service
        throttling (``ProvisionedThroughputExceededException``, ``ThrottlingException``) or failing (a 5xx:
        ``InternalFailure``, ``ServiceUnavailable``). kinsumer retries them; a client whose heartbeat fails
        longer than ``client_record_max_age`` loses its shards as a silent one does."""
        member = self._member(name)
        targets: dict[str, ServiceClient] = {"kinesis": member.kinesis, "dynamodb": member.dynamodb}
        if service is not None and service not in targets:
            raise ValueError(f"service: kinesis, dynamodb or None (both), not {service!r}")
        chosen = [targets[service]] if service else list(targets.values())
        names = None if operations is None else set(operations)
        unknown = sorted((names or set()) - {op for client in chosen for op in client.SUPPORTED})
        if unknown:
            raise ValueError(f"operations: {', '.join(unknown)}: not calls of {service or 'Kinesis or DynamoDB'}")
        for client in chosen:
            mine = None if names is None else names & set(client.SUPPORTED)
            if mine is None or mine:
                client.fail(seconds, error, mine)

    def _member(self, name: str) -> _Member:
        member = self._members.get(name)
        if member is None or member.crashed:
            raise KeyError(f"no running client named {name!r}: the running ones are {self.members}")
        return member

    def check(self) -> None:
        """Raise the first error a running client's ``process()`` raised."""
        for member in self._members.values():
            if member.error is not None and not member.crashed:
                raise member.error

    def report(self) -> Report:
        """The ledger against every record of the stream (see :class:`~kinsumer.testing.Report`), once the
        captures a duplicate involves have ended (up to 10 s: a handoff's verdict comes after its release)."""
        self.ledger.wait_settled(_SETTLE_WAIT)
        return self.ledger.report(self.aws.kinesis.records(self.stream))

    def wait_handled(self, timeout: float = 30.0) -> Report:
        """Wait until every record of the stream was handled (TimeoutError after ``timeout`` s); the report.

        A running client whose ``process()`` raised handles nothing more while it keeps its shards: its error is
        raised as soon as it is seen (:meth:`check`), not a TimeoutError once the wait is over."""
        put = self.ledger.report(self.aws.kinesis.records(self.stream)).put
        self.ledger.wait_for(put, timeout, self.check)
        self.check()
        return self.report()

    def close(self) -> None:
        """Stop every running client cleanly and end the crashed ones' threads."""
        try:
            for name in self.members:
                self.leave(name)
            for stopper in self._stoppers:
                stopper.join(_STOP_WAIT)
        finally:
            self._quiet.remove()
        self.check()

    def __enter__(self) -> Fleet:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
