"""kinsumer.otel_metrics without AWS: each stat event as OpenTelemetry instruments, read by an in-memory reader."""

from __future__ import annotations

import importlib
import pathlib
import subprocess
import sys
import textwrap
import threading
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, NumberDataPoint

import kinsumer
import kinsumer.otel_metrics
from kinsumer import ConfigError
from kinsumer.otel_metrics import OpenTelemetryStatReceiver
from tests.helpers import plain_python_env

STREAM, APP = "orders", "billing"
SHARD = "shardId-000000000000"
OTHER = "shardId-000000000001"
BASE = {"messaging.system": "aws.kinesis", "messaging.destination.name": STREAM, "messaging.consumer.group.name": APP}


def shard_attrs(shard: str = SHARD, stream: str = STREAM, **more: str) -> dict[str, str]:
    return {**BASE, "messaging.destination.name": stream, "messaging.destination.partition.id": shard, **more}


Points = dict[frozenset[tuple[str, Any]], Any]


def collect(reader: InMemoryMetricReader) -> dict[str, Points]:
    """{instrument: {attributes: value}}: a sum's or gauge's value, a histogram's (count, sum)."""
    found: dict[str, Points] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            assert scope.scope.name == "kinsumer"
            for metric in scope.metrics:
                points: Points = {}
                for point in metric.data.data_points:
                    key = frozenset((point.attributes or {}).items())
                    if isinstance(point, HistogramDataPoint):
                        points[key] = (point.count, point.sum)
                    else:
                        assert isinstance(point, NumberDataPoint)
                        points[key] = point.value
                found[metric.name] = points
    return found


def key(attributes: dict[str, str]) -> frozenset[tuple[str, Any]]:
    return frozenset(attributes.items())


def still() -> float:
    """A clock that stands still: samples by count only."""
    return 0.0


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


@pytest.fixture
def receiver(reader: InMemoryMetricReader) -> OpenTelemetryStatReceiver:
    return OpenTelemetryStatReceiver(STREAM, APP, meter_provider=MeterProvider(metric_readers=[reader]))


def test_records_delivered_are_messaging_consumed_messages_per_shard(
    receiver: OpenTelemetryStatReceiver, reader: InMemoryMetricReader
) -> None:
    for _ in range(5):
        receiver.record_delivered(SHARD, 0.01)
    receiver.record_delivered(OTHER, 0.02)
    consumed = collect(reader)["messaging.client.consumed.messages"]
    receive = {"messaging.operation.name": "receive"}
    assert consumed == {key(shard_attrs(**receive)): 5, key(shard_attrs(OTHER, **receive)): 1}
    receiver.record_delivered(SHARD, 0.01)  # cumulative: reading the sum takes nothing from it
    assert collect(reader)["messaging.client.consumed.messages"][key(shard_attrs(**receive))] == 6


def test_delivery_latency_is_a_sample_of_one_record_in_latency_sample_per_shard(reader: InMemoryMetricReader) -> None:
    receiver = OpenTelemetryStatReceiver(STREAM, APP, meter_provider=MeterProvider(metric_readers=[reader]),
                                         latency_sample=4, clock=still)  # fmt: skip
    latencies = [0.5, 0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9]
    for latency in latencies:
        receiver.record_delivered(SHARD, latency)
    # the first, fifth and ninth of the shard's records (0, 4, 8 taken from its count)
    count, total = collect(reader)["kinsumer.delivery.latency"][key(shard_attrs())]
    assert count == 3 and total == pytest.approx(0.5 + 0.4 + 0.9)


def test_runs_of_records_count_each_record_and_give_a_sample_when_they_hold_one_numbered_a_multiple(
    reader: InMemoryMetricReader,
) -> None:
    receiver = OpenTelemetryStatReceiver(STREAM, APP, meter_provider=MeterProvider(metric_readers=[reader]),
                                         latency_sample=4, clock=still)  # fmt: skip
    for count, latency in ((3, 0.5), (3, 0.25), (3, 0.125), (2, 8.0)):  # records 0-2, 3-5, 6-8, 9-10
        receiver.records_delivered(SHARD, count, latency)
        receiver.records_handled(SHARD, count, latency / 10)
    found = collect(reader)
    assert found["messaging.client.consumed.messages"] == {
        key(shard_attrs(**{"messaging.operation.name": "receive"})): 11
    }
    assert found["kinsumer.records.handled"] == {key(shard_attrs()): 11}
    # 0, 4 and 8 are in the first three runs; the last holds none
    assert found["kinsumer.delivery.latency"] == {key(shard_attrs()): (3, pytest.approx(0.875))}
    process = key(shard_attrs(**{"messaging.operation.name": "process"}))
    assert found["messaging.process.duration"] == {process: (3, pytest.approx(0.0875))}


