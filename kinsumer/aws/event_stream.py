"""SubscribeToShard, tolerant of a server that sends no ``initial-response`` event.

AWS answers SubscribeToShard with an event stream whose first event is an ``initial-response``;
botocore insists on it and raises "First event was not of type initial-response" otherwise,
after it has consumed that first event. kinesis-mock (LocalStack's Kinesis, which users
develop against) sends none: its first event is already a ``SubscribeToShardEvent``.

:func:`install` adds a ``before-parse`` handler to a client: it peeks at the first event of a
successful answer and, only when it is not an ``initial-response``, puts an empty one in front
of it, so botocore's parse goes on as against AWS and no event is lost. Against AWS it changes
nothing. Like :mod:`.records_parser`, it acts only on the calls made through
:func:`subscribe_to_shard`: other callers of a shared client get botocore's behaviour.
"""

from __future__ import annotations

import binascii
import struct
import threading
from collections.abc import Iterator
from typing import Any

from botocore.eventstream import EventStreamBuffer

__all__ = ["event_message", "initial_response", "install", "subscribe_to_shard"]

_EVENT = "before-parse.kinesis.SubscribeToShard"
_UNIQUE_ID = "kinsumer.event_stream"
_calling = threading.local()  # .ours: this thread is in subscribe_to_shard()


def install(kinesis: Any) -> bool:
    """Register the handler on a boto3 Kinesis client (once). False if it has no event system."""
    events = getattr(getattr(kinesis, "meta", None), "events", None)
    if events is None:
        return False
    events.register(_EVENT, _tolerate_ours, unique_id=_UNIQUE_ID)
    return True


def subscribe_to_shard(kinesis: Any, **params: Any) -> dict[str, Any]:
    """SubscribeToShard with ``params`` on ``kinesis``, tolerant if :func:`install` ran on the client."""
    _calling.ours = True
    try:
        return kinesis.subscribe_to_shard(**params)  # type: ignore[no-any-return]
    finally:
        _calling.ours = False


def _tolerate_ours(response_dict: dict[str, Any], **_: Any) -> None:
    if getattr(_calling, "ours", False) and response_dict.get("status_code") == 200:
        body = response_dict.get("body")
        if body is not None and hasattr(body, "stream"):
            response_dict["body"] = _WithInitialResponse(body)


class _WithInitialResponse:
    """The raw event stream, with an empty ``initial-response`` in front unless it has one."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw

    def stream(self) -> Iterator[bytes]:
        chunks = self._raw.stream()
        seen = b""
        buffer: Any = EventStreamBuffer()
        for chunk in chunks:  # until the first whole event
            seen += chunk
            buffer.add_data(chunk)
            first = next(iter(buffer), None)
            if first is not None:
                if first.headers.get(":event-type") != "initial-response":
                    yield initial_response()
                break
        if seen:
            yield seen
        yield from chunks

    def close(self) -> None:
        self._raw.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


def _header(name: str, value: str) -> bytes:
    key, text = name.encode(), value.encode()
    return struct.pack("!B", len(key)) + key + struct.pack("!BH", 7, len(text)) + text  # 7: a string


def event_message(event_type: str, payload: bytes) -> bytes:
    """One event-stream message: an event of ``event_type`` carrying ``payload``."""
    headers = _header(":event-type", event_type) + _header(":message-type", "event")
    total = 12 + len(headers) + len(payload) + 4  # prelude (with its CRC), headers, payload, message CRC
    prelude = struct.pack("!II", total, len(headers))
    prelude += struct.pack("!I", binascii.crc32(prelude))
    message = prelude + headers + payload
    return message + struct.pack("!I", binascii.crc32(message))


def initial_response() -> bytes:
    """An ``initial-response`` event with an empty JSON body."""
    return event_message("initial-response", b"{}")
