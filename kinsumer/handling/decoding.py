"""``process(handler, decode=...)``: the handler gets each record's decoded value with the record.

The decoder runs on the worker's thread, just before the handler (inside its ``timeout`` and its span):
``handler(value, record)``, or for the batch calls ``handler([(value, record), ...])``. A record it
cannot decode raises :class:`Undecodable` before the handler is called, which
:class:`~.attempts.Attempts` (and :class:`~.batches.Batches`, for the records of a batch) sends to the
dead-letter sink at once as a ``decode`` failure: never retried (the same bytes fail the same way), never
handed to the handler, and nothing counted against the crash-loop guard (no process died). The rest of
a batch goes to the handler without them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..failure import describe
from ..record import Record
from .options import Decoder

__all__ = ["Undecodable", "decoding", "decoding_batches"]


class Undecodable(Exception):
    """``decode`` raised on the data of some records: ``errors`` by ``id(record)``; ``error``, the first."""

    def __init__(self, errors: dict[int, Exception]) -> None:
        self.errors = errors
        self.error = next(iter(errors.values()))
        super().__init__(describe(self.error))


def _decoded(decode: Decoder, record: Record) -> Any:
    try:
        return decode(record.data)
    except Exception as exc:  # whatever the decoder raises: the record goes to the sink
        raise Undecodable({id(record): exc}) from exc


def decoding(handler: Callable[[Any, Record], object], decode: Decoder) -> Callable[[Record], object]:
    """``handler(value, record)`` as a handler of records, ``value`` being ``decode(record.data)``."""

    def call(record: Record) -> object:
        return handler(_decoded(decode, record), record)

    return call


def decoding_batches(
    handler: Callable[[list[tuple[Any, Record]]], object], decode: Decoder
) -> Callable[[list[Record]], object]:
    """``handler([(value, record), ...])`` as a handler of record lists; Undecodable (naming every record that
    does not decode) before the handler is called if any does not."""

    def call(records: list[Record]) -> object:
        pairs: list[tuple[Any, Record]] = []
        errors: dict[int, Exception] = {}
        for record in records:
            try:
                pairs.append((decode(record.data), record))
            except Exception as exc:  # noqa: BLE001 - each record's own error, for its Failure
                errors[id(record)] = exc
        if errors:
            raise Undecodable(errors)
        return handler(pairs)

    return call
