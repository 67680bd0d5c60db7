"""What OpenTelemetry costs ``process()`` per record: neither, the metrics receiver (an SDK with a periodic
reader), a span per handler call (an SDK with a batch span processor), both, and spans with the SDK's sampler
keeping one trace in 100 (the others are non-recording spans).

Each measurement runs in a process of its own (``python -m benchlib.telemetry <endpoint> <variant>``), since an
SDK set as the global provider cannot be unset; the variants take turns, round after round, so the machine's
noise falls on all of them alike. The exporters drop what they are given: the SDK's own work is measured, not
a collector's.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from collections.abc import Sequence

from demo.servers import LocalServer

from .common import REPO, median

__all__ = ["VARIANTS", "cpu_per_record"]

VARIANTS = ("neither", "metrics", "spans", "both", "spans 1% sampled")
SHARDS, RECORDS, SIZE = 4, 100_000, 100


def cpu_per_record(server: LocalServer, runs: int, records: int = RECORDS) -> dict[str, float]:
    """{variant: median CPU µs per record of process() with a handler doing nothing}, over ``runs`` rounds."""
    found: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for _ in range(runs):
        for variant in VARIANTS:
            found[variant].append(_measure(server.endpoint, variant, records))
    return {variant: median(values) for variant, values in found.items()}


def _measure(endpoint: str, variant: str, records: int) -> float:
    here = pathlib.Path(__file__).resolve().parent
    done = subprocess.run(
        [sys.executable, "-m", "benchlib.telemetry", endpoint, variant, str(records)],
        cwd=here.parent, env={**_env(), "PYTHONPATH": f"{here.parent}:{REPO}"},
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"telemetry bench {variant} failed: {done.stderr[-2000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["cpu_per_record_us"])


def _env() -> dict[str, str]:
    import os  # noqa: PLC0415

    return dict(os.environ)


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


def main(argv: Sequence[str]) -> None:
    import attrs  # noqa: PLC0415

    from demo.servers import client  # noqa: PLC0415
    from kinsumer import Config, Failure, Kinsumer, Record, StatReceiver  # noqa: PLC0415

    from .overhead import MemoryKinesis  # noqa: PLC0415

    endpoint, variant, records = argv[0], argv[1], int(argv[2])
    stats = _configure(variant)
    kinesis = MemoryKinesis("bench", SHARDS, records // SHARDS, SIZE)
    handled = [0]
    import threading  # noqa: PLC0415
    import time  # noqa: PLC0415
    import uuid  # noqa: PLC0415

    lock = threading.Lock()
    config = attrs.evolve(Config(), stats=stats if isinstance(stats, StatReceiver) else StatReceiver())
    k = Kinsumer("bench", f"bench-{uuid.uuid4().hex[:8]}", "bench", config, kinesis=kinesis,  # type: ignore[arg-type]
                 dynamodb=client(endpoint, "dynamodb"))  # fmt: skip

    def handler(record: Record) -> None:
        with lock:
            handled[0] += 1
            if handled[0] == kinesis.total:
                threading.Thread(target=k.stop, daemon=True).start()

    def sink(failure: Failure) -> None:
        raise RuntimeError(f"a record failed in the benchmark: {failure.error}")

    k.create_required_tables()
    try:
        cpu = time.process_time()
        with k:
            k.process(handler, dead_letter=sink)
        cpu = time.process_time() - cpu
    finally:
        k.delete_tables()
    if handled[0] != kinesis.total:
        raise RuntimeError(f"process() returned after {handled[0]} of {kinesis.total} records")
    print(json.dumps({"variant": variant, "cpu_per_record_us": cpu / kinesis.total * 1e6}))


if __name__ == "__main__":
    main(sys.argv[1:])
