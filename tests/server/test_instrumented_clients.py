"""OpenTelemetry's botocore instrumentation on moto's server: kinsumer keeps its own GetRecords path and makes the
span the instrumentation would have made for it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import botocore.exceptions
import pytest
from opentelemetry.instrumentation.botocore import BotocoreInstrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from demo.servers import LocalServer
from kinsumer import Kinsumer
from kinsumer.aws.lean_get_records import get_records, lean_for
from tests.helpers import wait_until
from tests.server.conftest import SERVER_CONFIG

pytestmark = pytest.mark.server


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """botocore instrumented, its spans (and kinsumer's) kept in memory; uninstrumented afterwards."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = BotocoreInstrumentor()
    instrumentor.instrument(tracer_provider=provider)  # type: ignore[no-untyped-call]
    try:
        yield exporter
    finally:
        instrumentor.uninstrument()  # type: ignore[no-untyped-call]


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def test_get_records_keeps_the_lean_path_and_has_the_instrumentations_span(
    moto_server: LocalServer, new_stream: Callable[[int], str], spans: InMemorySpanExporter
) -> None:
    stream = new_stream(1)
    kinesis = moto_server.client("kinesis")
    kinesis.put_record(StreamName=stream, Data=b'{"id": 1}', PartitionKey="k")
    shard = kinesis.list_shards(StreamName=stream)["Shards"][0]["ShardId"]
    iterator = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON")
    assert named(spans, "Kinesis.GetShardIterator")  # botocore's calls: the instrumentation's spans
    assert lean_for(kinesis) is not None  # the instrumentation registers no event hook: kinsumer's path stays
    answer = get_records(kinesis, iterator["ShardIterator"], 100)
    assert [r["Data"] for r in answer["Records"]] == [b'{"id": 1}']
    [span] = named(spans, "Kinesis.GetRecords")
    assert span.instrumentation_scope is not None and span.instrumentation_scope.name == "kinsumer"
    assert span.kind is SpanKind.CLIENT and span.status.status_code is StatusCode.UNSET
    port = int(moto_server.endpoint.rsplit(":", 1)[1])
    attributes = dict(span.attributes or {})
    request_id = attributes.pop("aws.request_id")
    assert isinstance(request_id, str) and request_id
    assert attributes == {
        "rpc.system": "aws-api", "rpc.service": "Kinesis", "rpc.method": "GetRecords", "cloud.region": "us-east-1",
        "server.address": "127.0.0.1", "server.port": port, "http.status_code": 200,
    }  # fmt: skip
    # the same attributes, names and values as the instrumentation's own span of the call through botocore
    kinesis.get_records(ShardIterator=answer["NextShardIterator"], Limit=10)
    theirs = [s for s in named(spans, "Kinesis.GetRecords") if s is not span]
    assert len(theirs) == 1 and theirs[0].kind is SpanKind.CLIENT
    assert {k: v for k, v in (theirs[0].attributes or {}).items() if k in attributes} == attributes


def test_an_error_answer_makes_an_error_span(
    moto_server: LocalServer, new_stream: Callable[[int], str], spans: InMemorySpanExporter
) -> None:
    kinesis = moto_server.client("kinesis")
    assert lean_for(kinesis) is not None
    with pytest.raises(botocore.exceptions.ClientError) as info:
        get_records(kinesis, "not-an-iterator", 10)
    [span] = named(spans, "Kinesis.GetRecords")
    assert span.status.status_code is StatusCode.ERROR
    status = info.value.response["ResponseMetadata"]["HTTPStatusCode"]
    assert status >= 400 and (span.attributes or {})["http.status_code"] == status


def test_no_span_once_the_instrumentation_is_off(
    moto_server: LocalServer, new_stream: Callable[[int], str], spans: InMemorySpanExporter
) -> None:
    stream = new_stream(1)
    kinesis = moto_server.client("kinesis")
    shard = kinesis.list_shards(StreamName=stream)["Shards"][0]["ShardId"]
    iterator = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard, ShardIteratorType="LATEST")
    BotocoreInstrumentor().uninstrument()  # type: ignore[no-untyped-call]
    spans.clear()
    get_records(kinesis, iterator["ShardIterator"], 10)
    assert spans.get_finished_spans() == ()


def test_a_consumer_on_instrumented_clients_reads_through_its_own_path_in_spans(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str, spans: InMemorySpanExporter
) -> None:
    stream = new_stream(2)
    kinesis = moto_server.client("kinesis")
    kinesis.put_records(StreamName=stream, Records=[
        {"Data": json.dumps({"id": i}).encode(), "PartitionKey": f"k{i}"} for i in range(20)
    ])  # fmt: skip
    consumer = Kinsumer(stream, app, "c", SERVER_CONFIG, kinesis=kinesis, dynamodb=moto_server.client("dynamodb"))
    seen: list[int] = []
    with consumer:
        while len(seen) < 20:
            record = consumer.next_record(timeout=30)
            assert record is not None
            seen.append(json.loads(record.data)["id"])
    assert sorted(seen) == list(range(20))
    assert lean_for(kinesis) is not None
    wait_until(lambda: len(named(spans, "Kinesis.GetRecords")) >= 2, 10, "GetRecords spans")
    assert {s.instrumentation_scope.name for s in named(spans, "Kinesis.GetRecords") if s.instrumentation_scope} == {
        "kinsumer"
    }
    assert named(spans, "DynamoDB.UpdateItem") or named(spans, "DynamoDB.PutItem")  # botocore's calls: theirs
