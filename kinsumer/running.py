"""The running side of one :class:`~kinsumer.Kinsumer`: what ``run()`` builds and ``stop()`` ends.

A :class:`RunningClient` is made with its Kinsumer (state ``"new"``) and lives through one run. ``run()``
makes the :class:`~kinsumer.coordination.runtime.Runtime` and the
:class:`~kinsumer.coordination.coordinator.Coordinator` (which owns the shard pool and the heartbeat) and
starts them; ``stop()`` ends them, once (idempotent) and in bounded time: whoever starts a thread stops it.
A failure of the background threads (``Runtime.fail``) closes the delivery with its error: the caller's next
``next*()`` or ``process*()`` raises it. While it runs it answers ``status()``, the facts of ``health()`` and
``pause()`` / ``resume()``. A program that ends without ``stop()`` leaves at exit.

The Kinsumer keeps the public signatures, docstrings and the checks of its callers (the checkpointing mode);
this keeps the rest.
"""

from __future__ import annotations

import atexit
import functools
import logging
import math
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from .aws.call_watch import CallWatch
from .aws.error_codes import to_kinsumer_error
from .aws.first_contact import FirstContact
from .aws.kinesis import ensure_stream_active
from .aws.retry import retry_call
from .aws.stream_consumers import ensure_stream_consumer, stream_arn
from .aws.stream_ref import StreamRef
from .aws.tables import Tables, ensure_tables_ready
from .config import Config
from .coordination.coordinator import Coordinator
from .coordination.home_stream import establish_home_stream
from .coordination.runtime import Runtime
from .coordination.shard_worker import ShardWorker
from .coordination.streams import SEPARATOR as STREAM_SEPARATOR
from .coordination.streams import StreamScope, scope_stats
from .delivery.delivery import Delivery
from .errors import AlreadyStarted, ConfigError, KinsumerError
from .health import HEARTBEAT_MARGIN, Health, HealthFacts, HealthServer, ShardLag
from .reading.fanout import fanout_readers
from .reading.reader import OutsideRule, ReaderFactory
from .stats import GuardedStats
from .status import ClientStatus, OwnedShard
from .waiting import wait_event

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kinesis import KinesisClient

__all__ = ["NEW", "RUNNING", "STOPPED", "RunningClient"]

log = logging.getLogger("kinsumer")
T = TypeVar("T")

_STOP_GRACE = 10.0  # seconds stop() allows beyond handoff_timeout for the final DynamoDB writes
_SETUP_DEADLINE = 30.0  # seconds run() retries transient faults of its first calls (tables, streams) before raising
_UNREACHED_PATIENCE = 3.0  # seconds run() tries again an endpoint that refuses connections (or whose DNS is silent)

NEW, RUNNING, STOPPED = "new", "running", "stopped"

_running: weakref.WeakSet[RunningClient] = weakref.WeakSet()  # the clients of this process that run() started


@atexit.register
def _leave_at_exit() -> None:
    """A program that ends without stop() (an exception escaped its loop, or it forgot) still leaves
    cleanly: its shards go to the other clients at once, not after ``client_record_max_age``. The
    record each thread had in hand is not counted (nothing says it was processed)."""
    for client in list(_running):
        client.shutdown(clean=False)


