"""The OpenTelemetry SDK for the tests: one global TracerProvider per test process, its spans in memory.

The API lets a process set its global provider once: the first test that needs spans sets an SDK
provider (or takes the SDK provider another test set) and adds a span processor exporting to one
:class:`InMemorySpanExporter`. Tests tell their spans apart by their stream's unique name.
"""

from __future__ import annotations

import threading

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = ["exporter", "spans_of"]

_lock = threading.Lock()
_exporter: InMemorySpanExporter | None = None


def exporter() -> InMemorySpanExporter:
    """The process's in-memory exporter of every span of the global (SDK) provider."""
    global _exporter  # noqa: PLW0603 - one per process, as the global provider
    with _lock:
        if _exporter is None:
            provider = trace.get_tracer_provider()
            if not isinstance(provider, TracerProvider):
                trace.set_tracer_provider(TracerProvider())
                provider = trace.get_tracer_provider()
            assert isinstance(provider, TracerProvider), f"the global TracerProvider is a {type(provider).__name__}"
            _exporter = InMemorySpanExporter()
            provider.add_span_processor(SimpleSpanProcessor(_exporter))
        return _exporter


def spans_of(stream: str) -> list[ReadableSpan]:
    """kinsumer's spans of ``stream`` (named ``process <stream>``), in the order they ended."""
    return [span for span in exporter().get_finished_spans() if span.name == f"process {stream}"]
