"""SubscribeToShard sent by kinsumer itself and read on an event loop: no thread per subscription.

A subscription's answer is an event stream that lasts up to 5 minutes; read through botocore,
each open subscription holds a thread blocked in a socket read. Here the request is signed as
botocore signs it (:mod:`.lean_endpoint`, which also says where this is allowed: elsewhere
botocore makes the call), its body serialized by botocore's own JSON serializer, and sent over
an :mod:`asyncio` connection (TLS for https). The answer is read through :mod:`.http1`, as
kinsumer's GetRecords reads its answers: its status line and headers, then its body (chunked, with
a ``Content-Length``, or up to the end of the connection) as it arrives, split into events by
:mod:`.event_stream`. Nothing is read faster than the events are taken: the connection's buffer
fills, and TCP tells the server.

Errors are botocore's: an error answer is the ``ClientError`` botocore raises (its code:
ResourceInUseException, LimitExceededException...), and connection faults are the errors
:mod:`.http1` maps them to (a connection that cannot be made is an ``EndpointConnectionError``,
or an ``SSLError`` if the server's certificate is not trusted; one that breaks or ends inside the
answer a ``ConnectionClosedError``, no byte for the client's read timeout a ``ReadTimeoutError``).
Everything here runs on the event loop that reads the subscription; blocking calls (the host
name's look-up) go to the ``io`` the caller gives.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, TypeVar

import botocore.serialize

from . import http1
from .event_stream import EventSplitter
from .lean_endpoint import LeanEndpoint, client_error, per_client

__all__ = ["LeanSubscriber", "LeanSubscription", "lean_subscriber"]

T = TypeVar("T")
#: Runs a blocking call off the event loop (the caller's pool).
Io = Callable[[Callable[[], T]], Awaitable[T]]

_OPERATION = "SubscribeToShard"
_READ = 64 * 1024  # bytes read at a time
_MAX_ERROR = 1024 * 1024  # an error answer's body, at most
_cache: weakref.WeakKeyDictionary[Any, LeanSubscriber | None] = weakref.WeakKeyDictionary()
_cache_lock = threading.Lock()


def lean_subscriber(kinesis: Any) -> LeanSubscriber | None:
    """The lean subscriber of ``kinesis`` (made once per client), or None where botocore must make the call."""
    return per_client(_cache, _cache_lock, kinesis, LeanSubscriber.of)


class LeanSubscriber:
    """Sends SubscribeToShard for one botocore Kinesis client (see the module's description)."""

    def __init__(self, kinesis: Any, endpoint: LeanEndpoint) -> None:
        self.endpoint = endpoint
        self._model = kinesis.meta.service_model.operation_model(_OPERATION)
        self._serializer = botocore.serialize.create_serializer("json")

    @classmethod
    def of(cls, kinesis: Any) -> LeanSubscriber | None:
        """A lean subscriber for ``kinesis``, or None if botocore must make its calls."""
        endpoint = LeanEndpoint.of(kinesis, _OPERATION)
        return None if endpoint is None else cls(kinesis, endpoint)

    def request(self, params: dict[str, Any]) -> bytes:
        """The signed request of a SubscribeToShard with ``params`` (its body as botocore serializes it)."""
        body: bytes = self._serializer.serialize_to_request(params, self._model)["body"]
        return self.endpoint.request(_OPERATION, body)

    async def subscribe(self, params: dict[str, Any], io: Io[Any]) -> LeanSubscription:
        """SubscribeToShard with ``params``: the open subscription, or botocore's exception."""
        request = self.request(params)
        reader, writer = await self._connect(io)
        try:
            try:
                writer.write(request)
                async with asyncio.timeout(self.endpoint.read_timeout):
                    await writer.drain()
                    head = http1.parse_head((await reader.readuntil(b"\r\n\r\n"))[:-4])
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError) as exc:  # not an answer
                raise http1.answer_error(exc, self.endpoint.url) from exc
            subscription = LeanSubscription(reader, writer, head, self.endpoint)
            if head.status != 200:
                data = bytearray()
                async for chunk in subscription.body():
                    data += chunk
                    if len(data) > _MAX_ERROR:
                        break
                raise client_error(head.status, bytes(data), _OPERATION)
            return subscription
        except BaseException:
            writer.transport.abort()
            raise

    async def _connect(self, io: Io[Any]) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        e = self.endpoint
        try:
            addresses = await io(lambda: socket.getaddrinfo(e.hostname, e.port, type=socket.SOCK_STREAM))
        except OSError as exc:
            raise http1.connect_error(exc, e.url) from exc
        failure: BaseException = OSError(f"no address for {e.hostname}")
        for *_, address in addresses:
            try:
                async with asyncio.timeout(e.connect_timeout):
                    return await asyncio.open_connection(
                        address[0], address[1], ssl=e.context, server_hostname=e.hostname if e.context else None,
                        limit=http1.MAX_HEAD,
                    )  # fmt: skip
            except (OSError, TimeoutError) as exc:  # refused, unreachable, TLS; the next address
                failure = exc
        raise http1.connect_error(failure, e.url) from failure


class LeanSubscription:
    """An open subscription: its events as they arrive. Used on the event loop that opened it."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: http1.Head, endpoint: LeanEndpoint
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._head = head
        self._url = endpoint.url
        self._timeout = endpoint.read_timeout

    async def events(self) -> AsyncGenerator[dict[str, Any], None]:
        """Each ``SubscribeToShardEvent``'s body (``Records`` as GetRecords returns them); raises an error event."""
        splitter = EventSplitter()
        async for chunk in self.body():
            for body in splitter.feed(chunk):
                yield body

    async def body(self) -> AsyncGenerator[bytes, None]:
        """The answer's body, piece by piece as it arrives; connection faults as botocore's errors.

        It ends at the body's end (a chunked body's trailers are not read: the connection is not used again).
        """
        body = http1.Body(self._head)
        try:
            while not body.complete:
                data = await self._read(_READ)
                if not data:
                    body.end()  # the end of a body that ends with the connection; else a ProtocolError
                    return
                for piece in body.feed(data):
                    yield piece
        except OSError as exc:  # http1.ProtocolError is one
            raise http1.answer_error(exc, self._url) from exc

    def close(self) -> None:
        """Drop the connection (on the loop)."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: so is the connection
            self._writer.transport.abort()

    async def _read(self, size: int) -> bytes:
        async with asyncio.timeout(self._timeout):
            return await self._reader.read(size)
