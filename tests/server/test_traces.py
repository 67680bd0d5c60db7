"""process*()'s spans over HTTP on moto's server, on the OpenTelemetry SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
import json
import pathlib
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from typing import Any

import attrs
import pytest
from opentelemetry import propagate, trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from demo.servers import LocalServer
from kinsumer import ConfigError, Failure, Kinsumer, Record
from kinsumer.dead_letter import envelope
from tests.helpers import plain_python_env, wait_until
from tests.server.conftest import SERVER_CONFIG
from tests.support.otel import exporter, spans_of

pytestmark = pytest.mark.server

FAILS_ONCE, ALWAYS_FAILS = 3, 7


def ids(context: trace.SpanContext | None) -> tuple[int, int]:
    assert context is not None
    return context.trace_id, context.span_id


def produce(kinesis: Any, stream: str, count: int) -> dict[int, trace.SpanContext]:
    """``count`` JSON records, each sent under a producer span whose ``traceparent`` it carries; their spans."""
    producers = {}
    tracer = trace.get_tracer("producer")
    for i in range(count):
        with tracer.start_as_current_span("send") as span:
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            payload = json.dumps({"id": i, "traceparent": carrier["traceparent"]}).encode()
            kinesis.put_record(StreamName=stream, Data=payload, PartitionKey=f"key-{i}")
            producers[i] = span.get_span_context()
    return producers


def carried(record: Record) -> dict[str, str]:
    """``trace_context``: the producer's context, in the payload."""
    return {"traceparent": json.loads(record.data)["traceparent"]}


def rid(record: Record) -> int:
    return int(json.loads(record.data)["id"])


def user_spans_under(span: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in exporter().get_finished_spans() if s.name == "user work" and s.parent == span.context]


