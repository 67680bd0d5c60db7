"""kinsumer.handling.tracing: the spans around handler calls, on the SDK's in-memory exporter (no server)."""

from __future__ import annotations

import datetime as dt
import logging
import pathlib
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry import propagate, trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from kinsumer import ConfigError, Record
from kinsumer.handling.options import Options
from kinsumer.handling.timeouts import HandlerTimedOut, TimedHandler, shard_of_record
from kinsumer.handling.tracing import Tracing, batch_attributes, message_id, record_attributes, tracing_for
from tests.helpers import plain_python_env
from tests.support.otel import exporter, spans_of

NOW = dt.datetime(2026, 11, 25, 8, 0, tzinfo=dt.UTC)


def record(seq: str = "4959", sub: int | None = None, data: bytes = b"{}", stream: str = "") -> Record:
    return Record(data, "key-1", seq, "shardId-000000000003", NOW, NOW, sub, None, stream)


def new_tracing(trace_context: Callable[[Record], Any] | None = None) -> tuple[Tracing, str]:
    exporter()  # the SDK provider is set
    stream = f"stream-{uuid.uuid4().hex[:8]}"
    tracing = tracing_for(stream, "billing-app", "0.1.0", trace_context)
    assert tracing is not None
    return tracing, stream


def producer_carrier() -> tuple[dict[str, str], trace.SpanContext]:
    """A producer's span, and the carrier (``traceparent``) it would put in a payload."""
    with trace.get_tracer("producer").start_as_current_span("send") as span:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        return carrier, span.get_span_context()


def ids(context: trace.SpanContext | None) -> tuple[int, int]:
    """A span context's IDs (one extracted from a carrier is remote, the producer's own is not)."""
    assert context is not None
    return context.trace_id, context.span_id


def the_span(stream: str) -> ReadableSpan:
    spans = spans_of(stream)
    assert len(spans) == 1, spans
    return spans[0]


def test_message_ids_and_attributes_follow_the_messaging_conventions() -> None:
    assert message_id(record("4959")) == "4959"
    assert message_id(record("4959", sub=2)) == "4959:2"  # a KPL user record
    assert record_attributes(record(sub=0), "clicks", "billing-app", 2) == {
        "messaging.system": "aws.kinesis",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "clicks",
        "messaging.consumer.group.name": "billing-app",
        "messaging.destination.partition.id": "shardId-000000000003",
        "messaging.message.id": "4959:0",
        "kinsumer.attempt": 2,
    }
    batch = batch_attributes([record("1"), record("2")], "clicks", "billing-app", 1)
    assert batch["messaging.batch.message_count"] == 2 and "messaging.message.id" not in batch


def test_a_call_runs_in_a_consumer_span_that_is_current_while_the_handler_runs() -> None:
    tracing, stream = new_tracing()
    seen: list[trace.SpanContext] = []

    def handler(r: Record) -> str:
        seen.append(trace.get_current_span().get_span_context())
        with trace.get_tracer("app").start_as_current_span("user work"):
            pass
        return "ok"

    assert tracing.single(handler)(record("77", stream=stream)) == "ok"
    span = the_span(stream)
    assert span.kind == SpanKind.CONSUMER and span.status.status_code == StatusCode.UNSET
    assert span.attributes is not None and span.attributes["messaging.message.id"] == "77"
    assert span.attributes["kinsumer.attempt"] == 1 and span.attributes["messaging.destination.name"] == stream
    assert span.parent is None  # no trace_context: a root
    assert seen == [span.context]
    user = [s for s in exporter().get_finished_spans() if s.name == "user work" and s.parent == span.context]
    assert len(user) == 1  # the handler's own span nests under kinsumer's
    assert trace.get_current_span() is trace.INVALID_SPAN  # detached after the call
    assert tracing.failed_span() == (None, None)


def test_a_raising_call_sets_an_error_status_and_keeps_its_ids_for_the_failure() -> None:
    tracing, stream = new_tracing()

    def handler(r: Record) -> None:
        raise ValueError("bad payload")

    with pytest.raises(ValueError, match="bad payload"):
        tracing.single(handler)(record(stream=stream), 3)
    span = the_span(stream)
    assert span.status.status_code == StatusCode.ERROR and span.status.description == "ValueError: bad payload"
    assert span.attributes is not None and span.attributes["error.type"] == "ValueError"
    assert span.attributes["kinsumer.attempt"] == 3
    assert [event.name for event in span.events] == ["exception"]
    assert span.context is not None
    assert tracing.failed_span() == (f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}")
    assert tracing.failed_span() == (None, None)  # forgotten once read


def test_the_producers_context_from_the_payload_is_the_parent() -> None:
    tracing, stream = new_tracing(lambda r: {"traceparent": r.data.decode()})
    carrier, producer = producer_carrier()
    tracing.single(lambda r: None)(record(data=carrier["traceparent"].encode(), stream=stream))
    span = the_span(stream)
    assert ids(span.parent) == ids(producer) and ids(span.context)[0] == producer.trace_id


