"""SubscribeToShard's event stream, parsed in one pass and tolerant of a missing ``initial-response``.

AWS answers SubscribeToShard with an event stream whose first event is an ``initial-response``;
botocore insists on it and raises "First event was not of type initial-response" otherwise.
kinesis-mock (LocalStack's Kinesis, which users develop against) sends none. And botocore
parses each record of an event through its shape model, turning each arrival timestamp into a
local-time datetime through dateutil: about 10 µs per record, five times what the one-pass
GetRecords parser (:mod:`.records_parser`) takes for the same JSON.

:func:`subscribe_to_shard` marks its call; :func:`install` adds a ``before-parse`` handler that,
for a marked call's successful answer only, hands botocore an empty ``initial-response`` (all it
reads of the body) and keeps the connection for :class:`Subscription`, which splits the event
stream with botocore's own message decoder (lengths and CRCs checked), skips a real
``initial-response``, parses each ``SubscribeToShardEvent`` as the GetRecords parser does, and
raises an error event as botocore would (``EventStreamError`` with its code): an
:class:`EventSplitter`, which also reads the subscriptions kinsumer sends itself
(:mod:`.subscription_http`). Other callers of a shared client get botocore's behaviour; a
client without an event system is read through botocore's parse (:class:`Subscription` wraps
its event stream the same way).
"""

from __future__ import annotations

import binascii
import json
import struct
import threading
from collections.abc import Iterator
from typing import Any

import botocore.exceptions
from botocore.eventstream import EventStreamBuffer

from .records_parser import parse_event

__all__ = ["EventSplitter", "Subscription", "event_message", "initial_response", "install", "subscribe_to_shard"]

_EVENT = "before-parse.kinesis.SubscribeToShard"
_UNIQUE_ID = "kinsumer.event_stream"
_OPERATION = "SubscribeToShard"
_calling = threading.local()  # .ours: this thread is in subscribe_to_shard(); .raw: the body the handler kept


def install(kinesis: Any) -> bool:
    """Register the handler on a boto3 Kinesis client (once). False if it has no event system."""
    events = getattr(getattr(kinesis, "meta", None), "events", None)
    if events is None:
        return False
    events.register(_EVENT, _keep_ours, unique_id=_UNIQUE_ID)
    return True


def subscribe_to_shard(kinesis: Any, **params: Any) -> Subscription:
    """SubscribeToShard with ``params`` on ``kinesis``: the subscription's events."""
    _calling.ours, _calling.raw = True, None
    try:
        response = kinesis.subscribe_to_shard(**params)
        raw = _calling.raw
    finally:
        _calling.ours, _calling.raw = False, None
    return Subscription(raw, None) if raw is not None else Subscription(None, response["EventStream"])


def _keep_ours(response_dict: dict[str, Any], **_: Any) -> None:
    if getattr(_calling, "ours", False) and response_dict.get("status_code") == 200:
        body = response_dict.get("body")
        if body is not None and hasattr(body, "stream"):
            _calling.raw = body
            response_dict["body"] = _InitialResponseOnly(body)


class _InitialResponseOnly:
    """What botocore reads of a kept body: an empty ``initial-response`` (the rest is the Subscription's)."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw

    def stream(self) -> Iterator[bytes]:
        yield initial_response()

    def close(self) -> None:
        self._raw.close()


class Subscription:
    """The events of one subscription: each ``SubscribeToShardEvent``'s body, in order."""

    def __init__(self, raw: Any, parsed: Any) -> None:
        self._raw = raw  # the HTTP body, read here; or None and
        self._parsed = parsed  # botocore's event stream (a client without the handler)

    def events(self) -> Iterator[dict[str, Any]]:
        """Each event's body (``Records`` as GetRecords returns them); raises an error event."""
        if self._parsed is not None:
            for event in self._parsed:
                body = event.get("SubscribeToShardEvent")
                if body is not None:
                    yield body
            return
        splitter = EventSplitter()
        for chunk in self._raw.stream():
            yield from splitter.feed(chunk)

    def close(self) -> None:
        """Close the connection (from any thread: a read in progress fails)."""
        (self._raw if self._raw is not None else self._parsed).close()


class EventSplitter:
    """An event stream's bytes, as they arrive, as ``SubscribeToShardEvent`` bodies (as :meth:`Subscription.events`)."""

    def __init__(self) -> None:
        self._buffer: Any = EventStreamBuffer()  # botocore's decoder: lengths and CRCs checked

    def feed(self, chunk: bytes) -> Iterator[dict[str, Any]]:
        """The bodies of the events ``chunk`` completes (iterate them all before the next chunk)."""
        self._buffer.add_data(chunk)
        for message in self._buffer:
            body = _body(message.headers, message.payload)
            if body is not None:
                yield body


def _body(headers: dict[str, Any], payload: bytes) -> dict[str, Any] | None:
    """A ``SubscribeToShardEvent``'s body; None for other events; raises an error event."""
    kind = headers.get(":message-type")
    if kind == "event":
        if headers.get(":event-type") != "SubscribeToShardEvent":
            return None  # the initial-response, or an event type this version does not know
        return parse_event(payload)
    if kind == "exception":
        code = str(headers.get(":exception-type", ""))
        try:
            found = json.loads(payload) if payload else {}
        except ValueError:
            found = {}
        message = str(found.get("message", found.get("Message", ""))) if isinstance(found, dict) else ""
    else:
        code, message = str(headers.get(":error-code", "")), str(headers.get(":error-message", ""))
    raise botocore.exceptions.EventStreamError({"Error": {"Code": code, "Message": message}}, _OPERATION)


def _header(name: str, value: str) -> bytes:
    key, text = name.encode(), value.encode()
    return struct.pack("!B", len(key)) + key + struct.pack("!BH", 7, len(text)) + text  # 7: a string


def event_message(event_type: str, payload: bytes, message_type: str = "event") -> bytes:
    """One event-stream message: an event of ``event_type`` (or an exception of that type) carrying ``payload``."""
    kind_header = ":exception-type" if message_type == "exception" else ":event-type"
    headers = _header(kind_header, event_type) + _header(":message-type", message_type)
    total = 12 + len(headers) + len(payload) + 4  # prelude (with its CRC), headers, payload, message CRC
    prelude = struct.pack("!II", total, len(headers))
    prelude += struct.pack("!I", binascii.crc32(prelude))
    message = prelude + headers + payload
    return message + struct.pack("!I", binascii.crc32(message))


def initial_response() -> bytes:
    """An ``initial-response`` event with an empty JSON body."""
    return event_message("initial-response", b"{}")
