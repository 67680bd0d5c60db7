"""HTTP/1.1 for the calls kinsumer sends itself: an answer's framing, connection faults as botocore's, a connection.

Both :mod:`.lean_get_records` (blocking, a thread per connection) and :mod:`.subscription_http`
(an event loop) read answers through this module: :func:`parse_head` reads an answer's status line
and headers, :class:`Body` its body as they frame it (``Content-Length``, ``Transfer-Encoding:
chunked``, or up to the end of the connection), from the bytes read however they were read; and
:func:`connect_error` / :func:`answer_error` turn a connection's faults into the exceptions
botocore raises for them, so retries and error handling see no difference.

:class:`Connection` is the blocking one: one request at a time on a kept-alive socket, the request
sent in one ``sendall`` (headers and body together, ``TCP_NODELAY``). :mod:`http.client` sends
headers and body in two writes and parses the headers through :mod:`email`: for the small answers
of idle shards that was most of the call.
"""

from __future__ import annotations

import socket
import ssl
from typing import NamedTuple

import botocore.exceptions

__all__ = [
    "MAX_HEAD", "Body", "Closed", "Connection", "Head", "ProtocolError", "answer_error", "connect_error", "parse_head",
]  # fmt: skip

_CHUNK = 256 * 1024  # bytes read from the socket at a time
MAX_HEAD = 64 * 1024  # an answer's status line and headers, at most


class Closed(ConnectionError):
    """The server closed the connection before any byte of the answer."""


class ProtocolError(ConnectionError):
    """The answer was not HTTP/1.x as this client reads it."""


class Head(NamedTuple):
    """An answer's status line and headers, as far as reading its body goes."""

    status: int
    length: int | None  # Content-Length
    chunked: bool  # Transfer-Encoding: chunked
    close: bool  # the connection closes after the answer (Connection: close, HTTP/1.0)
    request_id: str = ""  # x-amzn-RequestId


