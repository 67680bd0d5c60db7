"""``process()``'s spans: each handler call (each batch call) in a span of kind CONSUMER, when
``opentelemetry-api`` is importable (the ``otel`` extra).

The spans come from the global TracerProvider: until the application sets one (an SDK), nothing is
made and a call costs one look at the global provider. A span is named ``process <stream>`` and
carries the messaging attributes (:func:`record_attributes`); it is the current span while the
handler runs (the handler's own spans nest under it) and ends when the call does. A call that
raises (a timeout too) sets its span's status to ERROR, with ``error.type`` and the exception; so
does a batch call returning failed records. ``trace_context`` (a callable from a record to a carrier
such as ``{"traceparent": ...}``) gives the producer's context, read with the global propagator:
the parent of a record's span, a link of a batch's.

The trace and span IDs of the last failed call on a thread are kept for the :class:`~kinsumer.Failure`
the record may become (:meth:`Tracing.failed_span`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import ConfigError
from ..failure import describe
from ..record import Record
from .options import TraceContext, no_run_spans

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
except ImportError:  # the otel extra is not installed: no spans
    trace = None  # type: ignore[assignment]

__all__ = ["SYSTEM", "Tracing", "available", "batch_attributes", "record_attributes", "tracing_for"]

log = logging.getLogger("kinsumer.process")

#: ``messaging.system``: the semantic conventions register no value for Kinesis (``aws_sqs`` is SQS's, ``aws.sns``
#: SNS's, the newer spelling); the same as the metrics' (kinsumer.otel_metrics)
SYSTEM = "aws.kinesis"


def available() -> bool:
    """``opentelemetry-api`` is importable."""
    return trace is not None


def message_id(record: Record) -> str:
    """``messaging.message.id``: the sequence number, and ``:<sub-sequence number>`` for a KPL user record."""
    sub = record.sub_sequence_number
    return record.sequence_number if sub is None else f"{record.sequence_number}:{sub}"


def _common(stream: str, application: str, shard_id: str, attempt: int) -> dict[str, Any]:
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": stream,
        "messaging.consumer.group.name": application,
        "messaging.destination.partition.id": shard_id,
        "kinsumer.attempt": attempt,
    }


def record_attributes(record: Record, stream: str, application: str, attempt: int) -> dict[str, Any]:
    """The attributes of a span around a handler call on ``record`` (``attempt``: 1 for the first call)."""
    attributes = _common(stream, application, record.shard_id, attempt)
    attributes["messaging.message.id"] = message_id(record)
    return attributes


def batch_attributes(records: list[Record], stream: str, application: str, attempt: int) -> dict[str, Any]:
    """The attributes of a span around a batch handler call (``attempt``: that of its first record)."""
    attributes = _common(stream, application, records[0].shard_id if records else "", attempt)
    attributes["messaging.batch.message_count"] = len(records)
    return attributes


def tracing_for(
    stream: str, application: str, version: str, trace_context: TraceContext | None, *, per_run: bool = False
) -> Tracing | None:
    """The spans of a ``process()`` of ``stream`` by ``application`` (``per_run``: a span per run of a shard's
    records, unless ``trace_context`` is given); None when OpenTelemetry is not importable (then
    ``trace_context`` is refused: it would do nothing)."""
    if trace is not None:
        return Tracing(stream, application, version, trace_context, per_run)
    if trace_context is not None:
        rule = "needs opentelemetry-api (pip install 'pykinsumer[otel]'): without it no span is made"
        raise ConfigError("trace_context", rule, trace_context)
    return None


class Tracing:
    """Spans around one ``process()``'s handler calls (see the module's description)."""

    def __init__(
        self, stream: str, application: str, version: str, trace_context: TraceContext | None, per_run: bool = False
    ) -> None:
        """(Made by :func:`tracing_for`, with OpenTelemetry importable.) ``per_run``: a span per run of a
        shard's records rather than per call (:meth:`run`)."""
        self._per_run = per_run and trace_context is None  # a producer's context is a record's parent
        self._stream = stream
        self._application = application
        self._version = version
        self._trace_context = trace_context
        self._tracer: trace.Tracer | None = None  # the SDK's, once the application set a provider
        self._names: dict[str, str] = {}
        self._local = threading.local()
        self._warned = False
        trace.get_tracer_provider()  # a provider named by OTEL_PYTHON_TRACER_PROVIDER is set now

    def single(self, handler: Callable[[Record], Any]) -> Callable[..., Any]:
        """``handler`` as ``call(record, attempt=1)``: each call in a span, or, inside :meth:`run`, each
        first call in the run's span."""

        def call(record: Record, attempt: int = 1) -> Any:
            tracer = self._tracer or self._resolve()
            if tracer is None:
                return handler(record)
            run: _RunSpan | None = getattr(self._local, "run", None)
            if run is not None and attempt == 1:
                span = run.span or run.begin(tracer, record)
                run.count += 1
                try:
                    return handler(record)
                except BaseException as exc:
                    self._failed(span, exc, describe(exc), type(exc).__qualname__)
                    raise
            stream = record.stream or self._stream
            parent = None if self._trace_context is None else self._extract(record)
            attributes = record_attributes(record, stream, self._application, attempt)
            span = tracer.start_span(
                self._name(stream), parent, trace.SpanKind.CONSUMER, attributes,
                record_exception=False, set_status_on_exception=False,
            )  # fmt: skip
            token = otel_context.attach(trace.set_span_in_context(span, parent))
            try:
                return handler(record)
            except BaseException as exc:
                self._failed(span, exc, describe(exc), type(exc).__qualname__)
                raise
            finally:
                otel_context.detach(token)
                span.end()

        return call

    def run(self, shard_id: str) -> contextlib.AbstractContextManager[object]:
        """The context of a worker's run of ``shard_id``'s records (``handler_spans="run"``): the first calls
        of :meth:`single` in it share one span, begun at the first and current until the run ends. Records
        called again (a retry) get spans of their own, children of it."""
        if not self._per_run:
            return no_run_spans(shard_id)
        return _RunSpan(self, shard_id)

    def batch(self, handler: Callable[[list[Record]], Any]) -> Callable[..., Any]:
        """``handler`` as ``call(records, attempt=1)``, each call in a span linked to the records' contexts."""

        def call(records: list[Record], attempt: int = 1) -> Any:
            tracer = self._tracer or self._resolve()
            if tracer is None:
                return handler(records)
            stream = (records[0].stream if records else "") or self._stream
            links = None if self._trace_context is None else self._links(records)
            attributes = batch_attributes(records, stream, self._application, attempt)
            span = tracer.start_span(
                self._name(stream), None, trace.SpanKind.CONSUMER, attributes, links,
                record_exception=False, set_status_on_exception=False,
            )  # fmt: skip
            token = otel_context.attach(trace.set_span_in_context(span))
            try:
                result = handler(records)
            except BaseException as exc:
                self._failed(span, exc, describe(exc), type(exc).__qualname__)
                raise
            else:
                if isinstance(result, list | tuple | set | frozenset) and result:
                    why = f"the batch handler returned {len(result)} of {len(records)} records as failed"
                    self._failed(span, None, why, "ReportedFailed")
                return result
            finally:
                otel_context.detach(token)
                span.end()

        return call

    def failed_span(self) -> tuple[str | None, str | None]:
        """The trace and span IDs (hex) of the last failed call's span on this thread, forgotten once read;
        (None, None) if it made none."""
        ids: tuple[str | None, str | None] = getattr(self._local, "failed", (None, None))
        self._local.failed = (None, None)
        return ids

    def _resolve(self) -> trace.Tracer | None:
        """The tracer once the application has set a TracerProvider; None until then (no span).

        Read through the API's global (set once, never unset): ``get_tracer_provider()`` would also look at
        the environment on each call, ten times the cost, and its proxy resolves to a no-op tracer."""
        provider = getattr(trace, "_TRACER_PROVIDER", None) if _GLOBAL_READABLE else trace.get_tracer_provider()
        if provider is None or isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
            return None
        self._tracer = provider.get_tracer("kinsumer", self._version)
        return self._tracer

    def _name(self, stream: str) -> str:
        name = self._names.get(stream)
        if name is None:
            name = self._names[stream] = f"process {stream}"
        return name

    def _failed(self, span: trace.Span, exc: BaseException | None, why: str, kind: str) -> None:
        span.set_status(trace.Status(trace.StatusCode.ERROR, why))
        span.set_attribute("error.type", kind)
        if exc is not None:
            span.record_exception(exc)
        context = span.get_span_context()
        if context.is_valid:
            self._local.failed = (trace.format_trace_id(context.trace_id), trace.format_span_id(context.span_id))

    def _extract(self, record: Record) -> otel_context.Context | None:
        """The producer's context carried by ``record`` (None: none, or ``trace_context`` failed on it)."""
        assert self._trace_context is not None
        try:
            carrier = self._trace_context(record)
            if carrier is None:
                return None
            if not isinstance(carrier, Mapping):
                raise TypeError(f"it returned a {type(carrier).__name__}, not a dict")
            return propagate.extract(carrier)
        except Exception as exc:  # noqa: BLE001 - consumption goes on, without a parent
            if not self._warned:
                self._warned = True
                log.warning("trace_context failed on a record of %s (%s): its span has no parent (logged once)",
                            record.shard_id, describe(exc))  # fmt: skip
            return None

    def _links(self, records: list[Record]) -> list[trace.Link]:
        """A link to each record's producer context (those that carry one)."""
        links = []
        for record in records:
            parent = self._extract(record)
            if parent is not None:
                context = trace.get_current_span(parent).get_span_context()
                if context.is_valid:
                    links.append(trace.Link(context))
        return links


