"""kinsumer's minimal HTTP/1.1 connection against a scripted server on 127.0.0.1: every way an answer ends."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator

import botocore.exceptions
import pytest

from kinsumer.aws import http1

REQUEST = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
CLOSE = b"<close>"  # as the last piece of an answer: the server closes the connection after it


class Scripted:
    """Accepts connections; answers each request with the next of ``answers`` (a list of byte pieces,
    sent one by one, the last maybe :data:`CLOSE`; None: close the connection instead)."""

    def __init__(self, answers: list[list[bytes] | None]) -> None:
        self.answers = list(answers)
        self.requests: list[bytes] = []
        self.connections = 0
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while self.answers:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                while self.answers:
                    request = conn.recv(65536)
                    if not request:
                        break
                    self.requests.append(request)
                    answer = self.answers.pop(0)
                    if answer is None:
                        break
                    for piece in answer:
                        if piece is CLOSE:
                            break
                        conn.sendall(piece)
                    if answer[-1:] == [CLOSE]:
                        break

    def close(self) -> None:
        self._server.close()
        self._thread.join(10)


@pytest.fixture
def serve() -> Iterator[object]:
    made: list[Scripted] = []

    def make(*answers: list[bytes] | None) -> Scripted:
        made.append(Scripted(list(answers)))
        return made[-1]

    yield make
    for server in made:
        server.close()


def connect(server: Scripted) -> http1.Connection:
    return http1.Connection("127.0.0.1", server.port, context=None, connect_timeout=5, read_timeout=5)


def test_answers_with_a_length_in_pieces_on_one_kept_alive_connection(serve: object) -> None:
    server = serve([b"HTTP/1.1 200 OK\r\nContent-", b"Length: 5\r\n", b"\r\nhel", b"lo"],  # type: ignore[operator]
                   [b"HTTP/1.1 400 Bad Request\r\ncontent-length: 2\r\nX-Other: a:b\r\n\r\n{}"])  # fmt: skip
    connection = connect(server)
    assert connection.exchange(REQUEST) == (200, b"hello", True)
    assert connection.exchange(REQUEST) == (400, b"{}", True)
    assert server.connections == 1 and server.requests == [REQUEST, REQUEST]  # each request in one piece


def test_a_chunked_answer_and_one_that_ends_with_the_connection(serve: object) -> None:
    chunked = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"3\r\nabc\r\n", b"2;x=y\r\nde\r\n0\r\n\r\n"]
    server = serve(chunked, [b"HTTP/1.0 200 OK\r\n\r\nuntil the end", CLOSE])  # type: ignore[operator]
    connection = connect(server)
    assert connection.exchange(REQUEST) == (200, b"abcde", True)
    assert connection.exchange(REQUEST) == (200, b"until the end", False)  # no length: it ends with the connection


def test_connection_close_says_the_connection_does_not_stay_open(serve: object) -> None:
    server = serve([b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"])  # type: ignore[operator]
    assert connect(server).exchange(REQUEST) == (200, b"", False)


def test_a_server_that_closes_says_so_before_an_answer_and_inside_one(serve: object) -> None:
    server = serve(None)  # type: ignore[operator]
    with pytest.raises(http1.Closed):
        connect(server).exchange(REQUEST)
    server = serve([b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", CLOSE])  # type: ignore[operator]
    with pytest.raises(http1.ProtocolError, match="inside an answer's body"):
        connect(server).exchange(REQUEST)


def test_an_answer_that_is_not_http_is_a_protocol_error(serve: object) -> None:
    server = serve([b"SSH-2.0-OpenSSH\r\n\r\n"])  # type: ignore[operator]
    with pytest.raises(http1.ProtocolError, match="status line"):
        connect(server).exchange(REQUEST)


CHUNKED = b"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nTrailer: t\r\n\r\nNEXT"


def fed(body: http1.Body, data: bytes, cuts: list[int]) -> bytes:
    """``data`` fed to ``body`` in the pieces ``cuts`` makes (positions); the body's bytes it gave."""
    parts: list[bytes] = []
    for start, end in zip([0, *cuts], [*cuts, len(data)], strict=True):
        parts += body.feed(data[start:end])
    return b"".join(parts)