@pytest.mark.parametrize(
    ("trace_context", "warnings"),
    [(lambda r: 1 / 0, 1), (lambda r: "not a dict", 1), (lambda r: {"traceparent": 5}, 1),
     (lambda r: {"traceparent": "garbage"}, 0), (lambda r: None, 0), (lambda r: {}, 0)],
    ids=["raises", "a string", "not a string inside", "not a traceparent", "None", "empty"],
)  # fmt: skip
def test_a_trace_context_that_fails_leaves_the_span_without_a_parent_and_warns_once(
    trace_context: Callable[[Record], Any], warnings: int, caplog: pytest.LogCaptureFixture
) -> None:
    tracing, stream = new_tracing(trace_context)
    handled = []
    with caplog.at_level(logging.WARNING, logger="kinsumer.process"):
        for seq in ("1", "2", "3"):
            tracing.single(handled.append)(record(seq, stream=stream))
    assert [r.sequence_number for r in handled] == ["1", "2", "3"]
    spans = spans_of(stream)
    assert len(spans) == 3 and all(span.parent is None for span in spans)
    assert len([r for r in caplog.records if "trace_context failed" in r.getMessage()]) == warnings


def test_a_batch_span_links_to_each_records_producer_and_fails_when_records_are_returned() -> None:
    tracing, stream = new_tracing(lambda r: {"traceparent": r.data.decode()} if r.data else None)
    (c1, p1), (c2, p2) = producer_carrier(), producer_carrier()
    records = [record("1", data=c1["traceparent"].encode(), stream=stream), record("2", data=b"", stream=stream),
               record("3", data=c2["traceparent"].encode(), stream=stream)]  # fmt: skip
    call = tracing.batch(lambda batch: batch[1:])
    assert call(records) == records[1:]
    span = the_span(stream)
    assert span.parent is None and [ids(link.context) for link in span.links] == [ids(p1), ids(p2)]
    assert span.attributes is not None and span.attributes["messaging.batch.message_count"] == 3
    assert span.status.status_code == StatusCode.ERROR and span.attributes["error.type"] == "ReportedFailed"
    assert tracing.failed_span()[0] is not None


def test_a_timed_call_runs_on_its_caller_thread_under_the_span_and_a_timeout_is_an_error() -> None:
    tracing, stream = new_tracing()
    release = threading.Event()
    parents: list[trace.SpanContext | None] = []

    def handler(r: Record) -> None:
        with trace.get_tracer("app").start_as_current_span("user work") as mine:
            assert isinstance(mine, ReadableSpan)
            parents.append(mine.parent)
        if r.sequence_number == "slow":
            release.wait(10)

    timed = TimedHandler(handler, 0.2, 5, shard_of_record)
    try:
        call = tracing.single(timed)
        call(record("fast", stream=stream))
        with pytest.raises(HandlerTimedOut):
            call(record("slow", stream=stream), 2)
    finally:
        release.set()
        timed.close()
    fast, slow = spans_of(stream)
    assert parents == [fast.context, slow.context]  # the caller thread ran in the worker's context
    assert slow.status.status_code == StatusCode.ERROR and slow.attributes is not None
    assert slow.attributes["error.type"] == "HandlerTimedOut" and slow.attributes["kinsumer.attempt"] == 2


def test_trace_context_must_be_callable() -> None:
    with pytest.raises(ConfigError, match=r"trace_context must be a callable taking a kinsumer\.Record"):
        Options(trace_context="traceparent")  # type: ignore[arg-type]


def run_python(code: str) -> str:
    command = [sys.executable, "-c", textwrap.dedent(code)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False, env=plain_python_env(),
                          cwd=pathlib.Path(__file__).resolve().parents[2])  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_no_span_until_the_application_sets_a_provider_even_after_kinsumer_started() -> None:
    out = run_python("""
        import datetime as dt
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from kinsumer import Record
        from kinsumer.handling.tracing import tracing_for

        now = dt.datetime.now(dt.UTC)
        r = Record(b"", "k", "1", "shardId-0", now, now)
        tracing = tracing_for("clicks", "app", "0", None)
        seen = []
        call = tracing.single(lambda r: seen.append(trace.get_current_span()))
        call(r)
        assert seen[-1] is trace.INVALID_SPAN and tracing._tracer is None  # the no-op: no span
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)  # after kinsumer started
        call(r)
        print(len(exporter.get_finished_spans()), seen[-1].get_span_context().is_valid)
    """)
    assert out.split() == ["1", "True"]


def test_kinsumer_imports_and_refuses_trace_context_without_opentelemetry() -> None:
    out = run_python("""
        import sys
        sys.modules["opentelemetry"] = None  # the import fails, as when the otel extra is not installed
        import kinsumer
        from kinsumer.handling.tracing import available, tracing_for
        assert not available() and tracing_for("clicks", "app", "0", None) is None
        try:
            tracing_for("clicks", "app", "0", lambda r: {})
        except kinsumer.ConfigError as exc:
            print(exc.field)
    """)
    assert out.split() == ["trace_context"]


