"""What a record that could not be handled comes with, for the dead-letter sink."""

from __future__ import annotations

from typing import Literal

import attrs

from .record import Record

__all__ = ["Failure", "Reason", "describe"]

#: Why a record failed: its handler raised ``max_attempts`` times (or ran past ``timeout``), processes
#: died while it was in their handler, it was older than ``max_record_age`` when its turn came, or
#: ``process()``'s ``decode`` could not decode it (never retried: the same bytes fail the same way).
Reason = Literal["raised", "crashed", "expired", "timeout", "decode"]


@attrs.frozen
class Failure:
    """A record whose handling failed for good, as handed to the dead-letter sink.

    ``attempts``: the handler's calls (``raised``; ``expired``: the calls before it expired; ``decode``: 0,
    the handler never saw it) or the deaths counted (``crashed``); ``error``: the last error's type and
    message (``ValueError: bad payload``; for ``decode``, the decoder's), or what happened (a crash, the
    record's age). ``stream``, ``application`` and
    ``client_id`` say where it came from. ``trace_id`` and ``span_id`` (hex): the span of the last failed
    handler call, when ``process()`` made one (OpenTelemetry with an SDK configured, see
    docs/observability.md); None otherwise.
    """

    record: Record
    attempts: int
    reason: Reason
    error: str
    stream: str = ""
    application: str = ""
    client_id: str = ""
    trace_id: str | None = None
    span_id: str | None = None


def describe(exc: BaseException) -> str:
    """An exception as ``Type: message`` (the type alone when it has no message)."""
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
