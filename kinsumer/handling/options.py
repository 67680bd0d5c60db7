"""``process()``'s options (its keyword arguments), checked, and where its failed records come from."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypedDict

import attrs

from ..errors import ConfigError
from ..failure import Failure
from ..record import Record

__all__ = [
    "BATCH_DEFAULTS", "BatchHandler", "BatchOptions", "Decoder", "Handler", "Options", "Ordering", "Origin",
    "ProcessOptions", "RunSpans", "Sink", "TraceContext", "no_run_spans",
]  # fmt: skip

Handler = Callable[[Record], Any]
#: ``process()``'s ``decode``: a record's data to the value its handler gets (``Order.model_validate_json``)
Decoder = Callable[[bytes], Any]
BatchHandler = Callable[[list[Record]], Any]
Sink = Callable[[Failure], Any]
#: ``process()``'s ``trace_context``: a record's carrier of its producer's trace context (``traceparent``, ...)
TraceContext = Callable[[Record], Mapping[str, str] | None]
#: The context a worker handles a run of one shard's records in (``runs(shard_id)``): its span
#: (:meth:`~kinsumer.handling.tracing.Tracing.run`), or nothing.
RunSpans = Callable[[str], contextlib.AbstractContextManager[object]]
_NO_RUN: contextlib.nullcontext[None] = contextlib.nullcontext()


def no_run_spans(shard_id: str) -> contextlib.AbstractContextManager[object]:
    """No span around a run: its records' calls have their own, or none."""
    return _NO_RUN


#: ``process()``'s ``ordering``: what stays in order, a shard's records or each partition key's.
Ordering = Literal["shard", "key"]


def _positive(
    name: str, minimum: float, *, whole: bool = False, above: bool = False
) -> Callable[[Any, Any, Any], None]:
    """A validator: a number (``whole``: an int) >= ``minimum`` (``above``: > ``minimum``)."""

    def check(instance: Any, attribute: Any, value: object) -> None:
        kind = int if whole else (int, float)
        if isinstance(value, bool) or not isinstance(value, kind) or value < minimum or (above and value == minimum):
            rule = f"must be {'a whole number' if whole else 'a number'} {'>' if above else '>='} {minimum:g}"
            raise ConfigError(name, rule, value)

    return check


@attrs.frozen
class Options:
    """How ``process()`` handles records (its keyword arguments), checked."""

    max_attempts: int = attrs.field(default=3, validator=_positive("max_attempts", 1, whole=True))
    backoff: float = attrs.field(default=0.5, validator=_positive("backoff", 0))
    max_backoff: float = attrs.field(default=30.0, validator=_positive("max_backoff", 0))
    dead_letter: Sink | None = None
    concurrency: int = attrs.field(default=1, validator=_positive("concurrency", 1, whole=True))
    max_records: int = attrs.field(default=1, validator=_positive("max_records", 1, whole=True))
    max_wait: float = attrs.field(default=0.0, validator=_positive("max_wait", 0))
    max_record_age: float | None = attrs.field(
        default=None, validator=attrs.validators.optional(_positive("max_record_age", 0, above=True))
    )
    timeout: float | None = attrs.field(
        default=None, validator=attrs.validators.optional(_positive("timeout", 0, above=True))
    )
    ordering: Ordering = "shard"
    on_assigned: Callable[[str], Any] | None = None
    on_revoked: Callable[[str], Any] | None = None
    on_lost: Callable[[str], Any] | None = None
    trace_context: TraceContext | None = None
    decode: Decoder | None = None

    def __attrs_post_init__(self) -> None:
        if self.dead_letter is not None and not callable(self.dead_letter):
            raise ConfigError("dead_letter", "must be a callable taking a kinsumer.Failure (or None)", self.dead_letter)
        for hook in ("on_assigned", "on_revoked", "on_lost"):
            value = getattr(self, hook)
            if value is not None and not callable(value):
                raise ConfigError(hook, "must be a callable taking a shard ID (or None)", value)
        if self.trace_context is not None and not callable(self.trace_context):
            rule = "must be a callable taking a kinsumer.Record and returning a dict such as {'traceparent': ...}"
            raise ConfigError("trace_context", rule, self.trace_context)
        if self.decode is not None and not callable(self.decode):
            rule = "must be a callable from a record's data (bytes) to the value its handler gets, or None"
            raise ConfigError("decode", rule, self.decode)
        if self.ordering not in ("shard", "key"):
            raise ConfigError("ordering", "must be 'shard' (one record of a shard at a time) or 'key' (one of a "
                              "partition key at a time)", self.ordering)  # fmt: skip
        if self.max_backoff < self.backoff:
            raise ConfigError("max_backoff", f"must be >= backoff ({self.backoff:g} s)", self.max_backoff)
        if self.max_record_age is not None and self.dead_letter is None:
            rule = "needs a dead_letter sink: a record older than that goes there (reason 'expired'), never skipped"
            raise ConfigError("max_record_age", rule, self.max_record_age)

    @property
    def max_stuck(self) -> int:
        """How many handler calls past their ``timeout`` may still run before HandlerStuck: every worker's
        record timing out on every attempt."""
        return self.concurrency * self.max_attempts

    def delay(self, attempt: int) -> float:
        """Seconds before call ``attempt + 1``: ``backoff`` doubled each time, at most ``max_backoff``."""
        return float(min(self.max_backoff, self.backoff * 2 ** (attempt - 1)))