class _RunSpan:
    """The span of one run of a shard's records on one thread (:meth:`Tracing.run`): begun at its first call."""

    __slots__ = ("count", "previous", "shard_id", "span", "token", "tracing")

    def __init__(self, tracing: Tracing, shard_id: str) -> None:
        self.tracing = tracing
        self.shard_id = shard_id
        self.span: trace.Span | None = None
        self.token: object = None
        self.count = 0
        self.previous: _RunSpan | None = None

    def __enter__(self) -> _RunSpan:
        local = self.tracing._local
        self.previous = getattr(local, "run", None)
        local.run = self
        return self

    def begin(self, tracer: trace.Tracer, record: Record) -> trace.Span:
        """The run's span, begun now (at its first call) and made the current one until the run ends."""
        tracing = self.tracing
        stream = record.stream or tracing._stream
        attributes = _common(stream, tracing._application, self.shard_id, 1)
        span = self.span = tracer.start_span(
            tracing._name(stream), None, trace.SpanKind.CONSUMER, attributes,
            record_exception=False, set_status_on_exception=False,
        )  # fmt: skip
        self.token = otel_context.attach(trace.set_span_in_context(span))
        return span

    def __exit__(self, *exc_info: object) -> None:
        self.tracing._local.run = self.previous
        span = self.span
        if span is not None:
            otel_context.detach(self.token)  # type: ignore[arg-type]
            span.set_attribute("messaging.batch.message_count", self.count)
            span.end()


# the API keeps its global provider in ``_TRACER_PROVIDER`` (None until set); if a version does not, the
# public getter is used
_GLOBAL_READABLE = trace is not None and hasattr(trace, "_TRACER_PROVIDER")
