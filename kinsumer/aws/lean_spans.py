"""The span of a GetRecords call kinsumer sends itself, where OpenTelemetry's botocore instrumentation is on.

``opentelemetry-instrumentation-botocore`` traces a call by wrapping botocore's
``BaseClient._make_api_call`` (not with event hooks), so a client it instruments keeps kinsumer's
own GetRecords path (:mod:`.lean_get_records`), which that wrapper never sees. Rather than fall
back to botocore's path (about twice the CPU on idle shards), kinsumer makes the span the
instrumentation would have made: a CLIENT span named ``Kinesis.GetRecords`` with its attributes
(``rpc.system`` ``aws-api``, ``rpc.service`` ``Kinesis``, ``rpc.method`` ``GetRecords``,
``cloud.region``, ``server.address``, ``server.port``, then ``aws.request_id`` and
``http.status_code`` from the answer, and an ERROR status on an error answer or a connection
fault), from the tracer provider the instrumentation was given (else the global one), under the
instrumentation scope ``kinsumer``.

Only while the instrumentation is on (:func:`tracer` looks at ``_make_api_call`` on each call: one
dictionary look-up) and not suppressed; nothing is imported from OpenTelemetry otherwise. Not
done: the ``X-Amzn-Trace-Id`` header the instrumentation adds to each request (a trace's link to
AWS X-Ray), and its ``request_hook`` / ``response_hook``.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import botocore.client

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

__all__ = ["attributes", "tracer"]

_INSTRUMENTATION = "opentelemetry.instrumentation.botocore"
#: [_make_api_call as last seen, the tracer it means]: replaced whole, so a thread never sees half of it
_seen: list[tuple[object, Tracer | None]] = [(None, None)]


def tracer() -> Tracer | None:
    """The tracer of kinsumer's own calls while botocore's OpenTelemetry instrumentation is on, else None."""
    current = botocore.client.BaseClient.__dict__.get("_make_api_call")
    seen, found = _seen[0]
    if current is not seen:
        found = _tracer_of(current)
        _seen[0] = (current, found)
    if found is None:
        return None
    from opentelemetry.instrumentation.utils import is_instrumentation_enabled  # noqa: PLC0415 - imported already

    return found if is_instrumentation_enabled() else None


def _tracer_of(api_call: object) -> Tracer | None:
    """The tracer if ``api_call`` is ``_make_api_call`` wrapped by the botocore instrumentation."""
    if _INSTRUMENTATION not in sys.modules:  # never imported here: only if the application did
        return None
    wrapper = getattr(api_call, "_self_wrapper", None)  # wrapt's FunctionWrapper keeps the wrapper here
    instrumentor = getattr(wrapper, "__self__", None)
    if type(instrumentor).__name__ != "BotocoreInstrumentor":
        return None
    from opentelemetry import trace  # noqa: PLC0415 - the instrumentation imported it

    provider = getattr(getattr(instrumentor, "extension_registry", None), "_tracer_provider", None)
    return trace.get_tracer("kinsumer", tracer_provider=provider)


def attributes(endpoint: Any, operation: str) -> dict[str, str | int]:
    """The attributes the instrumentation gives a call of ``operation`` to ``endpoint`` (a LeanEndpoint) at once."""
    return {
        "rpc.system": "aws-api",
        "rpc.service": "Kinesis",
        "rpc.method": operation,
        "cloud.region": endpoint.region,
        "server.address": endpoint.hostname,
        "server.port": endpoint.port,
    }
