"""A :class:`~kinsumer.StatReceiver` that records kinsumer's events as OpenTelemetry metrics.

::

    from kinsumer.otel_metrics import OpenTelemetryStatReceiver  # pip install 'pykinsumer[otel]'

    stats = OpenTelemetryStatReceiver("orders", "billing")
    Kinsumer(stream_name="orders", application_name="billing", client_name="host-1", config=Config(stats=stats))

It needs only ``opentelemetry-api``: the SDK, its readers and exporters are the application's
choice. It records through the global ``MeterProvider`` (``opentelemetry.metrics.get_meter_provider()``
at construction) unless ``meter_provider=`` is given; with no SDK configured every instrument is a
no-op. Its meter is named ``kinsumer``.

**Semantic conventions.** OpenTelemetry's messaging conventions (development status) name one
metrics that fit a Kinesis consumer: ``messaging.client.consumed.messages`` ("messages delivered to
the application"), counted here per record ``next*()`` or ``process*()`` hands over, and
``messaging.process.duration``, the duration of ``process*()``'s handler calls that did a record (a
sample, as the latency). ``messaging.client.operation.duration`` (a receive call's) does not fit: a
GetRecords call is not the application's. Every other instrument is named ``kinsumer.*``. The
attributes follow the conventions:

- ``messaging.system``: ``aws.kinesis``. The conventions register no value for Kinesis (they
  have ``aws_sqs`` and, newer and dotted, ``aws.sns``); a custom value is allowed, and this one
  follows the newer AWS spelling.
- ``messaging.destination.name``: the stream (low cardinality, so the conventions want it).
  ``aws.kinesis.stream_name`` (the AWS registry's attribute for a request's stream) is not
  added: it would repeat the same value.
- ``messaging.consumer.group.name``: the application (the clients of one application share a
  stream's shards as a Kafka consumer group shares a topic's partitions).
- ``messaging.destination.partition.id``: the shard ID.
- ``messaging.operation.name``: ``receive``, on ``messaging.client.consumed.messages`` only
  (where the conventions require it).
- ``error.type``: the error code (an AWS error's, or an exception's type name).
- ``rpc.method``: the AWS operation of a retried or abandoned error (the name the botocore
  instrumentation gives its spans' operation).

DynamoDB calls follow the database conventions instead: ``db.client.operation.duration`` (a histogram
in seconds, its count the calls) with ``db.system.name`` ``aws.dynamodb`` (the registered value),
``db.operation.name`` (``PutItem``...), ``db.collection.name`` (the table's name:
``<application>_clients``, ``<application>_checkpoints`` or ``<application>_metadata``),
``messaging.consumer.group.name`` (the application) and ``error.type`` when the call failed (the error
code, as ``ConditionalCheckFailedException``: a lease or a checkpoint another client holds, which the
protocol expects now and then; an exception's type name when no answer came).

Durations and ages are in seconds (``s``), as OpenTelemetry recommends: the lag gauge is
``MillisBehindLatest`` / 1000.

**Cost.** An OpenTelemetry SDK spends 10-20 µs of CPU on each synchronous measurement, more than
kinsumer spends on a record. So the per-record and per-call events are summed here, under a lock,
and read by the SDK when it collects (observable counters and gauges): records fetched, records
delivered and handled, the lag and the oldest record's age; and the receiver takes ``process()``'s
records a run at a time (``records_delivered``, ``records_handled``: one call per up to 64 records).
The delivery latency and handler duration histograms record one sample in every ``latency_sample``
records of each shard (1024 by default; 1 records them all), and one at least every second while
records flow: the run holding a record numbered a multiple of it (or the first a second after the
last sample) gives its first record's latency (its oldest) and its calls' mean duration. A sample
costs the SDK about 8 µs; one in 1024 records keeps that near nothing at any rate. Their quantiles
are those of a systematic sample, their counts are not record counts (those are
``messaging.client.consumed.messages`` and ``kinsumer.records.handled``). The rarer events
(failures, handoffs, checkpoints, retries, shards gained and lost) go to synchronous instruments as
they happen.

The receiver gets shard IDs only; a stream other than the application's first reports its shards
as ``<stream>/<shard ID>`` (stream names and shard IDs hold no ``/``), so the stream of each
shard is known from its ID and ``stream``, the application's first stream.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ._version import __version__
from .errors import ConfigError, MissingDependency
from .stats import StatReceiver

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

__all__ = ["OpenTelemetryStatReceiver"]

SYSTEM = "aws.kinesis"

#: a shard's histograms get a sample at least this often (seconds) while records flow, whatever latency_sample
_SAMPLE_AGE = 1.0

# latency = now - the record's arrival in Kinesis: from a millisecond to a minute behind
_LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0]
# a DynamoDB call: milliseconds, or seconds when botocore retries a throttled one
_CALL_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]
# a handoff waits for acknowledgements up to handoff_timeout (10 s by default)
_HANDOFF_BUCKETS = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0]


class _Tally:
    """A count of per-record events, added a run at a time (a record ``next*()`` hands over is a run of one),
    and when the last sample of its histogram was taken."""

    __slots__ = ("lock", "sampled_at", "total")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.total = 0
        self.sampled_at = -math.inf

    def add(self, count: int, sample: int, now: float) -> bool:
        """Add ``count`` events (at ``now``, monotonic seconds); True when this run gives a sample: one of its
        events is numbered (from 0) a multiple of ``sample``, or the last sample is a second old or more."""
        with self.lock:
            before = self.total
            self.total = before + count
            due = (before - 1) // sample != (before + count - 1) // sample or now - self.sampled_at >= _SAMPLE_AGE
            if due:
                self.sampled_at = now
        return due

    def read(self) -> int:
        """The events so far."""
        return self.total


class _Shard:
    """One shard's attributes (made once) and its sums since the receiver began."""

    __slots__ = ("attributes", "consumed", "delivered", "fetched", "handled", "processed", "stream_attributes")

    def __init__(self, attributes: dict[str, str], stream_attributes: dict[str, str]) -> None:
        self.attributes = attributes
        self.consumed = {**attributes, "messaging.operation.name": "receive"}
        self.processed = {**attributes, "messaging.operation.name": "process"}
        self.stream_attributes = stream_attributes  # the stream's, without the shard
        self.fetched = 0
        self.delivered = _Tally()
        self.handled = _Tally()


