"""The public consumer: :class:`Kinsumer`."""

from __future__ import annotations

import asyncio
import atexit
import datetime as dt
import functools
import logging
import math
import re
import threading
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from threading import get_ident
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, Unpack

import boto3
import botocore.config
import botocore.exceptions

from . import admin
from .admin import as_kinsumer_error
from .asyncio_front import AsyncFront
from .aws import records_parser
from .aws.assumed_role import assumed_role_session
from .aws.call_watch import CallWatch
from .aws.error_codes import to_kinsumer_error
from .aws.first_contact import FirstContact
from .aws.kinesis import ensure_stream_active
from .aws.retry import retry_call
from .aws.stream_consumers import ensure_stream_consumer, stream_arn
from .aws.stream_ref import StreamRef, distinct_names, reading_region
from .aws.tables import Tables, ensure_tables_ready
from .config import Config, validate_names
from .coordination.coordinator import Coordinator
from .coordination.home_stream import establish_home_stream
from .coordination.rewind import ResetPlan
from .coordination.runtime import Runtime
from .coordination.shard_worker import ShardWorker
from .coordination.streams import SEPARATOR as STREAM_SEPARATOR
from .coordination.streams import StreamScope, scope_stats
from .delivery.delivery import Delivery
from .delivery.progress import STOPPED, Checkpointed, Stopped
from .errors import AlreadyStarted, CheckpointModeError, ConfigError, KinsumerError, NotStarted
from .handling.options import BatchOptions, Origin, ProcessOptions
from .health import HEARTBEAT_MARGIN, Health, HealthFacts, HealthServer, ShardLag, verdict
from .processing import Processing
from .reading.fanout import fanout_readers
from .reading.reader import OutsideRule, ReaderFactory
from .record import Record
from .stats import GuardedStats
from .status import ClientStatus, OwnedShard
from .waiting import wait_event

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kinesis import KinesisClient

__all__ = ["Kinsumer"]

log = logging.getLogger("kinsumer")

_STOP_GRACE = 10.0  # seconds stop() allows beyond handoff_timeout for the final DynamoDB writes
_SETUP_DEADLINE = 30.0  # seconds run() retries transient faults of its first calls (tables, streams) before raising
_UNREACHED_PATIENCE = 3.0  # seconds run() tries again an endpoint that refuses connections (or whose DNS is silent)
_BOTO_CONFIG = botocore.config.Config(
    max_pool_connections=64,
    connect_timeout=5,
    read_timeout=20,
    retries={"mode": "standard", "max_attempts": 3},
    user_agent_extra="kinsumer",
)

#: With enhanced fan-out each owned shard holds a connection: more than 64 shards per client overflow
#: the default pool (urllib3 then discards the extra connections as they come back, with a warning each).
_FAN_OUT_CONFIG = _BOTO_CONFIG.merge(botocore.config.Config(max_pool_connections=2048))

_NEW, _RUNNING, _STOPPED = "new", "running", "stopped"

_running: weakref.WeakSet[Kinsumer] = weakref.WeakSet()  # the Kinsumers of this process that run() started


@atexit.register
def _leave_at_exit() -> None:
    """A program that ends without stop() (an exception escaped its loop, or it forgot) still leaves
    cleanly: its shards go to the other clients at once, not after ``client_record_max_age``. The
    record each thread had in hand is not counted (nothing says it was processed)."""
    for consumer in list(_running):
        consumer._shutdown(clean=False)


