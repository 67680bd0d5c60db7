"""The public consumer: :class:`Kinsumer`."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from threading import get_ident
from types import TracebackType
from typing import TYPE_CHECKING, Any, Unpack

import boto3

from . import admin
from .admin import as_kinsumer_error
from .asyncio_front import AsyncFront
from .aws.consumer_clients import consumer_clients
from .aws.stream_ref import StreamRef, distinct_names
from .aws.tables import Tables
from .config import Config, validate_names
from .coordination.rewind import ResetPlan
from .delivery.delivery import Delivery
from .delivery.progress import STOPPED, Checkpointed, Stopped
from .errors import CheckpointModeError, ConfigError, KinsumerError, NotStarted
from .handling.options import BatchOptions, Origin, ProcessOptions
from .health import Health, HealthServer, verdict
from .processing import Processing
from .record import Record
from .running import RUNNING, RunningClient
from .stats import GuardedStats
from .status import ClientStatus

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kinesis import KinesisClient

__all__ = ["Kinsumer"]

_CALLS_FOR = {  # manual_checkpointing -> the calls that work
    False: "next() or next_record()",
    True: "next_with_checkpointer() or next_record_with_checkpointer()",
}


class Kinsumer:
    """Consumes a Kinesis stream (or several) together with the other clients of the same application.

    ::

        k = Kinsumer(stream_name="clicks", application_name="billing-app", client_name="worker-1")
        k.create_required_tables()
        k.run()
        while (data := k.next()) is not None:
            handle(data)
        k.stop()

    ``application_name``: the application whose clients share the stream's shards; it prefixes its three
    DynamoDB tables. ``client_name``: a display name (``kinsumer status``, :meth:`status`, the logs, the
    checkpoint rows' ``OwnerName``), not an identity: two clients may share one, and no shard is kept for a
    name. The identity is ``Config.client_id``, a new random UUID for each Kinsumer unless set: a process
    restarted as ``"worker-1"`` is a new client to the application, and after a crash the dead one's shards
    wait ``client_record_max_age`` for the others. With a fixed ``Config(client_id=...)`` (one per live
    process) a restarted process is the same client: after a crash, on the same host, it takes its shards
    back at once.

    Without ``kinesis`` / ``dynamodb`` clients it builds them from ``session`` (or a default
    ``boto3.Session()``), so the standard AWS environment variables apply.

    ``stream_name`` may be a list of stream names: the application reads them all, their shards
    assigned together; each :class:`Record` names its ``stream``. Every client lists the
    application's first stream, and a stream is read once every live client lists it
    (docs/several-streams.md).

    A stream (or each of the list) may be given by ARN (``arn:aws:kinesis:<region>:<account>:stream/<name>``):
    every Kinesis call then names it by ARN, as a stream shared from another account through a resource
    policy requires, and the Kinesis client is made in the ARN's region; the tables stay in the caller's
    account and region, and know the stream by its name (docs/cross-account.md).
    """

    def __init__(
        self,
        stream_name: str | Sequence[str],
        application_name: str,
        client_name: str,
        config: Config | None = None,
        *,
        kinesis: KinesisClient | None = None,
        dynamodb: DynamoDBClient | None = None,
        session: boto3.Session | None = None,
    ) -> None:
        refs = _stream_refs(stream_name)
        validate_names(refs[0].name, application_name, client_name)
        if config is None:
            config = Config()
        elif not isinstance(config, Config):
            raise ConfigError("config", "must be a kinsumer.Config", config)
        #: The streams' names, in the order given (a stream given by ARN: the name in it).
        self.streams: tuple[str, ...] = tuple(ref.name for ref in refs)
        self._refs = {ref.name: ref for ref in refs}
        #: The stream, or the streams separated by commas.
        self.stream_name: str = ", ".join(self.streams)
        #: The application whose clients share the streams' shards (its tables' prefix).
        self.application_name: str = application_name
        #: This client's display name: not its identity (see :attr:`client_id`).
        self.client_name: str = client_name
        self.config: Config = config
        #: This client's identity: ``Config.client_id``, or a random UUID made for this Kinsumer.
        self.client_id: str = config.client_id or str(uuid.uuid4())
        self.tables = Tables.for_application(application_name)
        kinesis, dynamodb = consumer_clients(
            refs, config, client_name, kinesis=kinesis, dynamodb=dynamodb, session=session
        )
        self._kinesis: KinesisClient = kinesis
        self._dynamodb: DynamoDBClient = dynamodb
        self._stats = GuardedStats(config.stats)
        self._delivery = Delivery(config.buffer_size, self._stats, config.max_buffered_bytes)
        self._client = RunningClient(
            kinesis=kinesis, dynamodb=dynamodb, refs=refs, tables=self.tables, config=config,
            application_name=application_name, client_id=self.client_id, client_name=client_name,
            delivery=self._delivery, stats=self._stats,
        )  # fmt: skip
        self._auto_running = False  # run() was called in auto mode: next() needs no other check
        origin = Origin(self.stream_name, self.application_name, self.client_id)
        self._processing = Processing(self._delivery, self._stats, config, origin, self.stop)
        self._async = AsyncFront(self._delivery)

    def __repr__(self) -> str:
        return (
            f"Kinsumer(stream={self.stream_name!r}, application={self.application_name!r}, "
            f"client={self.client_name!r}, id={self.client_id!r}, state={self._client.state})"
        )

    # ----------------------------------------------------------------- admin

    def create_required_tables(self) -> None:
        """Create the application's three DynamoDB tables if missing; wait until ACTIVE."""
        cfg = self.config
        as_kinsumer_error(
            "create_required_tables",
            lambda: admin.create_tables(
                self._dynamodb,
                self.tables,
                billing_mode=cfg.billing_mode,
                read_capacity=cfg.read_capacity,
                write_capacity=cfg.write_capacity,
            ),
        )

    def delete_tables(self) -> None:
        """Delete the application's tables (and with them every checkpoint); wait until gone."""
        as_kinsumer_error("delete_tables", lambda: admin.delete_tables(self._dynamodb, self.tables))

    def reset(
        self, to: str | dt.datetime, *, shards: Sequence[str] | None = None, stream: str | None = None
    ) -> ResetPlan:
        """Rewind (or fast-forward) the application: each shard of the stream (or of ``shards``) starts
        over at ``to``: ``"TRIM_HORIZON"``, ``"LATEST"`` (now) or an aware datetime (AT_TIMESTAMP).
        With several streams, ``stream`` names the one to reset. An admin call, on a Kinsumer that is
        not running: refused (KinsumerError, naming them) while any client of the application is live.
        Returns what was written (``ResetPlan.describe()``)."""
        if self._client.state == RUNNING:
            raise KinsumerError("reset() on a running Kinsumer: a live client would overwrite it; stop() first")
        if stream is None and len(self.streams) > 1:
            raise ConfigError("stream", f"must name the stream to reset, one of {list(self.streams)}", None)
        stream = StreamRef(stream, field="stream").name if stream else self.streams[0]
        if stream not in self.streams:
            raise ConfigError("stream", f"must be one of this Kinsumer's streams {list(self.streams)}", stream)
        max_age = self.config.effective_client_record_max_age
        return as_kinsumer_error(
            "reset",
            lambda: admin.reset(self._kinesis, self._dynamodb, self._refs[stream].text, self.application_name, to,
                                shards=shards, max_age=max_age),
        )  # fmt: skip

    def deregister_stream_consumer(self) -> bool:
        """Deregister the enhanced fan-out consumer ``Config.efo_consumer_name`` of the stream.

        An administrator's call: ``stop()`` never does it, since other clients (and the next
        run) read through it; of every stream listed. Returns False if it was registered on none. Does not wait.
        """
        name = self.config.efo_consumer_name
        if name is None:
            raise ConfigError("Config.efo_consumer_name", "names no consumer to deregister", None)
        streams = [ref.text for ref in self._refs.values()]
        return as_kinsumer_error(
            "deregister_stream_consumer", lambda: admin.deregister_stream_consumer(self._kinesis, streams, name)
        )

    # ----------------------------------------------------------------- lifecycle

    def run(self) -> None:
        """Join the application's clients and start reading. Returns at once.

        Raises :class:`TableNotFound` or :class:`StreamNotFound` if the tables or the stream
        are missing, :class:`EndpointUnreachable` within seconds if an endpoint cannot be reached at all
        (refused, unknown host, untrusted certificate), and :class:`AlreadyStarted` on a second call.
        Other transient faults (5xx, throttling) are retried for up to 30 s.
        """
        self._client.run()
        self._auto_running = not self.config.manual_checkpointing

    def stop(self) -> None:
        """Stop reading, hand every shard off and leave. Idempotent; bounded in time.

        In auto mode the record each thread was last given counts as processed. Waits up
        to ``handoff_timeout`` for manual checkpoints of delivered records.
        """
        self._client.stop()

    def __enter__(self) -> Kinsumer:
        self.run()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # after an exception the record in hand was not processed: don't count it
        self._client.shutdown(clean=exc_type is None)

    async def __aenter__(self) -> Kinsumer:
        """``async with``: :meth:`run` in a thread, so the event loop goes on meanwhile."""
        await asyncio.to_thread(self.run)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Stop in a thread (the handoff's wait does not block the loop). After an exception (a
        cancellation too) the records in hand were not processed: the shards' next owners deliver them."""
        await asyncio.shield(asyncio.to_thread(self._client.shutdown, clean=exc_type is None))

    def status(self) -> ClientStatus:
        """A snapshot of this client: leadership, place in the membership, shards and their lag."""
        return self._client.status()

    def health(self) -> Health:
        """Whether this client is live (a restart would not help) and ready (consuming as it should), and
        why not: see :mod:`kinsumer.health` and docs/observability.md. Cheap; thread-safe."""
        return verdict(self._client.health_facts(self._processing.stuck_calls))

    def serve_health(self, port: int = 0, addr: str = "127.0.0.1", *, registry: Any = None) -> HealthServer:
        """Answer ``GET /healthz`` (liveness) and ``/readyz`` (readiness) on ``addr:port`` (0: a free port, see
        ``.port``) with 200 or 503 and :meth:`health` as JSON, on a daemon thread; with a Prometheus
        ``registry`` (``PrometheusStatReceiver.registry``) its metrics on every other path. Call it before
        :meth:`run` to be probed while starting; :meth:`stop` closes it (so does its ``close()``)."""
        return self._client.serve_health(self.health, port, addr, registry=registry)

    # ----------------------------------------------------------------- pausing shards

    def pause(self, shard_id: str) -> None:
        """Hand out no more records of the shard until :meth:`resume`, whatever consumes them (``next*()``,
        ``process*()``, asyncio). The client keeps the shard (its lease and heartbeat go on); its reading
        stops once the records read are held (the queue's and one page), within the buffer's bounds.
        Records already handed out go on (a handler call under way finishes). ``shard_id``: a shard ID of
        the home stream, or ``"<stream>/<shard ID>"``. The pause holds while this client runs, for the
        next captures of the shard too; a shard that moves to another client is not paused there.
        ``status()`` and ``kinsumer status`` show it. Idempotent; thread-safe."""
        self._client.pause(shard_id)

    def resume(self, shard_id: str) -> None:
        """Hand the shard's records out again, in order, from where they stopped. Idempotent; thread-safe."""
        self._client.resume(shard_id)

    @property
    def paused(self) -> frozenset[str]:
        """The shards paused (as :meth:`pause` was given them, ``"<stream>/<shard ID>"`` for another stream)."""
        return self._delivery.paused

    # ----------------------------------------------------------------- consuming

    def next(self, timeout: float | None = None) -> bytes | None:
        """The next record's data; None once stopped. Auto mode only.

        Asking for the next record marks the previous one (of this thread) processed.
        Raises :class:`NoRecordWithin` (a ``TimeoutError``) if nothing arrives within ``timeout`` seconds.
        """
        if not self._auto_running:
            self._check_mode("next()", manual=False)
        record = self._delivery.next_auto(get_ident(), timeout)  # this thread's previous record: processed
        return None if record is None else record.data

    def next_record(self, timeout: float | None = None) -> Record | None:
        """Like :meth:`next`, returning the whole :class:`Record`."""
        if not self._auto_running:
            self._check_mode("next_record()", manual=False)
        return self._delivery.next_auto(get_ident(), timeout)

    def next_with_checkpointer(self, timeout: float | None = None) -> Checkpointed[bytes] | Stopped:
        """The next record's data and its :class:`Checkpoint`; ``(None, None)`` once stopped. Manual mode only.

        The pair unpacks as a tuple (``data, checkpoint = k.next_with_checkpointer()``). For a type checker,
        check the pair before unpacking it: ``got.checkpoint is not None`` tells it both parts are there::

            while (got := k.next_with_checkpointer()).checkpoint is not None:
                data, checkpoint = got  # bytes, Checkpoint

        (Two variables unpacked first are checked each on its own: ``if data is not None: checkpoint()``
        leaves ``checkpoint`` ``Checkpoint | None`` to mypy.)
        """
        self._check_mode("next_with_checkpointer()", manual=True)
        got = self._delivery.next_manual(timeout)
        if got.checkpoint is None:
            return STOPPED
        return Checkpointed(got.value.data, got.checkpoint)

    def next_record_with_checkpointer(self, timeout: float | None = None) -> Checkpointed[Record] | Stopped:
        """Like :meth:`next_with_checkpointer`, returning the whole :class:`Record`."""
        self._check_mode("next_record_with_checkpointer()", manual=True)
        return self._delivery.next_manual(timeout)

    def __iter__(self) -> Kinsumer:
        """``for record in k``: records until stopped (auto mode). The Kinsumer is its own iterator: see
        :meth:`__next__`."""
        self._check_mode("for record in k", manual=False)
        return self

    def __next__(self) -> Record:
        """``next(k)``: the next :class:`Record` (as :meth:`next_record`); ``StopIteration`` once stopped.
        Auto mode only."""
        if not self._auto_running:
            self._check_mode("next(k)", manual=False)
        record = self._delivery.next_auto(get_ident(), None)  # this thread's previous record: processed
        if record is None:
            raise StopIteration
        return record

    def __aiter__(self) -> AsyncIterator[Record]:
        """``async for record in k``: records until stopped (auto mode). Each is acknowledged when the loop
        asks for the next; leaving the loop (``break``, an exception, a cancellation) gives the record in
        hand back: the shard's next owner delivers it."""
        self._check_mode("async for record in k", manual=False)
        return self._async.records()

    async def anext(self, timeout: float | None = None) -> bytes | None:
        """:meth:`next` for asyncio: awaits without blocking the event loop. The calling task's previous
        record counts as processed; so does its last one when the task ends (not when it fails or is
        cancelled: then that record goes back to be delivered again)."""
        record = await self._anext_record(timeout, "anext()")
        return None if record is None else record.data

    async def anext_record(self, timeout: float | None = None) -> Record | None:
        """Like :meth:`anext`, returning the whole :class:`Record`."""
        return await self._anext_record(timeout, "anext_record()")

    async def _anext_record(self, timeout: float | None, called: str) -> Record | None:
        if not self._auto_running:
            self._check_mode(called, manual=False)
        return await self._async.next_record(timeout)

    async def anext_with_checkpointer(self, timeout: float | None = None) -> Checkpointed[bytes] | Stopped:
        """:meth:`next_with_checkpointer` for asyncio (manual mode): the same pair, checked the same way
        (``got.checkpoint is not None``). The Checkpoint stays a plain call: it never blocks."""
        self._check_mode("anext_with_checkpointer()", manual=True)
        got = await self._async.next_manual(timeout)
        if got.checkpoint is None:
            return STOPPED
        return Checkpointed(got.value.data, got.checkpoint)

    async def anext_record_with_checkpointer(self, timeout: float | None = None) -> Checkpointed[Record] | Stopped:
        """Like :meth:`anext_with_checkpointer`, returning the whole :class:`Record`."""
        self._check_mode("anext_record_with_checkpointer()", manual=True)
        return await self._async.next_manual(timeout)

    # ----------------------------------------------------------------- handlers

    def process(
        self,
        handler: Callable[[Record], object] | Callable[[Any, Record], object],
        **options: Unpack[ProcessOptions],
    ) -> None:
        """Call ``handler(record)`` for every record until :meth:`stop` (from another thread, a signal).

        A record is done, and checkpointed in order, when its handler returns. A handler that raises
        is called again for the same record after ``backoff`` seconds, doubled each time up to
        ``max_backoff``; the later records of its shard wait. After ``max_attempts`` calls the record
        goes to ``dead_letter`` as a :class:`Failure` (``reason="raised"``), and is done. Without a
        sink, :class:`RecordFailed` is raised and the record stays unacknowledged (the shard's next
        owner tries it again); a sink that raises is tried like a handler, then RecordFailed.

        No crash loop: when processes die while a record is in their handler, at most
        ``max_attempts`` of them die on it; then a live client hands it to ``dead_letter`` with
        ``reason="crashed"`` without calling the handler (see docs/failing-records.md).

        ``concurrency``: up to this many handler calls at once (threads), never two records of one
        shard at once (with ``ordering="shard"``). Errors the consumer cannot retry are raised as from :meth:`next`.

        ``ordering="key"``: records of one shard with different partition keys may be in handlers at
        once (up to ``concurrency``), each key's strictly in order, for a hot shard whose handler
        waits on I/O; the checkpoint advances over the contiguous prefix of done records. A failing
        record holds back only the later records of its key. ``"shard"`` (the default): one record of a
        shard at a time, in shard order. Either way the crash-loop guard is exact (during an episode a
        shard's records go one at a time).

        ``max_record_age`` (seconds): a record that reached the stream longer ago than that when its
        turn comes (its first call or a retry) goes to ``dead_letter`` with ``reason="expired"``, and
        the handler never sees it (so a consumer far behind catches up); it needs a ``dead_letter``.

        Shard lifecycle hooks, each called with the shard's ID (see :mod:`kinsumer.handling.hooks`):
        ``on_assigned`` before a capture's first record goes to the handler; ``on_revoked`` when the
        shard is given up cleanly, after its last handed record is done and before its final
        checkpoint (flush per-shard state there); ``on_lost`` when it went without a clean handoff
        (drop per-shard state). A hook that raises is logged and counted, nothing more.

        ``timeout`` (seconds): a handler call that runs longer is a failed attempt (``reason="timeout"``
        when it is the last): retried with the backoff, then the sink. A sync call cannot be killed: it
        goes on in the background (its late result is logged and ignored) while the shard goes on; once
        more than ``concurrency * max_attempts`` such calls are still running, the client leaves (its
        shards go to the others) and :class:`HandlerStuck` is raised, for a supervisor to restart the
        process. An async handler (``aprocess()``) is cancelled at its timeout.

        Traces: with ``opentelemetry-api`` installed (``pykinsumer[otel]``) and a TracerProvider set by the
        application, handler calls run in spans of kind CONSUMER named ``process <stream>``, current while
        the handler runs: one per run of a shard's records by default, one per call with
        ``Config(handler_spans="call")`` (see docs/observability.md). ``trace_context``: a callable
        from a :class:`Record` to a carrier of its producer's trace context (a dict such as
        ``{"traceparent": ...}``, read from the payload; None when it has none), read with the global
        propagator: the parent of the record's span, one per call (with the batch calls, a link of the
        batch's span). One that raises or returns something else is logged once; the span then has no parent.

        ``decode``: a callable from a record's data to a value (``Order.model_validate_json``,
        ``msgspec.json.Decoder(Order).decode``, ``json.loads``); the handler is then called as
        ``handler(value, record)``. A record it cannot decode (it raises) goes to ``dead_letter`` at once with
        ``reason="decode"`` and the decoder's error: never retried and never handed to the handler (without a
        sink, :class:`RecordFailed`). It runs on the handler's thread, within its ``timeout`` and span.
        """
        checked = Processing.options(options, batches=False)
        Processing.check_handler(handler, batches=False, called="process()")
        self._check_started("process()")
        self._processing.run(handler, checked, batches=False)

    def process_batches(
        self,
        handler: Callable[[list[Record]], Sequence[Record] | None]
        | Callable[[list[tuple[Any, Record]]], Sequence[Record] | None],
        **options: Unpack[BatchOptions],
    ) -> None:
        """Like :meth:`process`, with lists of up to ``max_records`` consecutive records of one shard
        (gathered for up to ``max_wait`` seconds).

        The handler returns None (all done) or the records that failed: the batch is done up to the
        first of them and the rest goes again (as Lambda's partial batch responses). A handler that
        raises gets the batch again split in halves, until the failing records are alone (as Lambda's
        bisect on error); only those count attempts.

        ``ordering="key"``: a batch holds records of one of ``concurrency`` groups of partition keys of
        its shard (by a hash of the key, the same in every process, as Lambda's ParallelizationFactor),
        so up to ``concurrency`` batches of one shard run at once, each key's records in order.

        ``decode``: the handler gets ``[(value, record), ...]`` (and returns the failed records, as
        without it); the records of a batch that do not decode go to ``dead_letter`` at once
        (``reason="decode"``) and the rest to the handler without them (see :meth:`process`).
        """
        checked = Processing.options(options, batches=True)
        Processing.check_handler(handler, batches=True, called="process_batches()")
        self._check_started("process_batches()")
        self._processing.run(handler, checked, batches=True)

    async def aprocess(
        self,
        handler: Callable[[Record], Awaitable[object]] | Callable[[Any, Record], Awaitable[object]],
        **options: Unpack[ProcessOptions],
    ) -> None:
        """:meth:`process` with an async handler, awaited on the calling event loop: the same retries, dead
        letters, crash-loop guard, shard order, ``concurrency`` (handlers under way at once) and ``decode``
        (run on a worker thread, off the loop: ``await handler(value, record)``). The
        waits between attempts and the sinks that are not async (the built-in ones) run off the loop;
        an async ``dead_letter`` is awaited on it. Cancelling it cancels the handlers under way: their
        records go back (the shards' next owners deliver them), nothing more is handled, and the
        cancellation goes on to the caller (``async with`` stops the consumer)."""
        checked = Processing.options(options, batches=False)
        Processing.check_handler(handler, batches=False, called="aprocess()")
        self._check_started("aprocess()")
        await self._processing.run_async(handler, checked, batches=False)

    async def aprocess_batches(
        self,
        handler: Callable[[list[Record]], Awaitable[Sequence[Record] | None]]
        | Callable[[list[tuple[Any, Record]]], Awaitable[Sequence[Record] | None]],
        **options: Unpack[BatchOptions],
    ) -> None:
        """:meth:`process_batches` with an async handler (see :meth:`aprocess`)."""
        checked = Processing.options(options, batches=True)
        Processing.check_handler(handler, batches=True, called="aprocess_batches()")
        self._check_started("aprocess_batches()")
        await self._processing.run_async(handler, checked, batches=True)

    def _check_started(self, called: str) -> None:
        if not self._client.started:
            raise NotStarted(called)

    def _check_mode(self, called: str, *, manual: bool) -> None:
        """``called`` (``"next()"``, as the errors name it) fits the checkpointing mode, and run() came first."""
        if self.config.manual_checkpointing != manual:
            raise CheckpointModeError(called, _CALLS_FOR[self.config.manual_checkpointing], not manual)
        self._check_started(called)


def _stream_refs(given: object) -> tuple[StreamRef, ...]:
    """The constructor's stream (a name or an ARN) or streams (a non-empty list of streams of distinct names)."""
    if isinstance(given, str):
        return (StreamRef(given),)
    if isinstance(given, Sequence) and given and all(isinstance(name, str) for name in given):
        refs = tuple(StreamRef(name) for name in given)
        distinct_names(refs)
        return refs
    rule = "must be a stream name or ARN, or a non-empty list of stream names or ARNs"
    raise ConfigError("stream_name", rule, given)
