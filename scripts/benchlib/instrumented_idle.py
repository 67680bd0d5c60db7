"""CPU of one client holding idle shards with ``opentelemetry-instrumentation-botocore`` on: kinsumer's GetRecords
path against botocore's.

    PYTHONPATH=. python scripts/benchlib/instrumented_idle.py [--shards 128] [--seconds 60] [MODE ...]

MODE is ``lean`` (no instrumentation), ``lean+otel`` (instrumented: kinsumer's own path and span),
``botocore+otel`` (instrumented, and a no-op event hook of the caller's on GetRecords, so the calls go
through botocore and its instrumentation). Each mode runs one client in a process of its own against
moto's server on 127.0.0.1, with an SDK ``TracerProvider`` whose spans go to a batch processor and an
exporter that drops them (what an exporting application pays, but the export). It waits until the client
owns every shard, lets it settle, then reports the client's CPU (user + system, from ``/proc``) over
``--seconds``, its GetRecords per second and the spans it made.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any

SETTLE_SECONDS = 10.0
MODES = ("lean", "lean+otel", "botocore+otel")


def client_main(spec: dict[str, Any]) -> None:
    """The client process: instruments botocore if asked, runs a Kinsumer, writes a status line every 0.5 s."""
    spans = [0]
    if spec["mode"].endswith("+otel"):
        from opentelemetry import trace  # noqa: PLC0415
        from opentelemetry.instrumentation.botocore import BotocoreInstrumentor  # noqa: PLC0415
        from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: PLC0415
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult  # noqa: PLC0415

        class Dropping(SpanExporter):
            def export(self, batch: Sequence[ReadableSpan]) -> SpanExportResult:
                spans[0] += sum(1 for s in batch if s.name == "Kinesis.GetRecords")
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(Dropping()))
        trace.set_tracer_provider(provider)
        BotocoreInstrumentor().instrument()  # type: ignore[no-untyped-call]
    from demo.servers import client  # noqa: PLC0415
    from kinsumer import Config, Kinsumer, StatReceiver  # noqa: PLC0415
    from kinsumer.aws.lean_get_records import lean_for  # noqa: PLC0415

    class Counting(StatReceiver):
        def __init__(self) -> None:
            self.calls = 0

        def records_fetched(self, shard_id: str, count: int, millis_behind_latest: int | None) -> None:
            self.calls += 1

    stats = Counting()
    kinesis = client(spec["endpoint"], "kinesis", max_pool_connections=64)
    if spec["mode"].startswith("botocore"):
        kinesis.meta.events.register("before-call.kinesis.GetRecords", lambda **_: None)  # the caller's own hook
    consumer = Kinsumer(spec["stream"], spec["stream"], "bench", Config(stats=stats), kinesis=kinesis,
                        dynamodb=client(spec["endpoint"], "dynamodb", max_pool_connections=64))  # fmt: skip
    consumer.create_required_tables()
    consumer.run()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with open(spec["out"], "a", buffering=1) as out:
        while not stop.wait(0.5):
            owned = sum(1 for s in consumer.status().shards if s.captured)
            times = os.times()
            line = {"t": time.monotonic(), "owned": owned, "cpu": times.user + times.system, "calls": stats.calls,
                    "spans": spans[0], "lean": lean_for(kinesis) is not None}  # fmt: skip
            out.write(json.dumps(line) + "\n")
    consumer.stop()


def last(path: pathlib.Path) -> dict[str, Any]:
    lines = path.read_text().splitlines() if path.exists() else []
    return json.loads(lines[-1]) if lines else {}


def measure(endpoint: str, shards: int, seconds: float, mode: str) -> dict[str, Any]:
    from demo.servers import client  # noqa: PLC0415

    kinesis = client(endpoint, "kinesis")
    stream = f"idle-{mode.replace('+', '-')}-{int(time.time())}"
    kinesis.create_stream(StreamName=stream, ShardCount=shards)
    kinesis.get_waiter("stream_exists").wait(StreamName=stream, WaiterConfig={"Delay": 0.2})
    out = pathlib.Path(tempfile.mkdtemp(prefix="kinsumer-otel-idle-")) / "status"
    spec = {"endpoint": endpoint, "stream": stream, "mode": mode, "out": str(out)}
    child = subprocess.Popen([sys.executable, __file__, "--client", json.dumps(spec)])
    try:
        deadline = time.monotonic() + 300
        while last(out).get("owned") != shards:
            if time.monotonic() > deadline or child.poll() is not None:
                raise RuntimeError(f"{mode}: the client did not own {shards} shards: {last(out)}")
            time.sleep(0.5)
        time.sleep(SETTLE_SECONDS)
        settled = last(out)
        time.sleep(seconds)
        end = last(out)
    finally:
        child.terminate()
        child.wait(60)
    span = end["t"] - settled["t"]
    return {
        "mode": mode, "shards": shards, "seconds": round(span, 1), "lean_path": end["lean"],
        "cpu_percent": round(100 * (end["cpu"] - settled["cpu"]) / span, 1),
        "get_records_per_s": round((end["calls"] - settled["calls"]) / span, 1),
        "get_records_spans_per_s": round((end["spans"] - settled["spans"]) / span, 1),
    }  # fmt: skip


def main() -> int:
    if "--client" in sys.argv:
        client_main(json.loads(sys.argv[sys.argv.index("--client") + 1]))
        return 0
    parser = argparse.ArgumentParser()
    parser.add_argument("--shards", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("modes", nargs="*", default=list(MODES), choices=MODES)
    args = parser.parse_args()
    from demo.servers import moto_server  # noqa: PLC0415

    with moto_server() as server:
        for mode in args.modes:
            print(json.dumps(measure(server.endpoint, args.shards, args.seconds, mode)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