def test_a_shard_with_records_flowing_gives_a_sample_at_least_once_a_second(reader: InMemoryMetricReader) -> None:
    now = [0.0]
    receiver = OpenTelemetryStatReceiver(STREAM, APP, meter_provider=MeterProvider(metric_readers=[reader]),
                                         clock=lambda: now[0])  # fmt: skip
    assert receiver.latency_sample == 1024
    for step, latency in ((0.0, 0.5), (0.4, 0.25), (0.7, 0.125), (1.5, 2.0), (2.4, 4.0)):
        now[0] = step
        receiver.records_delivered(SHARD, 10, latency)
    # the first run (record 0), then the first a second or more after the last sample: at 1.5 s; not at 2.4 s
    assert collect(reader)["kinsumer.delivery.latency"] == {key(shard_attrs()): (2, pytest.approx(2.5))}


def test_every_record_is_a_latency_sample_with_latency_sample_1(reader: InMemoryMetricReader) -> None:
    receiver = OpenTelemetryStatReceiver(STREAM, APP, meter_provider=MeterProvider(metric_readers=[reader]),
                                         latency_sample=1, clock=still)  # fmt: skip
    for latency in (0.25, 0.5, 1.0):
        receiver.record_delivered(SHARD, latency)
    assert collect(reader)["kinsumer.delivery.latency"] == {key(shard_attrs()): (3, 1.75)}


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "8"])
def test_latency_sample_must_be_a_positive_int(bad: object) -> None:
    with pytest.raises(ConfigError, match="latency_sample"):
        OpenTelemetryStatReceiver(STREAM, APP, meter_provider=MeterProvider(), latency_sample=bad)  # type: ignore[arg-type]


def test_records_fetched_sum_per_shard_and_the_lag_is_the_last_in_seconds(
    receiver: OpenTelemetryStatReceiver, reader: InMemoryMetricReader
) -> None:
    receiver.records_fetched(SHARD, 7, 1500)
    receiver.records_fetched(SHARD, 0, 250)
    receiver.records_fetched(OTHER, 3, None)  # no lag known: no series
    found = collect(reader)
    assert found["kinsumer.records.fetched"] == {key(shard_attrs()): 7, key(shard_attrs(OTHER)): 3}
    assert found["kinsumer.shard.lag"] == {key(shard_attrs()): 0.25}


def test_record_age_is_a_gauge_per_shard_zero_when_the_client_holds_none(
    receiver: OpenTelemetryStatReceiver, reader: InMemoryMetricReader
) -> None:
    receiver.record_age(SHARD, 12.5)
    receiver.record_age(OTHER, 3.0)
    receiver.record_age(OTHER, None)
    assert collect(reader)["kinsumer.shard.oldest_record.age"] == {
        key(shard_attrs()): 12.5,
        key(shard_attrs(OTHER)): 0.0,
    }


def test_a_lost_shard_drops_its_gauges_and_flush_drops_them_all(
    receiver: OpenTelemetryStatReceiver, reader: InMemoryMetricReader
) -> None:
    for shard in (SHARD, OTHER):
        receiver.shard_gained(shard)
        receiver.records_fetched(shard, 1, 100)
        receiver.record_age(shard, 1.0)
    receiver.shard_lost(SHARD)
    found = collect(reader)
    assert found["kinsumer.shard.lag"] == {key(shard_attrs(OTHER)): 0.1}
    assert found["kinsumer.shard.oldest_record.age"] == {key(shard_attrs(OTHER)): 1.0}
    assert found["kinsumer.shards.owned"] == {key(BASE): 1}
    receiver.flush()
    found = collect(reader)
    assert "kinsumer.shard.lag" not in found and "kinsumer.shard.oldest_record.age" not in found
    assert found["kinsumer.records.fetched"] == {key(shard_attrs()): 1, key(shard_attrs(OTHER)): 1}  # counters stay


def test_shards_of_another_stream_carry_that_stream(
    receiver: OpenTelemetryStatReceiver, reader: InMemoryMetricReader
) -> None:
    receiver.shard_gained(SHARD)
    receiver.shard_gained(f"refunds/{SHARD}")
    receiver.shard_gained(f"refunds/{OTHER}")
    receiver.checkpoint_written(f"refunds/{OTHER}")
    found = collect(reader)
    assert found["kinsumer.shards.owned"] == {key(BASE): 1, key({**BASE, "messaging.destination.name": "refunds"}): 2}
    assert found["kinsumer.checkpoints"] == {key(shard_attrs(OTHER, "refunds")): 1}


