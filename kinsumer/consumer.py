"""The public consumer: :class:`Kinsumer`."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from types import TracebackType
from typing import TYPE_CHECKING

import boto3
import botocore.config
import botocore.exceptions

from . import records_parser
from .config import Config, validate_names
from .coordinator import Coordinator
from .delivery import Checkpoint, ShardProgress
from .errors import AlreadyStarted, CheckpointModeError, ConfigError, KinsumerError, NotStarted
from .record import Record
from .record_queue import Closed, RecordQueue
from .runtime import Runtime
from .stats import GuardedStats
from .status import ClientStatus, OwnedShard
from .stream import ensure_stream_active
from .tables import Tables, create_tables, delete_tables, ensure_tables_ready

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kinesis import KinesisClient

__all__ = ["Kinsumer"]

log = logging.getLogger("kinsumer")

_STOP_GRACE = 10.0  # seconds stop() allows beyond handoff_timeout for the final DynamoDB writes
_BOTO_CONFIG = botocore.config.Config(
    max_pool_connections=64,
    connect_timeout=5,
    read_timeout=20,
    retries={"mode": "standard", "max_attempts": 3},
    user_agent_extra="kinsumer",
)

_NEW, _RUNNING, _STOPPED = "new", "running", "stopped"
_CALLS_FOR = {  # manual_checkpointing -> the calls that work
    False: "next() or next_record()",
    True: "next_with_checkpointer() or next_record_with_checkpointer()",
}


class Kinsumer:
    """Consumes a Kinesis stream together with the other clients of the same application.

    ::

        k = Kinsumer("clicks", "billing-app", "worker-1")
        k.create_required_tables()
        k.run()
        while (data := k.next()) is not None:
            handle(data)
        k.stop()

    Without ``kinesis`` / ``dynamodb`` clients it builds them from ``session`` (or a default
    ``boto3.Session()``), so the standard AWS environment variables apply.
    """

    def __init__(
        self,
        stream_name: str,
        application_name: str,
        client_name: str,
        config: Config | None = None,
        *,
        kinesis: KinesisClient | None = None,
        dynamodb: DynamoDBClient | None = None,
        session: boto3.Session | None = None,
    ) -> None:
        validate_names(stream_name, application_name, client_name)
        if config is None:
            config = Config()
        elif not isinstance(config, Config):
            raise ConfigError("config", "must be a kinsumer.Config", config)
        self.stream_name = stream_name
        self.application_name = application_name
        self.client_name = client_name
        self.config = config
        self.client_id = config.client_id or str(uuid.uuid4())
        self.tables = Tables.for_application(application_name)
        if kinesis is None or dynamodb is None:
            session = session or boto3.Session()
            try:
                kinesis = kinesis or session.client("kinesis", config=_BOTO_CONFIG)
                dynamodb = dynamodb or session.client("dynamodb", config=_BOTO_CONFIG)
            except botocore.exceptions.NoRegionError as exc:
                raise ConfigError(
                    "region", "must be set: export AWS_DEFAULT_REGION or pass clients or a session", None
                ) from exc
        records_parser.install(kinesis)  # GetRecords parsed in one pass: see records_parser
        self._kinesis: KinesisClient = kinesis
        self._dynamodb: DynamoDBClient = dynamodb
        self._queue = RecordQueue(config.buffer_size)
        # records taken from the queue in one go by next*(): a few beyond buffer_size, at most 64
        self._batch_size = max(1, min(64, config.buffer_size // 16))
        self._batch: deque[tuple[Record, ShardProgress]] = deque()
        self._take_lock = threading.Lock()
        self._stats = GuardedStats(config.stats)
        self._state = _NEW
        self._lifecycle = threading.Lock()
        self._stopped = threading.Event()
        self._coordinator: Coordinator | None = None
        self._runtime: Runtime | None = None
        # auto mode: the record each consuming thread holds, acknowledged by its next call
        self._held: dict[int, tuple[ShardProgress, int]] = {}

    def __repr__(self) -> str:
        return (
            f"Kinsumer(stream={self.stream_name!r}, application={self.application_name!r}, "
            f"client={self.client_name!r}, id={self.client_id!r}, state={self._state})"
        )

    # ----------------------------------------------------------------- admin

    def create_required_tables(self) -> None:
        """Create the application's three DynamoDB tables if missing; wait until ACTIVE."""
        cfg = self.config
        create_tables(
            self._dynamodb,
            self.tables,
            billing_mode=cfg.billing_mode,
            read_capacity=cfg.read_capacity,
            write_capacity=cfg.write_capacity,
        )

    def delete_tables(self) -> None:
        """Delete the application's tables (and with them every checkpoint); wait until gone."""
        delete_tables(self._dynamodb, self.tables)

    # ----------------------------------------------------------------- lifecycle

    def run(self) -> None:
        """Join the application's clients and start reading. Returns at once.

        Raises :class:`TableNotFound` or :class:`StreamNotFound` if the tables or the stream
        are missing, and :class:`AlreadyStarted` on a second call.
        """
        with self._lifecycle:
            if self._state != _NEW:
                raise AlreadyStarted()
            self._state = _RUNNING
        try:
            ensure_tables_ready(self._dynamodb, self.tables)
            ensure_stream_active(self._kinesis, self.stream_name)
            self._runtime = Runtime(
                kinesis=self._kinesis,
                dynamodb=self._dynamodb,
                stream_name=self.stream_name,
                tables=self.tables,
                config=self.config,
                client_id=self.client_id,
                client_name=self.client_name,
                queue=self._queue,
                on_fatal=self._on_fatal,
                request_refresh=self._request_refresh,
            )
            self._coordinator = Coordinator(self._runtime)
            self._coordinator.start()
        except BaseException:
            self._shutdown(clean=False)
            raise
        log.info("kinsumer %s reading %s as client %s", self.application_name, self.stream_name, self.client_id)

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
            self._queue.close()  # first, so no record is handed over after the acknowledgements below
            if clean:
                self._acknowledge_held()
            if self._coordinator is not None:
                self._coordinator.request_stop()
                self._coordinator.join(self.config.handoff_timeout + _STOP_GRACE)
            self._stopped.set()
            log.info("kinsumer %s stopped (client %s)", self.application_name, self.client_id)
        else:
            self._stopped.wait(self.config.handoff_timeout + _STOP_GRACE)

    def _on_fatal(self, error: KinsumerError) -> None:
        # wake the callers (they raise the error) and stop the background work
        self._queue.close()
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

    def status(self) -> ClientStatus:
        """A snapshot of this client: leadership, place in the membership, shards and their lag."""
        coordinator = self._coordinator
        if coordinator is None:
            return ClientStatus(self.client_id, self.client_name, self._state, False, 0, 0, ())
        return ClientStatus(
            client_id=self.client_id,
            client_name=self.client_name,
            state=self._state,
            is_leader=coordinator.is_leader,
            client_index=coordinator.client_index,
            client_count=coordinator.client_count,
            shards=tuple(
                OwnedShard(c.shard_id, c.captured, c.checkpoint, c.millis_behind_latest)
                for c in coordinator.consumers()
            ),
        )

    # ----------------------------------------------------------------- consuming

    def next(self, timeout: float | None = None) -> bytes | None:
        """The next record's data; None once stopped. Auto mode only.

        Asking for the next record marks the previous one (of this thread) processed.
        Raises ``TimeoutError`` if nothing arrives within ``timeout`` seconds.
        """
        self._check_mode("next", manual=False)
        record = self._next_auto(timeout)
        return None if record is None else record.data

    def next_record(self, timeout: float | None = None) -> Record | None:
        """Like :meth:`next`, returning the whole :class:`Record`."""
        self._check_mode("next_record", manual=False)
        return self._next_auto(timeout)

    def next_with_checkpointer(self, timeout: float | None = None) -> tuple[bytes, Checkpoint] | tuple[None, None]:
        """The next record's data and its Checkpoint; (None, None) once stopped. Manual mode only."""
        self._check_mode("next_with_checkpointer", manual=True)
        record, checkpoint = self._next_manual(timeout)
        if record is None or checkpoint is None:
            return None, None
        return record.data, checkpoint

    def next_record_with_checkpointer(
        self, timeout: float | None = None
    ) -> tuple[Record, Checkpoint] | tuple[None, None]:
        """Like :meth:`next_with_checkpointer`, returning the whole :class:`Record`."""
        self._check_mode("next_record_with_checkpointer", manual=True)
        return self._next_manual(timeout)

    def __iter__(self) -> Iterator[Record]:
        """Yield records until stopped (auto mode)."""
        self._check_mode("iter", manual=False)
        while (record := self._next_auto(None)) is not None:
            yield record

    def _check_mode(self, called: str, *, manual: bool) -> None:
        if self.config.manual_checkpointing != manual:
            raise CheckpointModeError(called, _CALLS_FOR[self.config.manual_checkpointing], not manual)
        if self._state == _NEW:
            raise NotStarted()

    def _next_auto(self, timeout: float | None) -> Record | None:
        held = self._held.pop(threading.get_ident(), None)
        if held is not None:
            held[0].ack(held[1])
        taken = self._take(timeout)
        if taken is None:
            return None
        record, progress, token = taken
        self._held[threading.get_ident()] = (progress, token)
        return record

    def _next_manual(self, timeout: float | None) -> tuple[Record, Checkpoint] | tuple[None, None]:
        taken = self._take(timeout)
        if taken is None:
            return None, None
        record, progress, token = taken
        return record, Checkpoint(record.shard_id, record.sequence_number, progress, token)

    def _take(self, timeout: float | None) -> tuple[Record, ShardProgress, int] | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        stats = self._stats
        while True:
            if self._state == _STOPPED:
                return None
            fatal = self._runtime.fatal if self._runtime is not None else None
            if fatal is not None:
                raise fatal
            taken = self._take_one(deadline)
            if taken is None:
                raise TimeoutError(f"no record within {timeout:g} s")
            if isinstance(taken, Closed):
                continue  # stopped, or failed: the checks above decide
            record, progress, token = taken
            if token is None:
                continue  # its shard is being handed off: the new owner delivers it
            if stats.wants_deliveries:
                stats.record_delivered(record.shard_id, _age(record.approximate_arrival_timestamp))
            return record, progress, token

    def _take_one(self, deadline: float | None) -> tuple[Record, ShardProgress, int | None] | Closed | None:
        """The next record, registered as delivered; None at the deadline; CLOSED once closed.

        Records leave the queue in batches (one lock round per batch, not per record). Taking
        one and registering its delivery happen under one lock, so that with several calling
        threads each shard's records are registered in shard order.
        """
        lock = self._take_lock
        if not lock.acquire(blocking=False):  # the usual case: one calling thread
            wait = -1.0 if deadline is None else max(0.0, deadline - time.monotonic())
            if not lock.acquire(timeout=wait):
                return None
        try:
            batch = self._batch
            if not batch:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                taken = self._queue.get_many(self._batch_size, remaining)
                if not isinstance(taken, list):
                    return taken
                batch.extend(taken)
            record, progress = batch.popleft()
            return record, progress, progress.deliver(record.sequence_number)
        finally:
            lock.release()

    def _acknowledge_held(self) -> None:
        while self._held:
            _thread, (progress, token) = self._held.popitem()
            progress.ack(token)


def _age(timestamp: dt.datetime) -> float:
    return max(0.0, time.time() - timestamp.timestamp())
