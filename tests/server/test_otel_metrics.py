"""OpenTelemetryStatReceiver on a known run over moto's server: the instruments' values and attributes after it."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable

import attrs
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from demo.servers import LocalServer
from kinsumer import Kinsumer
from kinsumer.otel_metrics import OpenTelemetryStatReceiver
from tests.helpers import wait_until
from tests.server.conftest import SERVER_CONFIG
from tests.unit.test_otel_metrics import collect

pytestmark = pytest.mark.server


def test_a_known_run_gives_exact_counts_per_shard_and_no_gauge_after_stop(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(3)
    kinesis = moto_server.client("kinesis")
    reader = InMemoryMetricReader()
    receiver = OpenTelemetryStatReceiver(stream, app, meter_provider=MeterProvider(metric_readers=[reader]))
    consumer = Kinsumer(stream, app, "c", attrs.evolve(SERVER_CONFIG, stats=receiver), kinesis=kinesis,
                        dynamodb=moto_server.client("dynamodb"))  # fmt: skip
    answers = kinesis.put_records(StreamName=stream, Records=[
        {"Data": json.dumps({"id": i}).encode(), "PartitionKey": f"key-{i}"} for i in range(60)
    ])["Records"]  # fmt: skip
    produced = Counter(a["ShardId"] for a in answers)
    assert len(produced) > 1  # the records are spread over shards
    base = {"messaging.system": "aws.kinesis", "messaging.destination.name": stream}
    base["messaging.consumer.group.name"] = app

    def shard(shard_id: str, **more: str) -> frozenset[tuple[str, str]]:
        return frozenset({**base, "messaging.destination.partition.id": shard_id, **more}.items())

    delivered: Counter[str] = Counter()
    with consumer:
        while sum(delivered.values()) < 60:
            record = consumer.next_record(timeout=30)
            assert record is not None
            delivered[record.shard_id] += 1
        running = collect(reader)
        assert running["kinsumer.shards.owned"] == {frozenset(base.items()): 3}
        # each owned shard reports its lag (caught up: 0 on moto) once fetched
        wait_until(lambda: len(collect(reader).get("kinsumer.shard.lag", {})) == 3, 30, "a lag per shard")
        assert set(collect(reader)["kinsumer.shard.lag"].values()) == {0.0}
        # the last record is taken: auto mode commits it on the next call (or at stop)
    assert delivered == produced
    found = collect(reader)
    receive = {"messaging.operation.name": "receive"}
    assert found["messaging.client.consumed.messages"] == {shard(s, **receive): n for s, n in produced.items()}
    fetched = found["kinsumer.records.fetched"]
    assert {key: n for key, n in fetched.items() if n} == {shard(s): n for s, n in produced.items()}
    assert found["kinsumer.shards.owned"] == {frozenset(base.items()): 0}  # every shard released at stop
    assert "kinsumer.shard.lag" not in found and "kinsumer.shard.oldest_record.age" not in found  # flushed
    checkpoints = found["kinsumer.checkpoints"]
    assert set(checkpoints) == {shard(s) for s in produced} and all(n >= 1 for n in checkpoints.values())
    latency_count = sum(count for count, _ in found["kinsumer.delivery.latency"].values())
    assert latency_count == sum(-(-n // 64) for n in produced.values())  # each shard's 1st, 65th, ... record
    assert "kinsumer.handler.failures" not in found and "kinsumer.errors.abandoned" not in found