class RunningClient:
    """One Kinsumer's run: its state (``state``: :data:`NEW`, :data:`RUNNING`, :data:`STOPPED`), the
    background work ``run()`` starts (``runtime``, ``coordinator``) and its stop, its snapshots, its pauses."""

    def __init__(
        self,
        *,
        kinesis: KinesisClient,
        dynamodb: DynamoDBClient,
        refs: Sequence[StreamRef],
        tables: Tables,
        config: Config,
        application_name: str,
        client_id: str,
        client_name: str,
        delivery: Delivery,
        stats: GuardedStats,
    ) -> None:
        self._kinesis = kinesis
        self._dynamodb = dynamodb
        self._refs = tuple(refs)
        self._streams = tuple(ref.name for ref in refs)
        self._stream_name = ", ".join(self._streams)
        self._tables = tables
        self._config = config
        self._application_name = application_name
        self._client_id = client_id
        self._client_name = client_name
        self._delivery = delivery
        self._stats = stats
        self._calls = CallWatch(tables, stats)  # DynamoDB calls counted from run() to stop()
        self.state = NEW
        self._ran = False  # run() was called
        self._lifecycle = threading.Lock()
        self._stopped = threading.Event()
        #: What run() built (None before it, or when it failed first).
        self.coordinator: Coordinator | None = None
        self.runtime: Runtime | None = None
        self._health_servers: list[HealthServer] = []  # serve_health()'s: stop() closes them
        self._home: str | None = None  # the application's home stream, once run() established it

    @property
    def started(self) -> bool:
        """run() was called (the client may have stopped since)."""
        return self.state != NEW

    # ----------------------------------------------------------------- run and stop

    def run(self) -> None:
        """Join the application's clients and start the background work (see ``Kinsumer.run()``)."""
        with self._lifecycle:
            if self.state != NEW:
                raise AlreadyStarted(stopped_before_run=self.coordinator is None and not self._ran)
            self.state = RUNNING
            self._ran = True
            _running.add(self)
        try:
            self._calls.attach(self._dynamodb)
            contact = FirstContact(_UNREACHED_PATIENCE)
            setup_deadline = time.monotonic() + _SETUP_DEADLINE
            setup = functools.partial(self._setup_call, deadline=setup_deadline, contact=contact)
            setup(lambda: ensure_tables_ready(self._dynamodb, self._tables), "DescribeTable", self._dynamodb)
            refs = self._refs
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
                tables=self._tables,
                config=self._config,
                client_id=self._client_id,
                client_name=self._client_name,
                delivery=self._delivery,
                stats=self._stats,
                on_fatal=self._on_fatal,
                request_refresh=self._request_refresh,
            )
            self.runtime = runtime
            self.coordinator = Coordinator(runtime, self._readers(scopes))
            self.coordinator.start(setup_deadline)
        except BaseException as exc:
            self.shutdown(clean=False)
            if isinstance(exc, Exception) and not isinstance(exc, KinsumerError):
                raise to_kinsumer_error(exc, "run()") from exc
            raise
        log.info("kinsumer %s reading %s as client %s", self._application_name, self._stream_name, self._client_id)

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
        home = establish_home_stream(self._dynamodb, self._tables, self._streams[0])
        if home not in self._streams:
            rule = (
                f"must include the stream application {self._application_name!r} consumes, {home!r} (recorded in "
                f"{self._tables.metadata} by its first client): every client of an application reads that "
                f"stream. To read {self._stream_name!r} as well, list both in every client: "
                f"Kinsumer({[home, *self._streams]!r}, ...); to read only {self._stream_name!r}, give these clients "
                "an application name of their own"
            )
            raise ConfigError("stream_name", rule, self._stream_name)
        return home

    def _readers(self, scopes: Sequence[StreamScope]) -> dict[str, ReaderFactory] | None:
        """Each stream's enhanced fan-out readers through the configured consumer (registered if absent);
        None: polling."""
        name = self._config.efo_consumer_name
        if name is None:
            return None
        readers: dict[str, ReaderFactory] = {}
        for scope in scopes:
            consumer = ensure_stream_consumer(self._kinesis, stream_arn(scope.identity), name, stats=self._stats)
            log.info("reading %s with enhanced fan-out through %s", scope.name, consumer)
            outside = OutsideRule.listing(self._kinesis, scope.ref, self._config.kpl_outside_shard)
            readers[scope.name] = fanout_readers(
                self._kinesis, scope.ref, consumer, scope_stats(self._stats, scope), outside
            )
        return readers

    def stop(self) -> None:
        """Stop cleanly: the record each thread was last given counts as processed (see ``Kinsumer.stop()``)."""
        self.shutdown(clean=True)

    def shutdown(self, *, clean: bool) -> None:
        """Stop the background work and leave, once; a later call waits for the first to end (bounded).
        Not ``clean``: the records in hand were not processed (the shards' next owners deliver them)."""
        with self._lifecycle:
            first = self.state != STOPPED
            self.state = STOPPED
        if first:
            _running.discard(self)
            self._delivery.close()  # first, so no record is handed over after the acknowledgements below
            if clean:
                self._delivery.acknowledge_held()
            else:  # no handoff waits for a record its holder failed on: the next owner delivers it
                self._delivery.abandon_held()
            if self.coordinator is not None:
                self.coordinator.request_stop()
                self.coordinator.join(self._config.handoff_timeout + _STOP_GRACE)
            self._calls.detach()
            self._stats.flush()  # once, after the background threads' last calls
            for server in self._health_servers:
                server.close()
            self._stopped.set()
            log.info("kinsumer %s stopped (client %s)", self._application_name, self._client_id)
        else:
            wait_event(self._stopped, self._config.handoff_timeout + _STOP_GRACE)

    def _on_fatal(self, error: KinsumerError) -> None:
        # wake the callers (they raise the error) and stop the background work
        self._delivery.close(error)
        if self.coordinator is not None:
            self.coordinator.request_stop()

    def _request_refresh(self) -> None:
        if self.coordinator is not None:
            self.coordinator.request_refresh()

    # ----------------------------------------------------------------- snapshots

    def status(self) -> ClientStatus:
        """A snapshot of this client (see ``Kinsumer.status()``)."""
        coordinator = self.coordinator
        if coordinator is None or self._stopped.is_set():  # not running: no leadership, no shard
            return ClientStatus(self._client_id, self._client_name, self.state, False, 0, 0, ())
        reading = self._config.reading
        return ClientStatus(
            client_id=self._client_id,
            client_name=self._client_name,
            state=self.state,
            is_leader=coordinator.is_leader,
            client_index=coordinator.client_index,
            client_count=coordinator.client_count,
            shards=tuple(_owned(w, reading) for w in coordinator.workers()),
        )

    def health_facts(self, stuck_calls: Callable[[], tuple[tuple[str, float], ...]]) -> HealthFacts:
        """What ``health()`` judges (see :mod:`kinsumer.health`); ``stuck_calls``: the handler calls past their
        timeout still running, of the ``process*()`` calls under way."""
        coordinator, runtime, cfg = self.coordinator, self.runtime, self._config
        state = self.state
        if state == RUNNING and (coordinator is None or runtime is None):
            state = "starting"
        if state != RUNNING or coordinator is None or runtime is None:
            return HealthFacts(state=state)
        now, error = time.monotonic(), self._delivery.error
        beat = runtime.liveness.last_beat
        several = len(self._streams) > 1
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
            stuck_calls=stuck_calls(),
            shards=shards,
            max_healthy_lag=cfg.max_healthy_lag,
            idle_for=None if idle_since is None else now - idle_since,
            owned_once=coordinator.owned_once or bool(shards),
            idle_grace=cfg.handoff_timeout + cfg.effective_client_record_max_age + 2 * cfg.shard_check_frequency,
            beside_go=coordinator.beside_go,
        )

    def serve_health(self, health: Callable[[], Health], port: int, addr: str, *, registry: Any) -> HealthServer:
        """A :class:`HealthServer` answering with ``health()``, closed by stop() (see ``Kinsumer.serve_health()``)."""
        server = HealthServer(health, port, addr, registry=registry)
        with self._lifecycle:
            stopped = self.state == STOPPED and self._stopped.is_set()
            if not stopped:
                self._health_servers.append(server)
        if stopped:  # stop() is over: nothing would close it
            server.close()
            raise KinsumerError("serve_health() after stop(): the client is stopped")
        return server

    # ----------------------------------------------------------------- pausing shards

    def pause(self, shard_id: str) -> None:
        """Hand out no more records of the shard until :meth:`resume` (see ``Kinsumer.pause()``)."""
        key = self._shard_key("pause", shard_id)
        self._delivery.pause(key)
        self._note_paused(key, True)

    def resume(self, shard_id: str) -> None:
        """Hand the shard's records out again (see ``Kinsumer.resume()``)."""
        key = self._shard_key("resume", shard_id)
        self._delivery.resume(key)
        self._note_paused(key, False)

    def _shard_key(self, called: str, shard_id: object) -> str:
        """The key of a shard given to pause() or resume(), checked."""
        if not isinstance(shard_id, str) or not shard_id:
            raise ConfigError("shard_id", f"{called}() takes a shard ID, or '<stream>/<shard ID>'", shard_id)
        stream, separator, shard = shard_id.rpartition(STREAM_SEPARATOR)
        if not separator:
            return shard_id
        if stream not in self._streams or not shard:
            rule = f"names a stream this client does not read (it reads {', '.join(self._streams)})"
            raise ConfigError("shard_id", rule, shard_id)
        return shard if stream == (self._home or self._streams[0]) else shard_id  # the home stream's keys are bare

    def _note_paused(self, key: str, paused: bool) -> None:
        """Store the pause in the shard's row if this client owns it (a capture while paused stores its own)."""
        coordinator = self.coordinator
        if coordinator is None or self._stopped.is_set():
            return
        for worker in coordinator.workers():
            if worker.shard_id == key and worker.captured:
                worker.note_paused(paused)


def _owned(worker: ShardWorker, reading: str) -> OwnedShard:
    checkpoint = worker.checkpoint
    sequence_number, sub_sequence = checkpoint if checkpoint is not None else (None, None)
    handling = worker.handling
    retrying, expired, oldest_call = (
        (handling.retrying, handling.expired, handling.oldest_call()) if handling is not None else (None, 0, None)
    )
    return OwnedShard(
        worker.stream_shard_id, worker.captured, sequence_number, worker.millis_behind_latest, sub_sequence,
        reading, retrying, worker.scope.name, expired, worker.paused, oldest_call, worker.oldest_record_age,
        worker.outside_range,
    )  # fmt: skip
