"""``process(handler, decode=...)``: the handler gets each record's decoded value with the record.

The decoder runs on the worker's thread, just before the handler (inside its ``timeout`` and its span).
A record it cannot decode raises :class:`Undecodable`, which :class:`~.attempts.Attempts` sends to the
dead-letter sink at once as a ``decode`` failure: never retried (the same bytes fail the same way), the
handler never called with it, and nothing counted against the crash-loop guard (no process died).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..failure import describe
from ..record import Record
from .options import Decoder

__all__ = ["Undecodable", "decoding"]


class Undecodable(Exception):
    """``decode`` raised ``error`` on a record's data."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        super().__init__(describe(error))


def decoding(handler: Callable[[Any, Record], object], decode: Decoder) -> Callable[[Record], object]:
    """``handler(value, record)`` as a handler of records, ``value`` being ``decode(record.data)``."""

    def call(record: Record) -> object:
        try:
            value = decode(record.data)
        except Exception as exc:  # whatever the decoder raises: the record goes to the sink
            raise Undecodable(exc) from exc
        return handler(value, record)

    return call
