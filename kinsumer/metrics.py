"""Ready-made :class:`~kinsumer.StatReceiver` implementations: a periodic log line, Prometheus, and
OpenTelemetry (:class:`OpenTelemetryStatReceiver`, from :mod:`kinsumer.otel_metrics`).

::

    from kinsumer.metrics import LoggingStatReceiver, PrometheusStatReceiver

    Kinsumer(..., config=Config(stats=LoggingStatReceiver(interval=60)))

    prom = PrometheusStatReceiver()  # needs: pip install 'pykinsumer[prometheus]'
    prom.serve(9108)  # http://127.0.0.1:9108/metrics
    Kinsumer(..., config=Config(stats=prom))

Both are thread-safe and cheap per call. Neither ever sees a record's payload.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .errors import ConfigError, KinsumerError, MissingDependency
from .health import Health, HealthServer
from .otel_metrics import OpenTelemetryStatReceiver
from .stats import StatReceiver

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client import CollectorRegistry

__all__ = ["LoggingStatReceiver", "OpenTelemetryStatReceiver", "PrometheusStatReceiver"]

_SHARDS_SHOWN = 20  # per-shard details in one summary line; the rest are counted, not listed


class _Window:
    """Counters over one span of time (an interval, or the receiver's whole life)."""

    def __init__(self) -> None:
        self.fetched: defaultdict[str, int] = defaultdict(int)
        self.delivered: defaultdict[str, int] = defaultdict(int)
        self.checkpoints = 0
        self.gained = 0
        self.lost = 0
        self.handoffs_clean = 0
        self.handoffs_timed_out = 0
        self.retried: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.malformed_aggregates = 0
        self.outside_range: defaultdict[bool, int] = defaultdict(int)  # by dropped
        self.latency_sum = 0.0
        self.latency_max = 0.0
        self.handled = 0
        self.handler_failures = 0
        self.handler_retries = 0
        self.dead_lettered: defaultdict[str, int] = defaultdict(int)  # by reason
        self.expired = 0
        self.hook_failures = 0
        self.timed_out = 0

    @property
    def empty(self) -> bool:
        """Nothing was counted."""
        counts = (
            self.checkpoints, self.gained, self.lost, self.handoffs_clean, self.handoffs_timed_out,
            self.handled, self.handler_failures, self.handler_retries, sum(self.dead_lettered.values()), self.expired,
            self.hook_failures, self.timed_out,
        )  # fmt: skip
        return not (
            self.fetched or self.delivered or self.retried or self.malformed_aggregates or self.outside_range
            or any(counts)
        )  # fmt: skip

    @property
    def delivered_count(self) -> int:
        return sum(self.delivered.values())

    @property
    def latency_avg(self) -> float:
        count = self.delivered_count
        return self.latency_sum / count if count else 0.0


class LoggingStatReceiver(StatReceiver):
    """Aggregates the consumer's statistics and logs one summary line per ``interval`` seconds.

    There is no background thread: the line is written by whichever call first notices that
    the interval has passed, and covers the events before that call. So nothing is logged
    while the consumer makes no calls at all (it makes several per second while running).
    The per-interval counters restart after each line; running totals are kept as well
    (:meth:`totals`).

    ``clock`` is the monotonic time source, replaceable for tests.
    """

    def __init__(
        self,
        interval: float = 60.0,
        logger: logging.Logger | None = None,
        level: int = logging.INFO,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(interval, bool) or not isinstance(interval, int | float) or not math.isfinite(interval):
            raise ConfigError("LoggingStatReceiver.interval", "must be a finite number of seconds", interval)
        if interval <= 0:
            raise ConfigError("LoggingStatReceiver.interval", "must be > 0 seconds", interval)
        self.interval = float(interval)
        self.logger = logger if logger is not None else logging.getLogger("kinsumer.metrics")
        self.level = level
        self._clock = clock
        self._lock = threading.Lock()
        self._window = _Window()
        self._total = _Window()
        self._lag: dict[str, int] = {}  # latest MillisBehindLatest of each shard owned
        self._age: dict[str, float] = {}  # latest age of the oldest record in hand of each shard owned (held)
        self._window_start = clock()

    # ----------------------------------------------------------------- StatReceiver

    def records_fetched(self, shard_id: str, count: int, millis_behind_latest: int | None) -> None:
        now = self._clock()
        with self._lock:
            line = self._roll(now)
            self._window.fetched[shard_id] += count
            self._total.fetched[shard_id] += count
            if millis_behind_latest is not None:
                self._lag[shard_id] = millis_behind_latest
        self._emit(line)

    def record_delivered(self, shard_id: str, latency_seconds: float) -> None:
        now = self._clock()
        with self._lock:
            line = self._roll(now)
            for w in (self._window, self._total):
                w.delivered[shard_id] += 1
                w.latency_sum += latency_seconds
                w.latency_max = max(w.latency_max, latency_seconds)
        self._emit(line)

    def checkpoint_written(self, shard_id: str) -> None:
        now = self._clock()
        with self._lock:
            line = self._roll(now)
            self._window.checkpoints += 1
            self._total.checkpoints += 1
        self._emit(line)

    def shard_gained(self, shard_id: str) -> None:
        now = self._clock()
        with self._lock:
            line = self._roll(now)
            self._window.gained += 1
            self._total.gained += 1
        self._emit(line)

    def shard_lost(self, shard_id: str) -> None:
        now = self._clock()
        with self._lock:
            line = self._roll(now)
            self._window.lost += 1
            self._total.lost += 1
            self._lag.pop(shard_id, None)
            self._age.pop(shard_id, None)
        self._emit(line)

    def record_age(self, shard_id: str, oldest_seconds: float | None) -> None:
        now = self._clock()
        with self._lock:
            line = self._roll(now)
            if oldest_seconds is None:
                self._age.pop(shard_id, None)
            else:
                self._age[shard_id] = oldest_seconds
        self._emit(line)

    def handoff(self, shard_id: str, seconds: float, clean: bool) -> None:
        now = self._clock()
        with self._lock:
            line = self._roll(now)
            for w in (self._window, self._total):
                if clean:
                    w.handoffs_clean += 1
                else:
                    w.handoffs_timed_out += 1
        self._emit(line)

    def error_retried(self, operation: str, error: str) -> None:
        now = self._clock()
        with self._lock:
            line = self._roll(now)
            self._window.retried[(operation, error)] += 1
            self._total.retried[(operation, error)] += 1
        self._emit(line)

    def malformed_aggregates(self, shard_id: str, count: int) -> None:
        now = self._clock()
        with self._lock:
            line = self._roll(now)
            self._window.malformed_aggregates += count
            self._total.malformed_aggregates += count
        self._emit(line)

    def outside_range(self, shard_id: str, count: int, dropped: bool) -> None:
        def add(window: _Window) -> None:
            window.outside_range[dropped] += count

        self._count(add)

    def record_handled(self, shard_id: str, seconds: float) -> None:
        self._count(lambda w: setattr(w, "handled", w.handled + 1))

    def handler_failed(self, shard_id: str, error: str) -> None:
        self._count(lambda w: setattr(w, "handler_failures", w.handler_failures + 1))

    def handler_retried(self, shard_id: str) -> None:
        self._count(lambda w: setattr(w, "handler_retries", w.handler_retries + 1))

    def dead_lettered(self, shard_id: str, reason: str) -> None:
        self._count(lambda w: w.dead_lettered.__setitem__(reason, w.dead_lettered[reason] + 1))

    def record_expired(self, shard_id: str, age_seconds: float) -> None:
        self._count(lambda w: setattr(w, "expired", w.expired + 1))

    def hook_failed(self, shard_id: str, hook: str, error: str) -> None:
        self._count(lambda w: setattr(w, "hook_failures", w.hook_failures + 1))

    def handler_timed_out(self, shard_id: str, timeout: float) -> None:
        self._count(lambda w: setattr(w, "timed_out", w.timed_out + 1))

    def _count(self, add: Callable[[_Window], object]) -> None:
        now = self._clock()
        with self._lock:
            line = self._roll(now)
            add(self._window)
            add(self._total)
        self._emit(line)

    # ----------------------------------------------------------------- reading

    def summary(self) -> str:
        """The line that would be logged now: the current interval so far, and the totals."""
        with self._lock:
            return self._format(self._clock() - self._window_start)

    def totals(self) -> dict[str, Any]:
        """Running totals since construction (copies; safe to keep and modify).

        Keys: ``records_fetched`` and ``records_delivered`` ({shard: count}),
        ``millis_behind_latest`` ({shard: ms}, shards currently owned), ``record_age_seconds`` ({shard:
        seconds}, the age of the oldest record in hand of each shard owned that holds one), ``checkpoints_written``,
        ``shards_gained``, ``shards_lost``, ``handoffs_clean``, ``handoffs_timed_out``,
        ``errors_retried`` ({(operation, error): count}), ``malformed_aggregates``, ``outside_range``
        ({"delivered": count, "dropped": count}: user records of KPL aggregates outside their shard's range),
        ``delivery_latency_avg_seconds``, ``delivery_latency_max_seconds``, and ``process()``'s
        ``records_handled``, ``handler_failures``, ``handler_retries``, ``dead_lettered`` ({reason: count}),
        ``records_expired``, ``handler_timeouts`` and ``hook_failures``.
        """
        with self._lock:
            t = self._total
            return {
                "records_fetched": dict(t.fetched),
                "records_delivered": dict(t.delivered),
                "millis_behind_latest": dict(self._lag),
                "record_age_seconds": dict(self._age),
                "checkpoints_written": t.checkpoints,
                "shards_gained": t.gained,
                "shards_lost": t.lost,
                "handoffs_clean": t.handoffs_clean,
                "handoffs_timed_out": t.handoffs_timed_out,
                "errors_retried": dict(t.retried),
                "malformed_aggregates": t.malformed_aggregates,
                "outside_range": {("dropped" if k else "delivered"): v for k, v in t.outside_range.items()},
                "delivery_latency_avg_seconds": t.latency_avg,
                "delivery_latency_max_seconds": t.latency_max,
                "records_handled": t.handled,
                "handler_failures": t.handler_failures,
                "handler_retries": t.handler_retries,
                "dead_lettered": dict(t.dead_lettered),
                "records_expired": t.expired,
                "hook_failures": t.hook_failures,
                "handler_timeouts": t.timed_out,
            }

    def flush(self) -> None:
        """The consumer stopped: log the interval so far (if anything happened in it), then restart it."""
        with self._lock:
            now = self._clock()
            line = None if self._window.empty else self._format(now - self._window_start)
            self._window = _Window()
            self._window_start = now
        self._emit(line)

    # ----------------------------------------------------------------- the interval

    def _roll(self, now: float) -> str | None:
        """If the interval has passed: the line closing it (counters reset), else None.

        Call with the lock held, before counting the event (it belongs to the next interval).
        """
        elapsed = now - self._window_start
        if elapsed < self.interval:
            return None
        line = self._format(elapsed)
        self._window = _Window()
        self._window_start = now
        return line

    def _emit(self, line: str | None) -> None:
        # outside the lock: a slow handler must not stall the other threads' counting
        if line is not None:
            self.logger.log(self.level, "%s", line)

    def _format(self, elapsed: float) -> str:
        """One logfmt-style line. Call with the lock held."""
        w, t = self._window, self._total
        parts = [
            f"kinsumer stats interval_s={elapsed:.1f}",
            f"fetched={sum(w.fetched.values())}",
            f"delivered={w.delivered_count}",
            f"fetched_total={sum(t.fetched.values())}",
            f"delivered_total={t.delivered_count}",
            f"checkpoints={w.checkpoints}",
            f"shards_owned={t.gained - t.lost}",
            f"shards_gained={w.gained}",
            f"shards_lost={w.lost}",
            f"handoffs_clean={w.handoffs_clean}",
            f"handoffs_timed_out={w.handoffs_timed_out}",
            f"latency_avg_s={w.latency_avg:.3f}",
            f"latency_max_s={w.latency_max:.3f}",
            f"max_lag_ms={max(self._lag.values(), default=0)}",
            f"max_record_age_s={max(self._age.values(), default=0.0):.1f}",
            f"errors_retried={sum(w.retried.values())}",
        ]
        if t.malformed_aggregates:
            parts.append(f"malformed_aggregates={w.malformed_aggregates}")
        if t.outside_range:
            parts.append(f"outside_range={w.outside_range[False]}")
            parts.append(f"outside_range_dropped={w.outside_range[True]}")
        if t.handled:
            parts.append(f"handled={w.handled}")
        if t.handler_failures or t.dead_lettered:
            parts.append(f"handler_failures={w.handler_failures}")
            parts.append(f"handler_retries={w.handler_retries}")
            parts.append(f"dead_lettered={sum(w.dead_lettered.values())}")
        if t.expired:
            parts.append(f"records_expired={w.expired}")
        if t.timed_out:
            parts.append(f"handler_timeouts={w.timed_out}")
        if t.hook_failures:
            parts.append(f"hook_failures={w.hook_failures}")
        parts.extend(f"retried[{op}/{err}]={n}" for (op, err), n in sorted(w.retried.items()))
        shards = sorted(set(w.fetched) | set(w.delivered) | set(self._lag))
        for shard in shards[:_SHARDS_SHOWN]:
            lag = self._lag.get(shard)
            parts.append(
                f"shard[{shard}]=fetched:{w.fetched.get(shard, 0)},delivered:{w.delivered.get(shard, 0)},"
                f"lag_ms:{'-' if lag is None else lag}"
            )
        if len(shards) > _SHARDS_SHOWN:
            parts.append(f"shards_not_shown={len(shards) - _SHARDS_SHOWN}")
        return " ".join(parts)


# latency = now - the record's arrival in Kinesis: from a millisecond to a minute behind
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# a DynamoDB call: milliseconds, or seconds when botocore retries a throttled one
_CALL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# a handoff waits for acknowledgements up to handoff_timeout (10 s by default)
_HANDOFF_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0)


class PrometheusStatReceiver(StatReceiver):
    """Exposes the consumer's statistics as Prometheus metrics (needs ``pykinsumer[prometheus]``).

    The metrics live in ``registry``, a new :class:`prometheus_client.CollectorRegistry`
    unless given (so several receivers in one process never clash); see :attr:`registry`.
    Serve them with :meth:`serve` (an HTTP endpoint on 127.0.0.1 by default), or pass the
    registry to your own exposition. ``namespace`` replaces the ``kinsumer`` prefix of every
    metric name ("" for no prefix).
    """

    def __init__(self, registry: CollectorRegistry | None = None, namespace: str = "kinsumer") -> None:
        try:
            import prometheus_client  # noqa: PLC0415 - an optional dependency
        except ImportError as exc:
            raise MissingDependency("PrometheusStatReceiver", "the prometheus_client package", "prometheus") from exc
        from prometheus_client import Counter, Gauge, Histogram  # noqa: PLC0415

        self.registry: CollectorRegistry = registry if registry is not None else prometheus_client.CollectorRegistry()
        self.namespace = namespace
        ns, reg = namespace, self.registry
        counter = functools.partial(Counter, namespace=ns, registry=reg)
        self._fetched = counter("records_fetched", "Records returned by GetRecords", ["shard"])
        self._delivered = counter("records_delivered", "Records handed over by next*() or process*()", ["shard"])
        self._handled = counter(
            "records_handled", "Records process*()'s handler did (a call that returned; a batch's each)", ["shard"]
        )
        self._handler_seconds = Histogram(
            "handler_seconds",
            "Duration of process*()'s handler calls that did a record (a batch call: once per record it did)",
            namespace=ns,
            registry=reg,
            buckets=_LATENCY_BUCKETS,
        )
        self._latency = Histogram(
            "delivery_latency_seconds",
            "Time from a record's arrival in Kinesis to its delivery by next*()",
            namespace=ns,
            registry=reg,
            buckets=_LATENCY_BUCKETS,
        )
        self._behind = Gauge(
            "millis_behind_latest",
            "MillisBehindLatest of the last GetRecords on each shard this client owns",
            ["shard"],
            namespace=ns,
            registry=reg,
        )
        self._age = Gauge(
            "record_age_seconds",
            "Age of the oldest record this client holds and has not finished with, per shard owned (0: none)",
            ["shard"],
            namespace=ns,
            registry=reg,
        )
        self._checkpoints = counter("checkpoints", "Checkpoints written to DynamoDB", ["shard"])
        self._owned = Gauge("shards_owned", "Shards this client currently owns", namespace=ns, registry=reg)
        self._handoffs = counter("handoffs", "Shard handoffs by outcome (clean or timed_out)", ["outcome"])
        self._handoff_seconds = Histogram(
            "handoff_seconds",
            "Duration of shard handoffs",
            namespace=ns,
            registry=reg,
            buckets=_HANDOFF_BUCKETS,
        )
        self._retried = counter(
            "errors_retried", "Transient errors retried, by AWS operation and error code", ["operation", "error"]
        )
        self._abandoned = counter(
            "errors_abandoned",
            "Transient errors not retried (the client was stopping, or the call's time was up), by operation and error",
            ["operation", "error"],
        )
        self._dynamodb_calls = counter(
            "dynamodb_calls",
            "DynamoDB calls on the application's tables, by operation, table (clients, checkpoints, metadata) and "
            "outcome (ok, or the error code)",
            ["operation", "table", "outcome"],
        )
        self._dynamodb_seconds = Histogram(
            "dynamodb_call_seconds",
            "Duration of DynamoDB calls on the application's tables (botocore's own retries included), by operation",
            ["operation"],
            namespace=ns,
            registry=reg,
            buckets=_CALL_BUCKETS,
        )
        self._malformed = counter(
            "malformed_aggregates",
            "Records that started like KPL aggregates but were not valid ones (delivered as they are)",
            ["shard"],
        )
        self._outside_range = counter(
            "outside_range",
            "User records of KPL aggregates whose hash keys are outside their shard's range, by shard and outcome "
            "(delivered or dropped)",
            ["shard", "outcome"],
        )
        self._handler_failures = counter("handler_failures", "Calls of process()'s handler that raised", ["shard"])
        self._handler_retries = counter("handler_retries", "Records process() called its handler again for", ["shard"])
        self._dead_lettered = counter(
            "dead_lettered",
            "Records handed to process()'s dead-letter sink, by reason (raised, crashed, expired, timeout or decode)",
            ["shard", "reason"],
        )
        self._expired = counter(
            "records_expired",
            "Records older than process()'s max_record_age when their turn came (sent to the sink, never handled)",
            ["shard"],
        )
        self._hook_failures = counter(
            "hook_failures",
            "Calls of process()'s lifecycle hooks that raised, by hook (on_assigned, on_revoked, on_lost)",
            ["shard", "hook"],
        )
        self._timeouts = counter(
            "handler_timeouts", "Calls of process()'s handler that ran longer than its timeout", ["shard"]
        )
        self._start_http_server = prometheus_client.start_http_server
        self._server_lock = threading.Lock()
        self._server: _PrometheusServer | HealthServer | None = None

    # ----------------------------------------------------------------- StatReceiver

    def records_fetched(self, shard_id: str, count: int, millis_behind_latest: int | None) -> None:
        self._fetched.labels(shard_id).inc(count)
        if millis_behind_latest is not None:
            self._behind.labels(shard_id).set(millis_behind_latest)

    def record_delivered(self, shard_id: str, latency_seconds: float) -> None:
        self._delivered.labels(shard_id).inc()
        self._latency.observe(latency_seconds)

    def record_handled(self, shard_id: str, seconds: float) -> None:
        self._handled.labels(shard_id).inc()
        self._handler_seconds.observe(seconds)

    def checkpoint_written(self, shard_id: str) -> None:
        self._checkpoints.labels(shard_id).inc()

    def shard_gained(self, shard_id: str) -> None:
        self._owned.inc()

    def shard_lost(self, shard_id: str) -> None:
        self._owned.dec()
        # no stale lag for a shard read elsewhere now; older prometheus_client versions raise
        # KeyError for a series never set (the shard was lost before its first fetch)
        with contextlib.suppress(KeyError):
            self._behind.remove(shard_id)
        with contextlib.suppress(KeyError):
            self._age.remove(shard_id)

    def handoff(self, shard_id: str, seconds: float, clean: bool) -> None:
        self._handoffs.labels("clean" if clean else "timed_out").inc()
        self._handoff_seconds.observe(seconds)

    def error_retried(self, operation: str, error: str) -> None:
        self._retried.labels(operation, error).inc()

    def error_abandoned(self, operation: str, error: str) -> None:
        self._abandoned.labels(operation, error).inc()

    def malformed_aggregates(self, shard_id: str, count: int) -> None:
        self._malformed.labels(shard_id).inc(count)

    def outside_range(self, shard_id: str, count: int, dropped: bool) -> None:
        self._outside_range.labels(shard_id, "dropped" if dropped else "delivered").inc(count)

    def handler_failed(self, shard_id: str, error: str) -> None:
        self._handler_failures.labels(shard_id).inc()

    def handler_retried(self, shard_id: str) -> None:
        self._handler_retries.labels(shard_id).inc()

    def dead_lettered(self, shard_id: str, reason: str) -> None:
        self._dead_lettered.labels(shard_id, reason).inc()

    def record_expired(self, shard_id: str, age_seconds: float) -> None:
        self._expired.labels(shard_id).inc()

    def hook_failed(self, shard_id: str, hook: str, error: str) -> None:
        self._hook_failures.labels(shard_id, hook).inc()

    def handler_timed_out(self, shard_id: str, timeout: float) -> None:
        self._timeouts.labels(shard_id).inc()

    def record_age(self, shard_id: str, oldest_seconds: float | None) -> None:
        self._age.labels(shard_id).set(0.0 if oldest_seconds is None else oldest_seconds)

    def dynamodb_call(self, operation: str, table: str, seconds: float, error: str | None) -> None:
        self._dynamodb_calls.labels(operation, table, error or "ok").inc()
        self._dynamodb_seconds.labels(operation).observe(seconds)

    def flush(self) -> None:
        """The consumer stopped: it owns no shard, so no lag or age series is left standing (counters stay)."""
        self._behind.clear()
        self._age.clear()

    # ----------------------------------------------------------------- exposition

    def serve(self, port: int = 0, addr: str = "127.0.0.1", *, health: Callable[[], Health] | None = None) -> int:
        """Serve this registry at ``http://addr:port/metrics`` from a daemon thread; the port bound.

        ``port=0`` picks a free port. Binds to the loopback interface unless ``addr`` says
        otherwise (``"0.0.0.0"`` for every interface). With ``health`` (a Kinsumer's
        :meth:`~kinsumer.Kinsumer.health`), the same port answers ``/healthz`` and ``/readyz`` too,
        for Kubernetes probes (see :class:`~kinsumer.health.HealthServer`). Stop it with :meth:`close`.
        """
        with self._server_lock:
            if self._server is not None:
                raise KinsumerError(f"already serving on port {self._server.port}; call close() first")
            if health is None:
                self._server = _PrometheusServer(*self._start_http_server(port, addr=addr, registry=self.registry))
            else:
                self._server = HealthServer(health, port, addr, registry=self.registry)
            return self._server.port

    def close(self) -> None:
        """Stop the HTTP server started by :meth:`serve` and free its port. Idempotent."""
        with self._server_lock:
            server, self._server = self._server, None
        if server is not None:
            server.close()


class _PrometheusServer:
    """prometheus_client's own server and its thread, closed as a :class:`~kinsumer.health.HealthServer` is."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self._server, self._thread = server, thread

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    @property
    def address(self) -> str:
        return str(self._server.server_address[0])

    def close(self, timeout: float = 5.0) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout)