class ProcessOptions(TypedDict, total=False):
    """The keyword arguments of ``process()`` and ``aprocess()``, each optional (its default in brackets); see
    :meth:`kinsumer.Kinsumer.process` for what each does."""

    #: Calls of the handler on a record before it goes to ``dead_letter`` [3].
    max_attempts: int
    #: Seconds before the second call on a record, doubled for each next [0.5].
    backoff: float
    #: The longest wait between two calls on a record, seconds [30].
    max_backoff: float
    #: Where a record goes after its last failed call: a callable taking a :class:`~kinsumer.Failure` [None:
    #: ``RecordFailed`` is raised].
    dead_letter: Callable[[Failure], object] | None
    #: Handler calls under way at once [1].
    concurrency: int
    #: Seconds after its arrival in the stream when a record goes to ``dead_letter`` unhandled [None: never].
    max_record_age: float | None
    #: Seconds a handler call may run before it counts as failed [None: no limit].
    timeout: float | None
    #: What stays in order: ``"shard"`` (one record of a shard at a time) or ``"key"`` [``"shard"``].
    ordering: Ordering
    #: Called with a shard's ID before a capture's first record goes to the handler [None].
    on_assigned: Callable[[str], object] | None
    #: Called with a shard's ID when it is given up cleanly, before its final checkpoint [None].
    on_revoked: Callable[[str], object] | None
    #: Called with a shard's ID when it went without a clean handoff [None].
    on_lost: Callable[[str], object] | None
    #: A record's carrier of its producer's trace context (a dict such as ``{"traceparent": ...}``) [None].
    trace_context: TraceContext | None
    #: A record's data to the value the handler gets, ``handler(value, record)`` [None: ``handler(record)``].
    decode: Decoder | None


class BatchOptions(ProcessOptions, total=False):
    """The keyword arguments of ``process_batches()`` and ``aprocess_batches()``: those of :class:`ProcessOptions`
    and the batches' size and wait."""

    #: The most records in one call [100].
    max_records: int
    #: Seconds a batch is gathered for before the call [1.0].
    max_wait: float


#: The batch calls' own defaults (:class:`Options`' are one record and no wait, the single-record calls').
BATCH_DEFAULTS: BatchOptions = {"max_records": 100, "max_wait": 1.0}


@attrs.frozen
class Origin:
    """Where failed records come from, for their :class:`Failure`."""

    stream: str
    application: str
    client_id: str

    def of(self, record: Record) -> tuple[str, str, str]:
        """The failure's ``stream``, ``application`` and ``client_id`` fields for ``record``."""
        return record.stream or self.stream, self.application, self.client_id