def consume(k: Kinsumer, call: Callable[[], None], done: Callable[[], bool], what: str) -> None:
    """Run ``call`` (a process*() of ``k``) on a thread until ``done()``, then stop; raise what it raised."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with k:
                call()
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: done() or bool(errors), 60, what)
    finally:
        k.stop()
        thread.join(30)
    assert not thread.is_alive() and not errors, errors


@pytest.mark.parametrize(
    "options", [{}, {"concurrency": 2, "timeout": 10.0}], ids=["one worker", "two workers with a timeout"]
)
def test_a_span_per_call_with_the_payloads_parent_errors_on_failed_attempts_and_the_trace_id_in_the_dead_letter(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str, options: dict[str, Any]
) -> None:
    exporter()
    stream = new_stream(2)
    producers = produce(moto_server.client("kinesis"), stream, 10)
    lock = threading.Lock()
    calls: dict[int, int] = {}
    handled: dict[tuple[str, str], Record] = {}  # by shard and sequence number
    dead: list[Failure] = []

    def handler(record: Record) -> None:
        i = rid(record)
        with lock:
            calls[i] = calls.get(i, 0) + 1
            handled[record.shard_id, record.sequence_number] = record
            attempt = calls[i]
        with trace.get_tracer("app").start_as_current_span("user work"):
            if i == ALWAYS_FAILS or (i == FAILS_ONCE and attempt == 1):
                raise ValueError(f"record {i} cannot be handled")

    def finished() -> bool:
        with lock:
            return len(handled) == 10 and bool(dead) and calls.get(FAILS_ONCE) == 2 and len(spans_of(stream)) >= 12

    k = Kinsumer(stream, app, "c1", SERVER_CONFIG, kinesis=moto_server.client("kinesis"),
                 dynamodb=moto_server.client("dynamodb"))  # fmt: skip
    call = lambda: k.process(handler, max_attempts=2, backoff=0.01, dead_letter=dead.append,  # noqa: E731
                             trace_context=carried, **options)  # fmt: skip
    consume(k, call, finished, "every record handled, one retried and one dead-lettered")

    spans = spans_of(stream)
    assert len(spans) == 12  # ten records, two second attempts
    by_record: dict[int, list[ReadableSpan]] = {}
    for span in spans:
        assert span.kind == SpanKind.CONSUMER and span.attributes is not None
        where = span.attributes["messaging.destination.partition.id"], span.attributes["messaging.message.id"]
        record = handled[str(where[0]), str(where[1])]
        by_record.setdefault(rid(record), []).append(span)
        assert dict(span.attributes) | {"kinsumer.attempt": 0, "error.type": ""} == {
            "messaging.system": "aws.kinesis", "messaging.operation.type": "process",
            "messaging.operation.name": "process", "messaging.destination.name": stream,
            "messaging.consumer.group.name": app, "messaging.destination.partition.id": record.shard_id,
            "messaging.message.id": record.sequence_number, "kinsumer.attempt": 0, "error.type": "",
        }  # fmt: skip
        assert ids(span.parent) == ids(producers[rid(record)])  # the producer's span, from the payload
        assert len(user_spans_under(span)) == 1  # the handler's own span nests under it
    attempts = {i: [(s.attributes or {}).get("kinsumer.attempt") for s in spans] for i, spans in by_record.items()}
    status = {i: [s.status.status_code for s in spans] for i, spans in by_record.items()}
    assert attempts[FAILS_ONCE] == [1, 2] and status[FAILS_ONCE] == [StatusCode.ERROR, StatusCode.UNSET]
    assert attempts[ALWAYS_FAILS] == [1, 2] and status[ALWAYS_FAILS] == [StatusCode.ERROR, StatusCode.ERROR]
    assert all(attempts[i] == [1] and status[i] == [StatusCode.UNSET] for i in set(range(10)) - {3, 7})
    failed = by_record[ALWAYS_FAILS][0]
    assert (failed.attributes or {})["error.type"] == "ValueError" and failed.events[0].name == "exception"
    # the dead letter carries the IDs of its last failed attempt's span
    (failure,) = dead
    last = by_record[ALWAYS_FAILS][1].context
    assert last is not None
    assert (failure.trace_id, failure.span_id) == (f"{last.trace_id:032x}", f"{last.span_id:016x}")
    body = envelope(failure)
    assert (body["trace_id"], body["span_id"], body["version"]) == (failure.trace_id, failure.span_id, 1)


def test_a_batch_span_per_batch_call_linked_to_its_records_producers(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    exporter()
    stream = new_stream(1)
    producers = produce(moto_server.client("kinesis"), stream, 6)
    batches: list[list[int]] = []

    def handler(records: list[Record]) -> None:
        with trace.get_tracer("app").start_as_current_span("user work"):
            batches.append([rid(r) for r in records])

    k = Kinsumer(stream, app, "c1", SERVER_CONFIG, kinesis=moto_server.client("kinesis"),
                 dynamodb=moto_server.client("dynamodb"))  # fmt: skip
    call = lambda: k.process_batches(handler, max_records=10, max_wait=0.5, trace_context=carried)  # noqa: E731
    consume(k, call, lambda: sum(map(len, batches)) == 6 and len(spans_of(stream)) == len(batches), "six records")
    spans = spans_of(stream)
    assert len(spans) == len(batches)
    for span, batch in zip(spans, batches, strict=True):
        assert span.kind == SpanKind.CONSUMER and span.parent is None and span.attributes is not None
        assert span.attributes["messaging.batch.message_count"] == len(batch)
        assert [ids(link.context) for link in span.links] == [ids(producers[i]) for i in batch]
        assert len(user_spans_under(span)) == 1


def test_an_async_handlers_spans_nest_under_kinsumers(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    exporter()
    stream = new_stream(1)
    producers = produce(moto_server.client("kinesis"), stream, 3)
    seen: list[int] = []

    async def handler(record: Record) -> None:
        with trace.get_tracer("app").start_as_current_span("user work"):
            await asyncio.sleep(0.001)
            seen.append(rid(record))

    async def main() -> None:
        k = Kinsumer(stream, app, "c1", SERVER_CONFIG, kinesis=moto_server.client("kinesis"),
                     dynamodb=moto_server.client("dynamodb"))  # fmt: skip
        async with k:
            work = asyncio.create_task(k.aprocess(handler, trace_context=carried))
            while len(spans_of(stream)) < 3:
                assert not work.done(), work.exception()
                await asyncio.sleep(0.05)
            await asyncio.to_thread(k.stop)
            await asyncio.wait_for(work, 30)  # it returns once the consumer stopped

    asyncio.run(asyncio.wait_for(main(), 60))
    spans = spans_of(stream)
    assert len(spans) == 3 and sorted(seen) == [0, 1, 2]
    for span, i in zip(spans, seen, strict=True):
        assert ids(span.parent) == ids(producers[i]) and len(user_spans_under(span)) == 1


def test_process_runs_without_opentelemetry(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(1)
    moto_server.client("kinesis").put_record(StreamName=stream, Data=b"hello", PartitionKey="k")
    code = textwrap.dedent(f"""
        import sys, threading
        sys.modules["opentelemetry"] = None  # the import fails, as without the otel extra
        from demo.servers import client
        from kinsumer import Config, Kinsumer
        from tests.server.conftest import SERVER_CONFIG
        endpoint = {moto_server.endpoint!r}
        k = Kinsumer({stream!r}, {app!r}, "c1", SERVER_CONFIG, kinesis=client(endpoint, "kinesis"),
                     dynamodb=client(endpoint, "dynamodb"))
        seen = []
        def handler(record):
            seen.append(record.data)
            threading.Thread(target=k.stop).start()
        deadline = threading.Timer(60, k.stop)  # a daemon, cancelled: the process ends when the test is done
        deadline.daemon = True
        deadline.start()
        with k:
            k.process(handler)
        deadline.cancel()
        assert "opentelemetry.trace" not in sys.modules
        print(seen)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                          env=plain_python_env(), cwd=pathlib.Path(__file__).resolve().parents[2])  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[b'hello']"


