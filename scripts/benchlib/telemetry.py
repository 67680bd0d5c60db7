"""What OpenTelemetry costs ``process()`` per record: neither, the metrics receiver (an SDK with a periodic
reader), the default spans (a span per run of a shard's records, an SDK with a batch span processor), a span per
handler call (``handler_spans="call"``), metrics and the default spans, and spans per call with the SDK's
sampler keeping one trace in 100 (the others are non-recording spans).

Each measurement runs in a process of its own (``python -m benchlib.telemetry <endpoint> <variant>``), since an
SDK set as the global provider cannot be unset; the variants take turns, round after round, so the machine's
noise falls on all of them alike. The exporters drop what they are given: the SDK's own work is measured, not
a collector's.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from demo.servers import LocalServer, client
from kinsumer import Config, StatReceiver

from .common import REPO, median
from .handlers import process_in_memory
from .overhead import MemoryKinesis

__all__ = ["VARIANTS", "cpu_per_record"]

VARIANTS = ("neither", "metrics", "spans", "both", "spans per call", "spans per call 1% sampled")
SHARDS, RECORDS, SIZE = 4, 100_000, 100


def cpu_per_record(server: LocalServer, runs: int, records: int = RECORDS) -> dict[str, float]:
    """{variant: median CPU µs per record of process() with a handler doing nothing, from the first record to
    the last (the start and the stop left out)}, over ``runs`` rounds."""
    found: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for _ in range(runs):
        for variant in VARIANTS:
            found[variant].append(_measure(server.endpoint, variant, records))
    return {variant: median(values) for variant, values in found.items()}


def _measure(endpoint: str, variant: str, records: int) -> float:
    here = pathlib.Path(__file__).resolve().parent
    done = subprocess.run(
        [sys.executable, "-m", "benchlib.telemetry", endpoint, variant, str(records)],
        cwd=here.parent, env={**os.environ, "PYTHONPATH": f"{here.parent}:{REPO}"},
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"telemetry bench {variant} failed: {done.stderr[-2000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["cpu_per_record_us"])


def _configure(variant: str) -> object:
    """The SDK of ``variant``; the metrics receiver for "metrics" and "both", else None."""
    from opentelemetry import trace  # noqa: PLC0415
    from opentelemetry.sdk.metrics import MeterProvider  # noqa: PLC0415
    from opentelemetry.sdk.metrics.export import (  # noqa: PLC0415
        MetricExporter,
        MetricExportResult,
        PeriodicExportingMetricReader,
    )
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult  # noqa: PLC0415

    from kinsumer.otel_metrics import OpenTelemetryStatReceiver  # noqa: PLC0415

    class DropSpans(SpanExporter):
        def export(self, spans: Sequence[object]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    class DropMetrics(MetricExporter):
        def export(self, metrics_data: object, timeout_millis: float = 10_000, **kwargs: object) -> MetricExportResult:
            return MetricExportResult.SUCCESS

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return True

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
            pass

    if variant.startswith("spans") or variant == "both":
        from opentelemetry.sdk.trace.sampling import TraceIdRatioBased  # noqa: PLC0415

        provider = TracerProvider(sampler=TraceIdRatioBased(0.01)) if "sampled" in variant else TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(DropSpans()))
        trace.set_tracer_provider(provider)
    if variant in ("metrics", "both"):
        reader = PeriodicExportingMetricReader(DropMetrics(), export_interval_millis=1000)
        return OpenTelemetryStatReceiver("bench", "bench", meter_provider=MeterProvider(metric_readers=[reader]))
    return None


class _Endpoint:
    """The moto server the parent runs, as :func:`~benchlib.handlers.process_in_memory` reaches it."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint

    def client(self, service: str) -> Any:
        return client(self.endpoint, service)


def main(argv: Sequence[str]) -> None:
    endpoint, variant, records = argv[0], argv[1], int(argv[2])
    stats = _configure(variant)
    kinesis = MemoryKinesis("bench", SHARDS, records // SHARDS, SIZE)
    config = Config(stats=stats) if isinstance(stats, StatReceiver) else Config()
    if "per call" in variant:
        config = Config(handler_spans="call")
    measure = process_in_memory(_Endpoint(endpoint), kinesis, config=config)
    assert measure.steady_cpu is not None  # the start and the stop are left out: their costs are not per record
    per_record = measure.steady_cpu / (measure.records - 1) * 1e6
    print(json.dumps({"variant": variant, "cpu_per_record_us": per_record}))


if __name__ == "__main__":
    main(sys.argv[1:])