def test_handoffs_count_and_time_by_outcome(receiver: OpenTelemetryStatReceiver, reader: InMemoryMetricReader) -> None:
    receiver.handoff(SHARD, 0.5, True)
    receiver.handoff(SHARD, 1.5, True)
    receiver.handoff(OTHER, 10.0, False)
    found = collect(reader)
    clean = key(shard_attrs(**{"kinsumer.handoff.outcome": "clean"}))
    timed_out = key(shard_attrs(OTHER, **{"kinsumer.handoff.outcome": "timed_out"}))
    assert found["kinsumer.handoffs"] == {clean: 2, timed_out: 1}
    assert found["kinsumer.handoff.duration"] == {clean: (2, 2.0), timed_out: (1, 10.0)}


def test_errors_retried_and_abandoned_by_operation_and_error(
    receiver: OpenTelemetryStatReceiver, reader: InMemoryMetricReader
) -> None:
    receiver.error_retried("GetRecords", "ProvisionedThroughputExceededException")
    receiver.error_retried("GetRecords", "ProvisionedThroughputExceededException")
    receiver.error_retried("UpdateItem", "ThrottlingException")
    receiver.error_abandoned("UpdateItem", "ThrottlingException")
    found = collect(reader)
    errors = {"messaging.system": "aws.kinesis", "messaging.consumer.group.name": APP}
    get = key({**errors, "rpc.method": "GetRecords", "error.type": "ProvisionedThroughputExceededException"})
    update = key({**errors, "rpc.method": "UpdateItem", "error.type": "ThrottlingException"})
    assert found["kinsumer.errors.retried"] == {get: 2, update: 1}
    assert found["kinsumer.errors.abandoned"] == {update: 1}


def test_handler_outcomes_by_shard_reason_and_error(
    receiver: OpenTelemetryStatReceiver, reader: InMemoryMetricReader
) -> None:
    receiver.handler_failed(SHARD, "ValueError")
    receiver.handler_failed(SHARD, "ValueError")
    receiver.handler_failed(SHARD, "KeyError")
    receiver.handler_retried(SHARD)
    receiver.handler_timed_out(OTHER, 2.0)
    receiver.record_expired(OTHER, 3600.0)
    receiver.dead_lettered(OTHER, "expired")
    receiver.dead_lettered(SHARD, "raised")
    receiver.hook_failed(SHARD, "on_revoked", "RuntimeError")
    receiver.malformed_aggregates(OTHER, 4)
    found = collect(reader)
    assert found["kinsumer.handler.failures"] == {
        key(shard_attrs(**{"error.type": "ValueError"})): 2, key(shard_attrs(**{"error.type": "KeyError"})): 1,
    }  # fmt: skip
    assert found["kinsumer.handler.retries"] == {key(shard_attrs()): 1}
    assert found["kinsumer.handler.timeouts"] == {key(shard_attrs(OTHER)): 1}
    assert found["kinsumer.records.expired"] == {key(shard_attrs(OTHER)): 1}
    assert found["kinsumer.records.dead_lettered"] == {
        key(shard_attrs(OTHER, **{"kinsumer.dead_letter.reason": "expired"})): 1,
        key(shard_attrs(**{"kinsumer.dead_letter.reason": "raised"})): 1,
    }
    assert found["kinsumer.hook.failures"] == {
        key(shard_attrs(**{"kinsumer.hook": "on_revoked", "error.type": "RuntimeError"})): 1
    }
    assert found["kinsumer.aggregates.malformed"] == {key(shard_attrs(OTHER)): 4}


def test_instruments_carry_units_in_seconds_and_counts(
    receiver: OpenTelemetryStatReceiver, reader: InMemoryMetricReader
) -> None:
    receiver.record_delivered(SHARD, 0.1)
    receiver.records_fetched(SHARD, 1, 10)
    receiver.record_age(SHARD, 1.0)
    receiver.handoff(SHARD, 1.0, True)
    data = reader.get_metrics_data()
    assert data is not None
    units = {m.name: m.unit for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics}
    assert units == {
        "messaging.client.consumed.messages": "{message}", "kinsumer.records.fetched": "{record}",
        "kinsumer.records.handled": "{record}",
        "kinsumer.shard.lag": "s", "kinsumer.shard.oldest_record.age": "s", "kinsumer.delivery.latency": "s",
        "kinsumer.handoffs": "{handoff}", "kinsumer.handoff.duration": "s",
    }  # fmt: skip