@pytest.mark.parametrize("cut", range(len(CHUNKED) + 1))
def test_a_chunked_body_is_framed_however_its_bytes_are_cut(cut: int) -> None:
    body = http1.Body(http1.parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked"))
    assert fed(body, CHUNKED, [cut]) == b"abcde"
    assert body.complete and not body.to_end
    assert body.rest.endswith(b"NEXT") and CHUNKED.endswith(body.rest)  # the trailers and what follows them


def test_a_chunked_body_byte_by_byte() -> None:
    body = http1.Body(http1.parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked"))
    assert fed(body, CHUNKED, list(range(1, len(CHUNKED)))) == b"abcde" and body.complete


@pytest.mark.parametrize("cut", [0, 2, 5, 7])
def test_a_body_with_a_length_ends_there_and_keeps_the_rest(cut: int) -> None:
    body = http1.Body(http1.parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 5"))
    assert fed(body, b"helloHTTP", [cut]) == b"hello"
    assert body.complete and body.rest == b"HTTP"
    empty = http1.Body(http1.parse_head(b"HTTP/1.1 204 No Content\r\nContent-Length: 0"))
    assert empty.complete and empty.feed(b"") == []


def test_a_body_without_framing_ends_with_the_connection_and_others_may_not() -> None:
    body = http1.Body(http1.parse_head(b"HTTP/1.0 200 OK"))
    assert body.to_end and fed(body, b"all of it", [3]) == b"all of it" and not body.complete
    body.end()
    assert body.complete
    for head in (b"HTTP/1.1 200 OK\r\nContent-Length: 9", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked"):
        cut_short = http1.Body(http1.parse_head(head))
        cut_short.feed(b"3\r\nab")
        with pytest.raises(http1.ProtocolError, match="the connection closed inside"):
            cut_short.end()


@pytest.mark.parametrize(
    "data",
    [b"zz\r\n", b"3\nabc", b"3" * (http1.MAX_HEAD + 1)],
    ids=["not-a-size", "a-line-not-ended-by-crlf", "a-line-without-end"],
)
def test_a_chunked_body_framed_wrong_is_a_protocol_error(data: bytes) -> None:
    with pytest.raises(http1.ProtocolError):
        http1.Body(http1.parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked")).feed(data)


def test_a_content_length_that_is_not_a_number_is_a_protocol_error() -> None:
    with pytest.raises(http1.ProtocolError, match="Content-Length"):
        http1.parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: ten")


@pytest.mark.parametrize(
    ("fault", "connecting", "expected"),
    [
        (ConnectionRefusedError(111, "refused"), True, botocore.exceptions.EndpointConnectionError),
        (socket.gaierror(-2, "Name or service not known"), True, botocore.exceptions.EndpointConnectionError),
        (TimeoutError(), True, botocore.exceptions.ConnectTimeoutError),
        (ssl.SSLCertVerificationError(1, "certificate verify failed"), True, botocore.exceptions.SSLError),
        (TimeoutError(), False, botocore.exceptions.ReadTimeoutError),
        (ConnectionResetError(), False, botocore.exceptions.ConnectionClosedError),
        (http1.ProtocolError("not HTTP"), False, botocore.exceptions.ConnectionClosedError),
    ],
)
def test_connection_faults_are_botocores_errors(fault: OSError, connecting: bool, expected: type) -> None:
    mapped = (http1.connect_error if connecting else http1.answer_error)(fault, "http://127.0.0.1:1")
    assert type(mapped) is expected
    assert mapped.kwargs["endpoint_url"] == "http://127.0.0.1:1" and mapped.kwargs["error"] is fault
