"""kinsumer.metrics on a real Kinsumer against moto's in-process mock: scrape Prometheus, read the log."""

from __future__ import annotations

import logging
import socket
import urllib.request
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kinsumer import Kinsumer, KinsumerError
from kinsumer.metrics import LoggingStatReceiver, PrometheusStatReceiver
from tests.aws.conftest import FAST
from tests.helpers import wait_until

SHARD = "shardId-000000000000"
N = 25


@pytest.fixture
def stream(kinesis: Any) -> str:
    kinesis.create_stream(StreamName="clicks", ShardCount=1)
    return "clicks"


@pytest.fixture
def prometheus() -> Iterator[PrometheusStatReceiver]:
    stats = PrometheusStatReceiver()
    yield stats
    stats.close()


def make(kinesis: Any, db: Any, stats: Any) -> Kinsumer:
    k = Kinsumer("clicks", "app", "worker", attrs.evolve(FAST, stats=stats), kinesis=kinesis, dynamodb=db)
    k.create_required_tables()
    return k


def put(kinesis: Any, count: int) -> list[bytes]:
    payloads = [f"record-{i}".encode() for i in range(count)]
    for p in payloads:
        kinesis.put_record(StreamName="clicks", Data=p, PartitionKey="k")
    return payloads


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    """GET /metrics over HTTP and parse the exposition text: {(name, labels): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert response.status == 200
        text = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples called ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def test_prometheus_metrics_of_a_running_consumer_scraped_over_http(
    kinesis: Any, db: Any, stream: str, prometheus: PrometheusStatReceiver
) -> None:
    payloads = put(kinesis, N)
    k = make(kinesis, db, prometheus)
    k.run()
    try:
        assert [k.next(timeout=10) for _ in range(N)] == payloads
        port = prometheus.serve()
        assert port > 0

        samples = scrape(port)
        assert total(samples, "kinsumer_records_delivered_total") == N
        assert total(samples, "kinsumer_records_delivered_total", shard=SHARD) == N
        assert total(samples, "kinsumer_records_fetched_total") >= N
        assert total(samples, "kinsumer_shards_owned") == 1
        assert total(samples, "kinsumer_delivery_latency_seconds_count") == N
        assert total(samples, "kinsumer_delivery_latency_seconds_bucket", le="+Inf") == N
        assert ("kinsumer_millis_behind_latest", frozenset({("shard", SHARD)})) in samples
        # the first N-1 records were acknowledged by the next() calls after them: a commit follows
        wait_until(lambda: total(scrape(port), "kinsumer_checkpoints_total", shard=SHARD) >= 1, 10, "a checkpoint")
    finally:
        k.stop()

    samples = scrape(port)  # stop() has joined the shard consumer: its handoff is counted
    assert total(samples, "kinsumer_shards_owned") == 0
    assert total(samples, "kinsumer_handoffs_total", outcome="clean") == 1
    assert total(samples, "kinsumer_handoffs_total", outcome="timed_out") == 0
    assert total(samples, "kinsumer_handoff_seconds_count") == 1
    assert total(samples, "kinsumer_millis_behind_latest") == 0  # the lost shard's series is gone
    assert not [key for key in samples if key[0] == "kinsumer_millis_behind_latest"]
    assert total(samples, "kinsumer_records_delivered_total") == N

    prometheus.close()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass  # the port is closed
    prometheus.close()  # idempotent


def test_serve_binds_to_the_loopback_interface_by_default(prometheus: PrometheusStatReceiver) -> None:
    port = prometheus.serve()
    assert prometheus._server is not None
    assert (prometheus._server.address, prometheus._server.port) == ("127.0.0.1", port)
    with pytest.raises(KinsumerError, match="already serving"):
        prometheus.serve()
    prometheus.close()
    again = prometheus.serve()  # a closed receiver can serve again
    assert ("kinsumer_shards_owned", frozenset()) in scrape(again)


def test_logging_receiver_on_a_running_consumer_logs_a_summary(
    kinesis: Any, db: Any, stream: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kinsumer.metrics")
    stats = LoggingStatReceiver(interval=0.2)
    payloads = put(kinesis, N)

    def summaries() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "kinsumer.metrics"]

    with make(kinesis, db, stats) as k:
        assert [k.next(timeout=10) for _ in range(N)] == payloads
        # the reader keeps polling the (empty) shard: one of those calls logs the next summary
        wait_until(lambda: any(f" delivered_total={N} " in line for line in summaries()), 10, "a summary line")
    assert stats.totals()["records_delivered"] == {SHARD: N}
    assert stats.totals()["handoffs_clean"] == 1
    line = next(line for line in summaries() if f" delivered_total={N} " in line)
    assert line.startswith("kinsumer stats interval_s=") and f" fetched_total={N} " in line
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name == "kinsumer.metrics")
    assert not [text for text in summaries() if any(p.decode() in text for p in payloads)]