def run_tracing(trace_context: Callable[[Record], Any] | None = None) -> tuple[Tracing, str]:
    """A Tracing with ``handler_spans="run"`` (the default), on the SDK."""
    exporter()
    stream = f"stream-{uuid.uuid4().hex[:8]}"
    tracing = tracing_for(stream, "billing-app", "0.1.0", trace_context, per_run=True)
    assert tracing is not None
    return tracing, stream


def test_a_runs_first_calls_share_one_span_current_while_each_handler_runs() -> None:
    tracing, stream = run_tracing()
    seen: list[trace.SpanContext] = []

    def handler(r: Record) -> None:
        seen.append(trace.get_current_span().get_span_context())
        with trace.get_tracer("app").start_as_current_span("user work"):
            pass

    call = tracing.single(handler)
    with tracing.run("shardId-000000000003"):
        for seq in ("1", "2", "3"):
            call(record(seq, stream=stream))
        assert spans_of(stream) == []  # it ends with the run
    span = the_span(stream)
    assert span.kind == SpanKind.CONSUMER and span.parent is None and span.status.status_code == StatusCode.UNSET
    assert dict(span.attributes or {}) == {
        "messaging.system": "aws.kinesis", "messaging.operation.type": "process",
        "messaging.operation.name": "process", "messaging.destination.name": stream,
        "messaging.consumer.group.name": "billing-app",
        "messaging.destination.partition.id": "shardId-000000000003", "kinsumer.attempt": 1,
        "messaging.batch.message_count": 3,
    }  # fmt: skip
    assert seen == [span.context] * 3
    user = [s for s in exporter().get_finished_spans() if s.name == "user work" and s.parent == span.context]
    assert len(user) == 3
    assert trace.get_current_span() is trace.INVALID_SPAN  # detached as the run ended


def test_a_run_without_a_call_makes_no_span_and_runs_do_not_leak_into_each_other() -> None:
    tracing, stream = run_tracing()
    call = tracing.single(lambda r: None)
    with tracing.run("shardId-000000000003"):
        pass
    assert spans_of(stream) == []
    with tracing.run("shardId-000000000003"):
        call(record("1", stream=stream))
    with tracing.run("shardId-000000000003"):
        call(record("2", stream=stream))
        call(record("3", stream=stream))
    call(record("4", stream=stream))  # outside a run: a span of its own
    counts = [(s.attributes or {}).get("messaging.batch.message_count") for s in spans_of(stream)]
    assert counts == [1, 2, None]
    assert (spans_of(stream)[2].attributes or {})["messaging.message.id"] == "4"


def test_a_failed_first_call_fails_the_runs_span_and_a_retry_has_its_own_span_under_it() -> None:
    tracing, stream = run_tracing()
    calls = 0

    def handler(r: Record) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise ValueError("bad payload")

    call = tracing.single(handler)
    with tracing.run("shardId-000000000003"):
        call(record("1", stream=stream))
        with pytest.raises(ValueError, match="bad payload"):
            call(record("2", stream=stream))
        run_ids = tracing.failed_span()
        call(record("2", stream=stream), 2)  # the retry
        call(record("3", stream=stream))
    retry, run = spans_of(stream)
    assert run.status.status_code == StatusCode.ERROR and run.status.description == "ValueError: bad payload"
    assert (run.attributes or {})["error.type"] == "ValueError" and [e.name for e in run.events] == ["exception"]
    assert (run.attributes or {})["messaging.batch.message_count"] == 3  # its first calls
    assert run.context is not None and run_ids == (f"{run.context.trace_id:032x}", f"{run.context.span_id:016x}")
    assert retry.parent is not None and retry.parent.span_id == run.context.span_id
    assert (retry.attributes or {})["kinsumer.attempt"] == 2 and (retry.attributes or {})["messaging.message.id"] == "2"


def test_with_trace_context_each_call_has_a_span_whose_parent_is_the_producers() -> None:
    tracing, stream = run_tracing(lambda r: {"traceparent": r.data.decode()})
    carrier, producer = producer_carrier()
    with tracing.run("shardId-000000000003"):
        for _ in range(2):
            tracing.single(lambda r: None)(record(data=carrier["traceparent"].encode(), stream=stream))
    spans = spans_of(stream)
    assert len(spans) == 2 and all(ids(span.parent) == ids(producer) for span in spans)


def test_handler_spans_is_run_by_default_and_takes_the_former_bools() -> None:
    from kinsumer import Config

    assert Config().handler_spans == "run"
    assert Config(handler_spans="call").handler_spans == "call"
    assert Config(handler_spans=True).handler_spans == "call"  # type: ignore[arg-type]  # a span per call, as before
    assert Config(handler_spans=False).handler_spans == "off"  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"Config\.handler_spans.*run, call, off"):
        Config(handler_spans="record")  # type: ignore[arg-type]
