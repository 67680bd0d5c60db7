"""What the background threads of one Kinsumer share, and how they report failures."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import botocore.exceptions

from ..aws.error_codes import error_code, is_not_found, is_transient, to_kinsumer_error
from ..aws.retry import counted, retry_call
from ..aws.tables import Tables, ensure_tables_ready
from ..config import Config
from ..delivery.delivery import Delivery
from ..errors import KinsumerError, StreamNotFound, TableNotFound
from ..reading.reader import ReaderSettings
from ..stats import GuardedStats
from .liveness import Liveness
from .membership import Membership
from .streams import StreamScope

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kinesis import KinesisClient

__all__ = ["Runtime"]

log = logging.getLogger("kinsumer")
T = TypeVar("T")

_KINESIS_OPERATIONS = frozenset(
    {"GetRecords", "GetShardIterator", "ListShards", "DescribeStreamSummary", "DescribeStream"}
)


@attrs.define(eq=False)
class Runtime:
    """The clients, names, delivery and failure channel of one running Kinsumer."""

    kinesis: KinesisClient
    dynamodb: DynamoDBClient
    #: The streams this client lists, in its order (see :mod:`.streams`).
    streams: tuple[StreamScope, ...]
    tables: Tables
    config: Config
    client_id: str
    client_name: str
    delivery: Delivery
    stats: GuardedStats
    #: Called once with the first fatal error; the owner stops everything.
    on_fatal: Callable[[KinsumerError], None]
    #: Tells this run apart from another process that uses the same client_id (see identity).
    instance: str = attrs.field(factory=lambda: uuid.uuid4().hex)
    #: Wakes the coordinator to refresh the shard cache now (a shard finished).
    request_refresh: Callable[[], None] = attrs.field(default=lambda: None)
    #: This client's heartbeat chain (the coordinator heartbeats; leases read it).
    liveness: Liveness = attrs.field(
        default=attrs.Factory(lambda self: Liveness(self.max_age), takes_self=True), init=False
    )
    #: The other clients as of the coordinator's last scan.
    membership: Membership = attrs.field(
        default=attrs.Factory(lambda self: Membership(frozenset(), {}, int(self.max_age * 1000)), takes_self=True),
        init=False,
    )
    #: Set once this client leaves (a stop): shards it could not release are left to age.
    leaving: threading.Event = attrs.field(factory=threading.Event, init=False)
    _fatal_lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)
    fatal: KinsumerError | None = attrs.field(default=None, init=False)

    @property
    def stream_names(self) -> tuple[str, ...]:
        return tuple(scope.name for scope in self.streams)

    @property
    def stream_name(self) -> str:
        """The stream, or the streams (comma-separated): for messages."""
        return ", ".join(self.stream_names)

    @property
    def max_age(self) -> float:
        return self.config.effective_client_record_max_age

    @property
    def reader_settings(self) -> ReaderSettings:
        cfg = self.config
        return ReaderSettings(
            cfg.throttle_delay, cfg.max_records_per_call, cfg.idle_poll_interval, cfg.effective_max_idle_poll_interval
        )

    def call(self, fn: Callable[[], T], operation: str, **kwargs: object) -> T:
        """``fn()`` with transient faults retried (see :func:`retry_call`)."""
        return retry_call(fn, operation=operation, stats=self.stats, **kwargs)  # type: ignore[arg-type]

    def call_until(
        self, deadline: float, stop: threading.Event | None = None
    ) -> Callable[[Callable[[], Any], str], Any]:
        """A :meth:`call` that retries transient faults until ``deadline`` (``time.monotonic()``) only;
        with ``stop``, its waits end once it is set (raising :class:`~kinsumer.aws.retry.Stopped`)."""

        def call(fn: Callable[[], Any], operation: str) -> Any:
            if stop is None:
                return self.call(fn, operation, deadline=deadline)
            return self.call(fn, operation, deadline=deadline, sleep=stop.wait, should_stop=stop.is_set)

        return call

    def retry_later(self, exc: BaseException, what: str) -> bool:
        """A call that failed past its retry deadline: True (counted and logged) if it is transient
        and will be tried again on the next round; False if it is not, for the caller to raise."""
        if not is_transient(exc):
            return False
        if not counted(exc):  # retry_call counts what its deadline ended
            self.stats.error_retried(getattr(exc, "operation_name", None) or what, error_code(exc))
        log.warning("%s failed (%s); trying again", what, error_code(exc))
        return True

    def fail(self, exc: BaseException, where: str) -> None:
        """Record a failure that retrying cannot fix and have the Kinsumer stop."""
        error = self.classify(exc, where)
        with self._fatal_lock:
            if self.fatal is not None:
                return
            self.fatal = error
        log.error("kinsumer stops: %s", error, exc_info=exc if error is not exc else None)
        self.on_fatal(error)

    def classify(self, exc: BaseException, where: str) -> KinsumerError:
        """Turn a background exception into the KinsumerError the caller will see."""
        if isinstance(exc, botocore.exceptions.ClientError) and is_not_found(exc):
            if exc.operation_name in _KINESIS_OPERATIONS:
                return _chain(StreamNotFound(self.stream_name), exc)
            try:
                ensure_tables_ready(self.dynamodb, self.tables)
            except TableNotFound as missing:
                return _chain(missing, exc)
            except Exception:  # noqa: BLE001 - the original error is the one to report
                pass
        return to_kinsumer_error(exc, where)


def _chain(error: KinsumerError, cause: BaseException) -> KinsumerError:
    error.__cause__ = cause
    return error