T = TypeVar("T")

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
        if config.role_arn is not None and kinesis is not None:
            rule = "assumes the role for a Kinesis client kinsumer makes: pass either it or kinesis="
            raise ConfigError("Config.role_arn", rule, config.role_arn)
        if kinesis is not None:
            _check_client_region(kinesis, refs)
        if kinesis is None or dynamodb is None:
            session = session or boto3.Session()
            try:
                # enhanced fan-out: a connection per shard for minutes, so the pool keeps as many as come back
                reading = _BOTO_CONFIG if config.efo_consumer_name is None else _FAN_OUT_CONFIG
                region = reading_region(refs, session.region_name)  # an ARN's, else the session's
                if kinesis is None and config.role_arn is not None:  # the stream's account: its role
                    name = config.role_session_name or _session_name(client_name)
                    role = assumed_role_session(session, config.role_arn, name, config.external_id)
                    kinesis = role.client("kinesis", region_name=region, config=reading)
                kinesis = kinesis or session.client("kinesis", region_name=region, config=reading)
                dynamodb = dynamodb or session.client("dynamodb", config=_BOTO_CONFIG)
            except botocore.exceptions.NoRegionError as exc:
                raise ConfigError(
                    "region", "must be set: export AWS_DEFAULT_REGION or pass clients or a session", None
                ) from exc
        records_parser.install(kinesis)  # GetRecords parsed in one pass: see records_parser
        self._kinesis: KinesisClient = kinesis
        self._dynamodb: DynamoDBClient = dynamodb
        self._stats = GuardedStats(config.stats)
        self._calls = CallWatch(self.tables, self._stats)  # DynamoDB calls counted from run() to stop()
        self._delivery = Delivery(config.buffer_size, self._stats, config.max_buffered_bytes)
        self._state = _NEW
        self._auto_running = False  # run() was called in auto mode: next() needs no other check
        self._ran = False  # run() was called
        self._lifecycle = threading.Lock()
        self._stopped = threading.Event()
        self._coordinator: Coordinator | None = None
        self._runtime: Runtime | None = None
        origin = Origin(self.stream_name, self.application_name, self.client_id)
        self._processing = Processing(self._delivery, self._stats, config, origin, self.stop)
        self._health_servers: list[HealthServer] = []  # serve_health()'s: stop() closes them
        self._home: str | None = None  # the application's home stream, once run() established it
        self._async = AsyncFront(self._delivery)

    def __repr__(self) -> str:
        return (
            f"Kinsumer(stream={self.stream_name!r}, application={self.application_name!r}, "
            f"client={self.client_name!r}, id={self.client_id!r}, state={self._state})"
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
        if self._state == _RUNNING:
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

    # ----------------------------------------------------------------- lifecycle

    def run(self) -> None:
        """Join the application's clients and start reading. Returns at once.

        Raises :class:`TableNotFound` or :class:`StreamNotFound` if the tables or the stream
        are missing, :class:`EndpointUnreachable` within seconds if an endpoint cannot be reached at all
        (refused, unknown host, untrusted certificate), and :class:`AlreadyStarted` on a second call.
        Other transient faults (5xx, throttling) are retried for up to 30 s.
        """
        with self._lifecycle:
            if self._state != _NEW:
                raise AlreadyStarted(stopped_before_run=self._coordinator is None and not self._ran)
            self._state = _RUNNING
            self._ran = True
            _running.add(self)
            self._auto_running = not self.config.manual_checkpointing
        try:
            self._calls.attach(self._dynamodb)
            contact = FirstContact(_UNREACHED_PATIENCE)
            setup_deadline = time.monotonic() + _SETUP_DEADLINE
            setup = functools.partial(self._setup_call, deadline=setup_deadline, contact=contact)
            setup(lambda: ensure_tables_ready(self._dynamodb, self.tables), "DescribeTable", self._dynamodb)
            refs = tuple(self._refs.values())
            identities = [
                setup(functools.partial(ensure_stream_active, self._kinesis, ref.text), "DescribeStreamSummary",
                      self._kinesis)
                for ref in refs
            ]  # fmt: skip
            home = self._home = setup(self._check_home_stream, "PutItem", self._dynamodb)
            scopes = tuple(
                StreamScope(ref.name, identity, ref.name == home, ref.arn or "")
                for ref, identity in zip(refs, identities, strict=True)
            )
            runtime = Runtime(
                kinesis=self._kinesis,
                dynamodb=self._dynamodb,
                streams=scopes,
                tables=self.tables,
                config=self.config,
                client_id=self.client_id,
                client_name=self.client_name,
                delivery=self._delivery,
                stats=self._stats,
                on_fatal=self._on_fatal,
                request_refresh=self._request_refresh,
            )
            self._runtime = runtime
            self._coordinator = Coordinator(runtime, self._readers(scopes))
            self._coordinator.start(setup_deadline)
        except BaseException as exc:
            self._shutdown(clean=False)
            if isinstance(exc, Exception) and not isinstance(exc, KinsumerError):
                raise to_kinsumer_error(exc, "run()") from exc
            raise
        log.info("kinsumer %s reading %s as client %s", self.application_name, self.stream_name, self.client_id)

    def _setup_call(
        self, fn: Callable[[], T], operation: str, client: Any, *, deadline: float, contact: FirstContact
    ) -> T:
        """One of run()'s first calls, through ``client``: its transient faults (throttling, 5xx, a connection
        reset) retried until ``deadline`` (a client starts through them as it reads through them), but those
        of an endpoint this start never reached given up on in seconds (see :class:`FirstContact`)."""
        meta = getattr(client, "meta", None)  # a client of one's own making may have none
        endpoint = str(getattr(meta, "endpoint_url", None) or f"{type(client).__name__}'s endpoint")
        return retry_call(
            contact.watched(endpoint, fn), operation=operation, stats=self._stats, deadline=deadline,
            sleep=lambda seconds: time.sleep(contact.wait(endpoint, seconds)),
            give_up_on=functools.partial(contact.gives_up, endpoint),
        )  # fmt: skip

    def _check_home_stream(self) -> str:
        """The application's home stream (the first stream of its first client, recorded in the metadata
        table); refuse to join if this client does not list it."""
        home = establish_home_stream(self._dynamodb, self.tables, self.streams[0])
        if home not in self.streams:
            rule = (
                f"must include the stream application {self.application_name!r} consumes, {home!r} (recorded in "
                f"{self.tables.metadata} by its first client): every client of an application reads that "
                f"stream. To read {self.stream_name!r} as well, list both in every client: "
                f"Kinsumer({[home, *self.streams]!r}, ...); to read only {self.stream_name!r}, give these clients "
                "an application name of their own"
            )
            raise ConfigError("stream_name", rule, self.stream_name)
        return home

    def _readers(self, scopes: Sequence[StreamScope]) -> dict[str, ReaderFactory] | None:
        """Each stream's enhanced fan-out readers through the configured consumer (registered if absent);
        None: polling."""
        name = self.config.efo_consumer_name
        if name is None:
            return None
        readers: dict[str, ReaderFactory] = {}
        for scope in scopes:
            consumer = ensure_stream_consumer(self._kinesis, stream_arn(scope.identity), name, stats=self._stats)
            log.info("reading %s with enhanced fan-out through %s", scope.name, consumer)
            outside = OutsideRule.listing(self._kinesis, scope.ref, self.config.kpl_outside_shard)
            readers[scope.name] = fanout_readers(
                self._kinesis, scope.ref, consumer, scope_stats(self._stats, scope), outside
            )
        return readers

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

    def stop(self) -> None:
        """Stop reading, hand every shard off and leave. Idempotent; bounded in time.

        In auto mode the record each thread was last given counts as processed. Waits up
        to ``handoff_timeout`` for manual checkpoints of delivered records.
        """
        self._shutdown(clean=True)

    def _shutdown(self, *, clean: bool) -> None:
        with self._lifecycle:
            first = self._state != _STOPPED
            self._state = _STOPPED
        if first:
            _running.discard(self)
            self._delivery.close()  # first, so no record is handed over after the acknowledgements below
            if clean:
                self._delivery.acknowledge_held()
            else:  # no handoff waits for a record its holder failed on: the next owner delivers it
                self._delivery.abandon_held()
            if self._coordinator is not None:
                self._coordinator.request_stop()
                self._coordinator.join(self.config.handoff_timeout + _STOP_GRACE)
            self._calls.detach()
            self._stats.flush()  # once, after the background threads' last calls
            for server in self._health_servers:
                server.close()
            self._stopped.set()
            log.info("kinsumer %s stopped (client %s)", self.application_name, self.client_id)
        else:
            wait_event(self._stopped, self.config.handoff_timeout + _STOP_GRACE)

    def _on_fatal(self, error: KinsumerError) -> None:
        # wake the callers (they raise the error) and stop the background work
        self._delivery.close(error)
        if self._coordinator is not None:
            self._coordinator.request_stop()

    def _request_refresh(self) -> None:
        if self._coordinator is not None:
            self._coordinator.request_refresh()

    def __enter__(self) -> Kinsumer:
        self.run()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # after an exception the record in hand was not processed: don't count it
        self._shutdown(clean=exc_type is None)

    async def __aenter__(self) -> Kinsumer:
        """``async with``: :meth:`run` in a thread, so the event loop goes on meanwhile."""
        await asyncio.to_thread(self.run)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Stop in a thread (the handoff's wait does not block the loop). After an exception (a
        cancellation too) the records in hand were not processed: the shards' next owners deliver them."""
        await asyncio.shield(asyncio.to_thread(self._shutdown, clean=exc_type is None))

    def status(self) -> ClientStatus:
        """A snapshot of this client: leadership, place in the membership, shards and their lag."""
        coordinator = self._coordinator
        if coordinator is None or self._stopped.is_set():  # not running: no leadership, no shard
            return ClientStatus(self.client_id, self.client_name, self._state, False, 0, 0, ())
        reading = self.config.reading
        return ClientStatus(
            client_id=self.client_id,
            client_name=self.client_name,
            state=self._state,
            is_leader=coordinator.is_leader,
            client_index=coordinator.client_index,
            client_count=coordinator.client_count,
            shards=tuple(_owned(w, reading) for w in coordinator.workers()),
        )

    def health(self) -> Health:
        """Whether this client is live (a restart would not help) and ready (consuming as it should), and
        why not: see :mod:`kinsumer.health` and docs/observability.md. Cheap; thread-safe."""
        return verdict(self._health_facts())

    def serve_health(self, port: int = 0, addr: str = "127.0.0.1", *, registry: Any = None) -> HealthServer:
        """Answer ``GET /healthz`` (liveness) and ``/readyz`` (readiness) on ``addr:port`` (0: a free port, see
        ``.port``) with 200 or 503 and :meth:`health` as JSON, on a daemon thread; with a Prometheus
        ``registry`` (``PrometheusStatReceiver.registry``) its metrics on every other path. Call it before
        :meth:`run` to be probed while starting; :meth:`stop` closes it (so does its ``close()``)."""
        server = HealthServer(self.health, port, addr, registry=registry)
        with self._lifecycle:
            stopped = self._state == _STOPPED and self._stopped.is_set()
            if not stopped:
                self._health_servers.append(server)
        if stopped:  # stop() is over: nothing would close it
            server.close()
            raise KinsumerError("serve_health() after stop(): the client is stopped")
        return server

    def _health_facts(self) -> HealthFacts:
        coordinator, runtime, cfg = self._coordinator, self._runtime, self.config
        state = self._state
        if state == _RUNNING and (coordinator is None or runtime is None):
            state = "starting"
        if state != _RUNNING or coordinator is None or runtime is None:
            return HealthFacts(state=state)
        now, error = time.monotonic(), self._delivery.error
        beat = runtime.liveness.last_beat
        several = len(self.streams) > 1
        shards = tuple(
            ShardLag(f"{s.stream}/{s.shard_id}" if several else s.shard_id, s.millis_behind_latest, s.oldest_record_age)
            for s in self.status().shards
            if s.captured
        )
        idle_since = None if shards else coordinator.idle_since  # a capture since the last round counts at once
        return HealthFacts(
            state=state,
            error=None if error is None else str(error),
            heartbeat_age=now - beat if beat > -math.inf else None,
            heartbeat_limit=2 * cfg.shard_check_frequency + HEARTBEAT_MARGIN,
            stuck_calls=self._processing.stuck_calls(),
            shards=shards,
            max_healthy_lag=cfg.max_healthy_lag,
            idle_for=None if idle_since is None else now - idle_since,
            owned_once=coordinator.owned_once or bool(shards),
            idle_grace=cfg.handoff_timeout + cfg.effective_client_record_max_age + 2 * cfg.shard_check_frequency,
            beside_go=coordinator.beside_go,
        )

    # ----------------------------------------------------------------- pausing shards

    def pause(self, shard_id: str) -> None:
        """Hand out no more records of the shard until :meth:`resume`, whatever consumes them (``next*()``,
        ``process*()``, asyncio). The client keeps the shard (its lease and heartbeat go on); its reading
        stops once the records read are held (the queue's and one page), within the buffer's bounds.
        Records already handed out go on (a handler call under way finishes). ``shard_id``: a shard ID of
        the home stream, or ``"<stream>/<shard ID>"``. The pause holds while this client runs, for the
        next captures of the shard too; a shard that moves to another client is not paused there.
        ``status()`` and ``kinsumer status`` show it. Idempotent; thread-safe."""
        key = self._shard_key("pause", shard_id)
        self._delivery.pause(key)
        self._note_paused(key, True)

    def resume(self, shard_id: str) -> None:
        """Hand the shard's records out again, in order, from where they stopped. Idempotent; thread-safe."""
        key = self._shard_key("resume", shard_id)
        self._delivery.resume(key)
        self._note_paused(key, False)

    @property
    def paused(self) -> frozenset[str]:
        """The shards paused (as :meth:`pause` was given them, ``"<stream>/<shard ID>"`` for another stream)."""
        return self._delivery.paused

    def _shard_key(self, called: str, shard_id: object) -> str:
        """The key of a shard given to pause() or resume(), checked."""
        if not isinstance(shard_id, str) or not shard_id:
            raise ConfigError("shard_id", f"{called}() takes a shard ID, or '<stream>/<shard ID>'", shard_id)
        stream, separator, shard = shard_id.rpartition(STREAM_SEPARATOR)
        if not separator:
            return shard_id
        if stream not in self.streams or not shard:
            rule = f"names a stream this client does not read (it reads {', '.join(self.streams)})"
            raise ConfigError("shard_id", rule, shard_id)
        return shard if stream == (self._home or self.streams[0]) else shard_id  # the home stream's keys are bare

    def _note_paused(self, key: str, paused: bool) -> None:
        """Store the pause in the shard's row if this client owns it (a capture while paused stores its own)."""
        coordinator = self._coordinator
        if coordinator is None or self._stopped.is_set():
            return
        for worker in coordinator.workers():
            if worker.shard_id == key and worker.captured:
                worker.note_paused(paused)

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
        if self._state == _NEW:
            raise NotStarted(called)

    def _check_mode(self, called: str, *, manual: bool) -> None:
        """``called`` (``"next()"``, as the errors name it) fits the checkpointing mode, and run() came first."""
        if self.config.manual_checkpointing != manual:
            raise CheckpointModeError(called, _CALLS_FOR[self.config.manual_checkpointing], not manual)
        self._check_started(called)


def _session_name(client_name: str) -> str:
    """The role session's default name: kinsumer-<client name>, in the characters and length STS takes."""
    return re.sub(r"[^\w+=,.@-]", "-", f"kinsumer-{client_name}")[:64]


def _owned(worker: ShardWorker, reading: str) -> OwnedShard:
    checkpoint = worker.checkpoint
    sequence_number, sub_sequence = checkpoint if checkpoint is not None else (None, None)
    return OwnedShard(
        worker.stream_shard_id, worker.captured, sequence_number, worker.millis_behind_latest, sub_sequence,
        reading, worker.retrying, worker.scope.name, worker.expired, worker.paused, worker.oldest_call_age,
        worker.oldest_record_age, worker.outside_range,
    )  # fmt: skip


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


def _check_client_region(kinesis: KinesisClient, refs: Sequence[StreamRef]) -> None:
    """Refuse a Kinesis client given for a stream ARN of another region: it would look for the stream in its own."""
    region = getattr(getattr(kinesis, "meta", None), "region_name", None)  # a client of one's own making may have none
    arn_region = reading_region(refs, region)
    if isinstance(region, str) and arn_region is not None and arn_region != region:
        rule = (
            f"is a client of region {region}, and the stream is in {arn_region} (its ARN says so): make the client "
            f"with region_name={arn_region!r}, or leave kinesis= out and kinsumer makes it there"
        )
        raise ConfigError("kinesis", rule, [ref.text for ref in refs if ref.region])