def test_handler_spans_false_makes_no_span_with_an_sdk_set_and_refuses_trace_context(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    exporter()  # the SDK is set: with handler_spans on, each call would make a span
    stream = new_stream(1)
    produce(moto_server.client("kinesis"), stream, 3)
    handled: list[int] = []
    config = attrs.evolve(SERVER_CONFIG, handler_spans=False)
    k = Kinsumer(stream, app, "c1", config, kinesis=moto_server.client("kinesis"),
                 dynamodb=moto_server.client("dynamodb"))  # fmt: skip
    with k, pytest.raises(ConfigError, match="trace_context"):
        k.process(lambda record: None, trace_context=carried)
    k = Kinsumer(stream, app, "c2", config, kinesis=moto_server.client("kinesis"),
                 dynamodb=moto_server.client("dynamodb"))  # fmt: skip
    consume(k, lambda: k.process(lambda record: handled.append(rid(record))), lambda: len(handled) == 3, "3 records")
    assert sorted(handled) == [0, 1, 2]
    assert spans_of(stream) == []


@pytest.mark.parametrize("options", [{}, {"concurrency": 2}], ids=["one worker", "two workers"])
def test_by_default_a_span_per_run_of_a_shards_records_with_a_retry_under_it(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str, options: dict[str, Any]
) -> None:
    exporter()
    stream = new_stream(2)
    kinesis = moto_server.client("kinesis")
    for i in range(20):  # stored before the consumer starts: read in runs of several
        kinesis.put_record(StreamName=stream, Data=json.dumps({"id": i}).encode(), PartitionKey=f"key-{i}")
    lock = threading.Lock()
    calls: dict[int, int] = {}
    shards: dict[int, str] = {}

    def handler(record: Record) -> None:
        i = rid(record)
        with lock:
            calls[i] = calls.get(i, 0) + 1
            shards[i] = record.shard_id
            first = calls[i] == 1
        with trace.get_tracer("app").start_as_current_span("user work"):
            if i == FAILS_ONCE and first:
                raise ValueError(f"record {i} cannot be handled yet")

    def finished() -> bool:
        with lock:
            handled = len(calls) == 20 and calls.get(FAILS_ONCE) == 2
        runs = [s for s in spans_of(stream) if "messaging.batch.message_count" in (s.attributes or {})]
        return handled and sum(int((s.attributes or {})["messaging.batch.message_count"]) for s in runs) == 20

    k = Kinsumer(stream, app, "c1", SERVER_CONFIG, kinesis=kinesis, dynamodb=moto_server.client("dynamodb"))
    consume(k, lambda: k.process(handler, max_attempts=2, backoff=0.01, **options), finished, "20 records in runs")

    spans = spans_of(stream)
    runs = [s for s in spans if "messaging.batch.message_count" in (s.attributes or {})]
    (retry,) = [s for s in spans if s not in runs]
    counts = [int((s.attributes or {})["messaging.batch.message_count"]) for s in runs]
    assert sum(counts) == 20  # each record's first call in one run's span
    if not options:  # one worker hands the queue's runs over as they are (two: a job each, often of one record)
        assert max(counts) > 1, counts
    assert all(s.kind == SpanKind.CONSUMER and s.parent is None for s in runs)
    assert {str((s.attributes or {})["messaging.destination.partition.id"]) for s in runs} == set(shards.values())
    # the handler's own spans nest under their run's: one per call, the retry's under the retry's span
    assert sum(len(user_spans_under(s)) for s in runs) == 20 and len(user_spans_under(retry)) == 1
    (failed,) = [s for s in runs if s.status.status_code == StatusCode.ERROR]
    assert (failed.attributes or {})["error.type"] == "ValueError"
    assert (retry.attributes or {})["kinsumer.attempt"] == 2 and retry.parent is not None
    assert failed.context is not None and retry.parent.span_id == failed.context.span_id
    assert (failed.attributes or {})["messaging.destination.partition.id"] == shards[FAILS_ONCE]
