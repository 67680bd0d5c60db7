"""A minimal HTTP/1.1 client connection for kinsumer's own GetRecords (:mod:`.lean_get_records`).

One request at a time on a kept-alive socket: the request goes out in one ``sendall`` (headers
and body together, ``TCP_NODELAY``), and the answer's status line and headers are parsed by hand
(``Content-Length``, ``Transfer-Encoding: chunked``, ``Connection: close``, or a body that ends
with the connection). :mod:`http.client` sends headers and body in two writes and parses the
headers through :mod:`email`: for the small answers of idle shards that was most of the call.
"""

from __future__ import annotations

import socket
import ssl
from typing import NamedTuple

__all__ = ["MAX_HEAD", "Closed", "Connection", "Head", "ProtocolError", "parse_head"]

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


def parse_head(head: bytes) -> Head:
    """An answer's status line and headers (without the blank line that ends them)."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise ProtocolError(f"not an HTTP/1 status line: {lines[0][:80]!r}")
    status, version = int(parts[1]), parts[0]
    length, chunked, close = None, False, version == b"HTTP/1.0"
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value.strip())
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif name == b"connection":
            token = value.strip().lower()
            close = token == b"close" or (close and token != b"keep-alive")
    return Head(status, length, chunked, close)


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

    def close(self) -> None:
        self._sock.close()

    def exchange(self, request: bytes) -> tuple[int, bytes, bool]:
        """Send ``request`` (complete); the answer's status, its body, and whether the connection stays open."""
        self._sock.sendall(request)
        head = parse_head(self._read_head())
        self.used = True
        close = head.close
        if head.chunked:
            body = self._read_chunked()
        elif head.length is not None:
            body = self._read_exactly(head.length)
        else:  # the body ends with the connection
            body = self._read_to_end()
            close = True
        return head.status, body, not close

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

    def _read_exactly(self, length: int) -> bytes:
        buffer = self._buffer
        while len(buffer) < length:
            try:
                buffer += self._recv()
            except Closed:
                raise ProtocolError("the connection closed inside an answer's body") from None
        with memoryview(buffer) as view:
            body = bytes(view[:length])
        del buffer[:length]
        return body

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

    def _read_chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            size = int(self._read_line().split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while self._read_line():  # trailers, up to the empty line
                    pass
                return b"".join(parts)
            parts.append(self._read_exactly(size))
            self._read_exactly(2)  # the chunk's CRLF

    def _read_to_end(self) -> bytes:
        parts = [bytes(self._buffer)]
        self._buffer.clear()
        while True:
            try:
                parts.append(self._recv())
            except Closed:
                return b"".join(parts)