_Read = Callable[[_Shard], tuple[int, dict[str, str]]]


class OpenTelemetryStatReceiver(StatReceiver):
    """Records the consumer's statistics as OpenTelemetry metrics (needs ``pykinsumer[otel]``).

    ``stream`` and ``application`` are the Kinsumer's (its first stream if it reads several):
    they become every instrument's ``messaging.destination.name`` and
    ``messaging.consumer.group.name``. ``meter_provider`` replaces the global one;
    ``latency_sample`` is how many records of a shard make one sample of the latency and handler duration
    histograms (and a shard with records flowing gives one a second at least, by ``clock``, monotonic seconds).
    Thread-safe; the module's description lists the instruments' names and why.
    """

    def __init__(
        self,
        stream: str,
        application: str,
        *,
        meter_provider: MeterProvider | None = None,
        latency_sample: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        try:
            from opentelemetry import metrics  # noqa: PLC0415 - an optional dependency
        except ImportError as exc:
            raise MissingDependency("OpenTelemetryStatReceiver", "the opentelemetry-api package", "otel") from exc

        if isinstance(latency_sample, bool) or not isinstance(latency_sample, int) or latency_sample < 1:
            raise ConfigError("OpenTelemetryStatReceiver.latency_sample", "must be an int >= 1", latency_sample)
        self.stream, self.application = stream, application
        self.latency_sample = latency_sample
        self._clock = clock
        provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
        meter = provider.get_meter("kinsumer", __version__)
        self._lock = threading.Lock()
        self._shards: dict[str, _Shard] = {}
        self._streams: dict[str, dict[str, str]] = {}  # each stream's attributes
        self._lag: dict[str, float] = {}  # seconds behind the stream's tip, per shard owned
        self._age: dict[str, float] = {}  # the oldest record's age in seconds, per shard owned
        self._errors: dict[tuple[str, str, str], dict[str, str]] = {}  # (which, operation, error): attributes

        meter.create_observable_counter(
            "messaging.client.consumed.messages", [self._observe_consumed], "{message}",
            "Records next*() handed over to the application",
        )  # fmt: skip
        meter.create_observable_counter(
            "kinsumer.records.handled", [self._observe_handled], "{record}",
            "Records process*()'s handler did (its call returned; a batch call counts each record it did)",
        )  # fmt: skip
        self._process_duration = meter.create_histogram(
            "messaging.process.duration", "s",
            "Duration of process*()'s handler calls that did a record (a sample)",
            explicit_bucket_boundaries_advisory=_LATENCY_BUCKETS,
        )  # fmt: skip
        meter.create_observable_counter(
            "kinsumer.records.fetched", [self._observe_fetched], "{record}",
            "Records returned by GetRecords (or a fan-out event)",
        )  # fmt: skip
        meter.create_observable_gauge(
            "kinsumer.shard.lag", [self._observe_lag], "s",
            "MillisBehindLatest of the last GetRecords answer (or fan-out event) of each shard owned, in seconds",
        )  # fmt: skip
        meter.create_observable_gauge(
            "kinsumer.shard.oldest_record.age", [self._observe_age], "s",
            "Age of the oldest record this client holds and has not finished with, per shard owned (0: none)",
        )  # fmt: skip
        self._latency = meter.create_histogram(
            "kinsumer.delivery.latency", "s",
            "Time from a record's arrival in Kinesis to its delivery by next*() (a sample)",
            explicit_bucket_boundaries_advisory=_LATENCY_BUCKETS,
        )  # fmt: skip
        self._checkpoints = meter.create_counter(
            "kinsumer.checkpoints", "{checkpoint}", "Checkpoints written to DynamoDB"
        )
        self._owned = meter.create_up_down_counter("kinsumer.shards.owned", "{shard}", "Shards this client owns")
        self._handoffs = meter.create_counter(
            "kinsumer.handoffs", "{handoff}", "Shard handoffs ended, by kinsumer.handoff.outcome (clean or timed_out)"
        )
        self._handoff_duration = meter.create_histogram(
            "kinsumer.handoff.duration", "s", "Duration of shard handoffs",
            explicit_bucket_boundaries_advisory=_HANDOFF_BUCKETS,
        )  # fmt: skip
        self._retried = meter.create_counter(
            "kinsumer.errors.retried", "{error}", "Transient AWS errors retried, by rpc.method and error.type"
        )
        self._abandoned = meter.create_counter(
            "kinsumer.errors.abandoned", "{error}",
            "Transient AWS errors not retried because the client was stopping or the call's time was up",
        )  # fmt: skip
        self._dynamodb = meter.create_histogram(
            "db.client.operation.duration", "s",
            "Duration of DynamoDB calls on the application's tables (botocore's own retries included)",
            explicit_bucket_boundaries_advisory=_CALL_BUCKETS,
        )  # fmt: skip
        self._malformed = meter.create_counter(
            "kinsumer.aggregates.malformed", "{record}",
            "Records that started like KPL aggregates but were not valid ones (delivered as they are)",
        )  # fmt: skip
        self._outside_range = meter.create_counter(
            "kinsumer.aggregates.outside_range", "{record}",
            "User records of KPL aggregates whose hash keys are outside their shard's range, by outcome "
            "(delivered or dropped)",
        )  # fmt: skip
        self._handler_failures = meter.create_counter(
            "kinsumer.handler.failures", "{call}", "Calls of process()'s handler that raised, by error.type"
        )
        self._handler_retries = meter.create_counter(
            "kinsumer.handler.retries", "{record}", "Records process() called its handler again for"
        )
        self._timeouts = meter.create_counter(
            "kinsumer.handler.timeouts", "{call}", "Calls of process()'s handler that ran longer than its timeout"
        )
        self._expired = meter.create_counter(
            "kinsumer.records.expired", "{record}",
            "Records older than process()'s max_record_age when their turn came (sent to the sink, never handled)",
        )  # fmt: skip
        self._dead_lettered = meter.create_counter(
            "kinsumer.records.dead_lettered", "{record}",
            "Records handed to process()'s dead-letter sink, by kinsumer.dead_letter.reason",
        )  # fmt: skip
        self._hook_failures = meter.create_counter(
            "kinsumer.hook.failures", "{call}", "Calls of process()'s lifecycle hooks that raised, by kinsumer.hook"
        )

    # ----------------------------------------------------------------- attributes

    def _shard(self, shard_id: str) -> _Shard:
        """``shard_id``'s record, made on first sight (``<stream>/<shard ID>`` for a stream not the first)."""
        shard = self._shards.get(shard_id)
        if shard is None:
            stream, _, bare = shard_id.rpartition("/")
            stream_attributes = self._stream(stream or self.stream)
            made = _Shard({**stream_attributes, "messaging.destination.partition.id": bare}, stream_attributes)
            with self._lock:
                shard = self._shards.setdefault(shard_id, made)
        return shard

    def _stream(self, stream: str) -> dict[str, str]:
        attributes = self._streams.get(stream)
        if attributes is None:
            made = {
                "messaging.system": SYSTEM,
                "messaging.destination.name": stream,
                "messaging.consumer.group.name": self.application,
            }
            with self._lock:
                attributes = self._streams.setdefault(stream, made)
        return attributes

    def _error(self, which: str, operation: str, error: str) -> dict[str, str]:
        key = (which, operation, error)
        attributes = self._errors.get(key)
        if attributes is None:
            made = {
                "messaging.system": SYSTEM,
                "messaging.consumer.group.name": self.application,
                "rpc.method": operation,
                "error.type": error,
            }
            with self._lock:
                attributes = self._errors.setdefault(key, made)
        return attributes

    # ----------------------------------------------------------------- StatReceiver: summed here

    def records_fetched(self, shard_id: str, count: int, millis_behind_latest: int | None) -> None:
        shard = self._shard(shard_id)
        with self._lock:
            shard.fetched += count
            if millis_behind_latest is not None:
                self._lag[shard_id] = millis_behind_latest / 1000.0

    def record_delivered(self, shard_id: str, latency_seconds: float) -> None:
        self.records_delivered(shard_id, 1, latency_seconds)

    def record_handled(self, shard_id: str, seconds: float) -> None:
        self.records_handled(shard_id, 1, seconds)

    def records_delivered(self, shard_id: str, count: int, latency_seconds: float) -> None:
        shard = self._shards.get(shard_id) or self._shard(shard_id)
        if shard.delivered.add(count, self.latency_sample, self._clock()):
            self._latency.record(latency_seconds, shard.attributes)

    def records_handled(self, shard_id: str, count: int, seconds: float) -> None:
        shard = self._shards.get(shard_id) or self._shard(shard_id)
        if shard.handled.add(count, self.latency_sample, self._clock()):
            self._process_duration.record(seconds, shard.processed)

    def record_age(self, shard_id: str, oldest_seconds: float | None) -> None:
        self._shard(shard_id)
        with self._lock:
            self._age[shard_id] = 0.0 if oldest_seconds is None else oldest_seconds

    def shard_lost(self, shard_id: str) -> None:
        self._owned.add(-1, self._shard(shard_id).stream_attributes)
        with self._lock:  # no stale gauges of a shard read elsewhere now
            self._lag.pop(shard_id, None)
            self._age.pop(shard_id, None)

    def flush(self) -> None:
        """The consumer stopped: it owns no shard, so no gauge series is left standing (counters stay)."""
        with self._lock:
            self._lag.clear()
            self._age.clear()

    # ----------------------------------------------------------------- StatReceiver: recorded as they come

    def shard_gained(self, shard_id: str) -> None:
        self._owned.add(1, self._shard(shard_id).stream_attributes)

    def checkpoint_written(self, shard_id: str) -> None:
        self._checkpoints.add(1, self._shard(shard_id).attributes)

    def handoff(self, shard_id: str, seconds: float, clean: bool) -> None:
        attributes = {**self._shard(shard_id).attributes, "kinsumer.handoff.outcome": "clean" if clean else "timed_out"}
        self._handoffs.add(1, attributes)
        self._handoff_duration.record(seconds, attributes)

    def error_retried(self, operation: str, error: str) -> None:
        self._retried.add(1, self._error("retried", operation, error))

    def error_abandoned(self, operation: str, error: str) -> None:
        self._abandoned.add(1, self._error("abandoned", operation, error))

    def malformed_aggregates(self, shard_id: str, count: int) -> None:
        self._malformed.add(count, self._shard(shard_id).attributes)

    def outside_range(self, shard_id: str, count: int, dropped: bool) -> None:
        outcome = "dropped" if dropped else "delivered"
        self._outside_range.add(count, {**self._shard(shard_id).attributes, "kinsumer.aggregates.outcome": outcome})

    def handler_failed(self, shard_id: str, error: str) -> None:
        self._handler_failures.add(1, {**self._shard(shard_id).attributes, "error.type": error})

    def handler_retried(self, shard_id: str) -> None:
        self._handler_retries.add(1, self._shard(shard_id).attributes)

    def handler_timed_out(self, shard_id: str, timeout: float) -> None:
        self._timeouts.add(1, self._shard(shard_id).attributes)

    def record_expired(self, shard_id: str, age_seconds: float) -> None:
        self._expired.add(1, self._shard(shard_id).attributes)

    def dead_lettered(self, shard_id: str, reason: str) -> None:
        self._dead_lettered.add(1, {**self._shard(shard_id).attributes, "kinsumer.dead_letter.reason": reason})

    def hook_failed(self, shard_id: str, hook: str, error: str) -> None:
        attributes = {**self._shard(shard_id).attributes, "kinsumer.hook": hook, "error.type": error}
        self._hook_failures.add(1, attributes)

    def dynamodb_call(self, operation: str, table: str, seconds: float, error: str | None) -> None:
        attributes = {
            "db.system.name": "aws.dynamodb",
            "db.operation.name": operation,
            "db.collection.name": f"{self.application}_{table}",
            "messaging.consumer.group.name": self.application,
        }
        if error is not None:
            attributes["error.type"] = error
        self._dynamodb.record(seconds, attributes)

    # ----------------------------------------------------------------- read by the SDK as it collects

    def _observe_consumed(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._observe_sums(lambda shard: (shard.delivered.read(), shard.consumed))

    def _observe_handled(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._observe_sums(lambda shard: (shard.handled.read(), shard.attributes))

    def _observe_fetched(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._observe_sums(lambda shard: (shard.fetched, shard.attributes))

    def _observe_sums(self, read: _Read) -> list[Observation]:
        from opentelemetry.metrics import Observation  # noqa: PLC0415 - imported at construction already

        with self._lock:
            sums = [read(shard) for shard in self._shards.values()]
        return [Observation(value, attributes) for value, attributes in sums]

    def _observe_lag(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._observe_gauge(self._lag)

    def _observe_age(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._observe_gauge(self._age)

    def _observe_gauge(self, values: dict[str, float]) -> list[Observation]:
        from opentelemetry.metrics import Observation  # noqa: PLC0415 - imported at construction already

        with self._lock:
            current = [(self._shards[shard_id].attributes, value) for shard_id, value in values.items()]
        return [Observation(value, attributes) for attributes, value in current]