def test_deliveries_from_many_threads_are_all_counted_while_the_sdk_collects(
    receiver: OpenTelemetryStatReceiver, reader: InMemoryMetricReader
) -> None:
    threads, each = 8, 5000
    start = threading.Barrier(threads + 1)
    done = threading.Event()

    def deliver() -> None:
        start.wait(10)
        for _ in range(each):
            receiver.record_delivered(SHARD, 0.01)

    def collect_meanwhile() -> None:
        start.wait(10)
        while not done.is_set():
            collect(reader)

    workers = [threading.Thread(target=deliver) for _ in range(threads)]
    collector = threading.Thread(target=collect_meanwhile)
    for t in [*workers, collector]:
        t.start()
    for t in workers:
        t.join(60)
    done.set()
    collector.join(60)
    assert not any(t.is_alive() for t in [*workers, collector])
    consumed = collect(reader)["messaging.client.consumed.messages"]
    assert consumed == {key(shard_attrs(**{"messaging.operation.name": "receive"})): threads * each}


def test_without_a_provider_the_receiver_uses_the_global_one() -> None:
    # the global MeterProvider can be set once per process: in a process of its own
    script = textwrap.dedent(
        """
        from opentelemetry import metrics
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from kinsumer.otel_metrics import OpenTelemetryStatReceiver

        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        receiver = OpenTelemetryStatReceiver("orders", "billing")
        for _ in range(3):
            receiver.record_delivered("shardId-000000000000", 0.01)
        receiver.checkpoint_written("shardId-000000000000")
        found = {
            m.name: [getattr(p, "value", None) for p in m.data.data_points]
            for r in reader.get_metrics_data().resource_metrics for s in r.scope_metrics for m in s.metrics
        }
        print(found["messaging.client.consumed.messages"], found["kinsumer.checkpoints"])
        """
    )
    repo = pathlib.Path(__file__).resolve().parents[2]
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=repo, capture_output=True, text=True, timeout=60, check=False,
        env=plain_python_env(),
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["[3]", "[1]"]


def test_opentelemetry_missing_gives_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    monkeypatch.delitem(sys.modules, "kinsumer.otel_metrics")
    monkeypatch.delattr(kinsumer, "otel_metrics")  # restored afterwards, like sys.modules
    fresh = importlib.import_module("kinsumer.otel_metrics")  # importing the module works without it ...
    with pytest.raises(ImportError, match=r"pip install 'pykinsumer\[otel\]'"):
        fresh.OpenTelemetryStatReceiver(STREAM, APP)  # ... the receiver needs it


def test_the_receiver_is_importable_from_kinsumer_metrics() -> None:
    import kinsumer.metrics

    assert kinsumer.metrics.OpenTelemetryStatReceiver is kinsumer.otel_metrics.OpenTelemetryStatReceiver


def test_dynamodb_calls_are_db_client_operation_duration_by_operation_table_and_error(
    receiver: OpenTelemetryStatReceiver, reader: InMemoryMetricReader
) -> None:
    receiver.dynamodb_call("PutItem", "clients", 0.25, None)
    receiver.dynamodb_call("PutItem", "clients", 0.75, None)
    receiver.dynamodb_call("UpdateItem", "checkpoints", 0.5, "ConditionalCheckFailedException")
    db = {"db.system.name": "aws.dynamodb", "messaging.consumer.group.name": APP}
    beat = key({**db, "db.operation.name": "PutItem", "db.collection.name": f"{APP}_clients"})
    refused = key(
        {
            **db,
            "db.operation.name": "UpdateItem",
            "db.collection.name": f"{APP}_checkpoints",
            "error.type": "ConditionalCheckFailedException",
        }
    )
    assert collect(reader)["db.client.operation.duration"] == {beat: (2, 1.0), refused: (1, 0.5)}


def test_records_handled_are_counted_per_shard_and_sampled_as_messaging_process_duration(
    reader: InMemoryMetricReader,
) -> None:
    receiver = OpenTelemetryStatReceiver(STREAM, APP, meter_provider=MeterProvider(metric_readers=[reader]),
                                         latency_sample=2, clock=still)  # fmt: skip
    for seconds in (0.1, 0.2, 0.3):
        receiver.record_handled(SHARD, seconds)
    receiver.record_handled(OTHER, 0.5)
    found = collect(reader)
    assert found["kinsumer.records.handled"] == {key(shard_attrs()): 3, key(shard_attrs(OTHER)): 1}
    process = {"messaging.operation.name": "process"}
    assert found["messaging.process.duration"] == {
        key(shard_attrs(**process)): (2, pytest.approx(0.4)),  # the 1st and the 3rd
        key(shard_attrs(OTHER, **process)): (1, 0.5),
    }