def parse_head(head: bytes) -> Head:
    """An answer's status line and headers (without the blank line that ends them)."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise ProtocolError(f"not an HTTP/1 status line: {lines[0][:80]!r}")
    status, version = int(parts[1]), parts[0]
    length, chunked, close, request_id = None, False, version == b"HTTP/1.0", ""
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            if not value.strip().isdigit():
                raise ProtocolError(f"not a Content-Length: {value.strip()[:40]!r}")
            length = int(value.strip())
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif name == b"connection":
            token = value.strip().lower()
            close = token == b"close" or (close and token != b"keep-alive")
        elif name == b"x-amzn-requestid":
            request_id = value.strip().decode("ascii", "replace")
    return Head(status, length, chunked, close, request_id)


class Body:
    """One answer's body, framed as its head says: ``Content-Length`` bytes, chunks up to the last one, or all
    that comes up to the end of the connection (:attr:`to_end`).

    Reads no socket: :meth:`feed` takes the connection's next bytes, however they were read, and
    returns the body's bytes among them (chunk sizes and their line ends left out); :attr:`complete`
    turns true at the body's end, and the bytes past it are kept in :attr:`rest` (the next answer's,
    or a chunked body's trailers). :meth:`end` says the connection ended.
    """

    def __init__(self, head: Head) -> None:
        self.to_end = not head.chunked and head.length is None  # the body ends with the connection
        self.complete = head.length == 0 and not head.chunked
        self.rest = b""
        self._chunked = head.chunked
        self._left = 0 if head.chunked or head.length is None else head.length  # the body's (or chunk's) bytes to come
        self._crlf = 0  # bytes of the line end after a chunk's data still to come
        self._line = b""  # a chunk's size line, read in part

    def feed(self, data: bytes) -> list[bytes]:
        """The body's bytes among ``data``, the connection's next bytes."""
        if self.complete:
            self.rest += data
            return []
        if self.to_end:
            return [data] if data else []
        if not self._chunked:
            if len(data) < self._left:
                self._left -= len(data)
                return [data] if data else []
            piece, self.rest = data[: self._left], data[self._left :]
            self._left, self.complete = 0, True
            return [piece]
        return self._chunks(data)

    def end(self) -> None:
        """The connection ended: the end of a body that ends with it; a :class:`ProtocolError` inside any other."""
        if self.to_end:
            self.complete = True
        elif not self.complete:
            inside = "a chunked body" if self._chunked else "an answer's body"
            raise ProtocolError(f"the connection closed inside {inside}")

    def _chunks(self, data: bytes) -> list[bytes]:
        pieces: list[bytes] = []
        at, size = 0, len(data)
        while at < size:
            if self._left:  # a chunk's data
                taken = min(self._left, size - at)
                pieces.append(data[at : at + taken])
                at += taken
                self._left -= taken
                self._crlf = 0 if self._left else 2
            elif self._crlf:  # the line end after a chunk's data
                skipped = min(self._crlf, size - at)
                at += skipped
                self._crlf -= skipped
            else:  # a chunk's size line
                end = data.find(b"\n", at)
                if end < 0:
                    self._line += data[at:]
                    if len(self._line) > MAX_HEAD:
                        raise ProtocolError("a chunk's size line passed 64 KiB")
                    break
                line, self._line = self._line + data[at : end + 1], b""
                at = end + 1
                if not line.endswith(b"\r\n"):
                    raise ProtocolError(f"not a chunk's size line: {line[:40]!r}")
                self._left = _chunk_size(line[:-2])
                if not self._left:  # the last chunk
                    self.complete, self.rest = True, data[at:]
                    break
        return pieces


def _chunk_size(line: bytes) -> int:
    try:
        return int(line.split(b";", 1)[0].strip() or b"0", 16)
    except ValueError:
        raise ProtocolError(f"not a chunk size: {line[:40]!r}") from None


def connect_error(exc: BaseException, url: str) -> botocore.exceptions.BotoCoreError:
    """A connection to ``url`` that could not be made (its host's look-up, TCP, TLS), as botocore raises it:
    ``SSLError`` when the TLS handshake failed (``CERTIFICATE_VERIFY_FAILED``: a certificate not trusted),
    ``ConnectTimeoutError`` when it timed out, else ``EndpointConnectionError``; ``exc`` kept as its ``error``."""
    if isinstance(exc, ssl.SSLError):
        return botocore.exceptions.SSLError(endpoint_url=url, error=exc)
    if isinstance(exc, TimeoutError):
        return botocore.exceptions.ConnectTimeoutError(endpoint_url=url, error=exc)
    return botocore.exceptions.EndpointConnectionError(endpoint_url=url, error=exc)


def answer_error(exc: BaseException, url: str) -> botocore.exceptions.BotoCoreError:
    """A fault on an open connection to ``url`` (sending a request, reading its answer), as botocore raises it:
    ``ReadTimeoutError`` when no byte came within the read timeout; ``ConnectionClosedError`` when the
    connection broke or ended inside the answer, or the answer was not HTTP/1.x. ``exc`` kept as its ``error``."""
    if isinstance(exc, TimeoutError):
        return botocore.exceptions.ReadTimeoutError(endpoint_url=url, error=exc)
    return botocore.exceptions.ConnectionClosedError(endpoint_url=url, error=exc)


class Connection:
    """A socket to one server; :meth:`exchange` sends a request and reads its answer."""

    def __init__(
        self, host: str, port: int, *, context: ssl.SSLContext | None, connect_timeout: float, read_timeout: float
    ) -> None:
        sock = socket.create_connection((host, port), timeout=connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if context is not None:
                sock = context.wrap_socket(sock, server_hostname=host)
            sock.settimeout(read_timeout)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._buffer = bytearray()  # bytes read past the last answer (none, with one request at a time)
        self.used = False  # an exchange went through it: the server may have closed it since
        self.request_id = ""  # the last answer's x-amzn-RequestId

    def close(self) -> None:
        self._sock.close()

    def exchange(self, request: bytes) -> tuple[int, bytes, bool]:
        """Send ``request`` (complete); the answer's status, its body, and whether the connection stays open."""
        self._sock.sendall(request)
        head = parse_head(self._read_head())
        self.used = True
        self.request_id = head.request_id
        body = Body(head)
        parts = body.feed(bytes(self._buffer))
        self._buffer.clear()
        while not body.complete:
            try:
                data = self._recv()
            except Closed:
                body.end()  # the end of a body that ends with the connection; else a ProtocolError
                break
            parts += body.feed(data)
        self._buffer += body.rest
        if head.chunked:
            while self._read_line():  # trailers, up to the empty line
                pass
        return head.status, b"".join(parts), not (head.close or body.to_end)

    def _recv(self) -> bytes:
        data = self._sock.recv(_CHUNK)
        if not data:
            raise Closed("the server closed the connection")
        return data

    def _read_head(self) -> bytes:
        buffer = self._buffer
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end >= 0:
                head = bytes(buffer[:end])
                del buffer[: end + 4]
                return head
            if len(buffer) > MAX_HEAD:
                raise ProtocolError("an answer's headers passed 64 KiB")
            try:
                buffer += self._recv()
            except Closed:
                if buffer:
                    raise ProtocolError("the connection closed inside an answer's headers") from None
                raise

    def _read_line(self) -> bytes:
        buffer = self._buffer
        while (end := buffer.find(b"\r\n")) < 0:
            try:
                buffer += self._recv()
            except Closed:
                raise ProtocolError("the connection closed inside a chunked body") from None
        line = bytes(buffer[:end])
        del buffer[: end + 2]
        return line
