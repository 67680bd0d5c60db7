"""kinsumer's own SubscribeToShard (kinsumer/aws/subscription_http.py) against a scripted HTTP server on
127.0.0.1: bodies chunked, with a Content-Length or up to the end of the connection, split anywhere;
error answers as botocore's errors; a connection that breaks; and a reader reading through it."""

from __future__ import annotations

import asyncio
import json
import pathlib
import queue
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import boto3
import botocore.config
import botocore.exceptions
import pytest

from kinsumer.aws import event_stream
from kinsumer.aws.error_codes import error_code, is_in_use, is_transient, unreached
from kinsumer.aws.lean_endpoint import LeanEndpoint
from kinsumer.aws.subscription_http import LeanSubscriber, lean_subscriber
from kinsumer.reading import fanout
from kinsumer.reading.fanout import SubscriptionReader
from kinsumer.reading.position import StartPosition
from tests.helpers import CountingStats
from tests.support.tls import TlsRelay, make_authority
from tests.unit.test_event_stream import records_event

SHARD = "shardId-000000000000"
PARAMS = {"ConsumerARN": "arn:consumer", "ShardId": SHARD, "StartingPosition": {"Type": "TRIM_HORIZON"}}


@attrs.frozen
class Answer:
    """What the server writes on a connection, piece by piece; then it closes it, or holds it open."""

    pieces: list[bytes]
    close: bool = True


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def chunked(body: bytes, chunk: int, *, end: bool = True) -> bytes:
    """``body`` in chunks of ``chunk`` bytes (with a chunk extension now and then), and the last chunk."""
    parts = enumerate(pieces(body, chunk))
    out = b"".join(b"%x%s\r\n%s\r\n" % (len(part), b";x=y" if i % 2 else b"", part) for i, part in parts)
    return out + (b"0\r\n\r\n" if end else b"")


def head(status: int = 200, **headers: str) -> bytes:
    lines = "".join(f"{name.replace('_', '-')}: {value}\r\n" for name, value in headers.items())
    return f"HTTP/1.1 {status} X\r\nContent-Type: application/vnd.amazon.eventstream\r\n{lines}\r\n".encode()


class Server:
    """An HTTP/1.1 server on 127.0.0.1, on an event loop thread of its own: each connection reads one
    request and writes the next scripted answer (a piece a loop turn, so the client reads them apart)."""

    def __init__(self) -> None:
        self.answers: queue.Queue[Answer] = queue.Queue()
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []  # headers, JSON body
        self._connections: set[asyncio.Task[Any]] = set()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="test-http-server", daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _start(self) -> asyncio.Server:
        return await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            lines = (await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")[1:]
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines if line)}
            body = await reader.readexactly(int(headers["content-length"]))
            self.requests.append((headers, json.loads(body)))
            answer = self.answers.get(timeout=10)
            for piece in answer.pieces:
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0)
            if not answer.close:
                await reader.read()  # until the client goes
        finally:
            writer.close()

    async def _stop(self) -> None:
        self._server.close()
        for task in self._connections:
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.stop()


def client(url: str) -> Any:
    config = botocore.config.Config(read_timeout=5, connect_timeout=5, retries={"mode": "standard", "max_attempts": 1})
    return boto3.client("kinesis", endpoint_url=url, region_name="us-east-1", aws_access_key_id="test",
                        aws_secret_access_key="test", config=config)  # fmt: skip


def subscriber(url: str) -> LeanSubscriber:
    kinesis = client(url)
    return LeanSubscriber(kinesis, LeanEndpoint(kinesis, urllib.parse.urlsplit(url)))


async def blocking(fn: Callable[[], Any]) -> Any:
    return fn()


def events_of(server: Server, answer: Answer) -> list[list[str]]:
    """The sequence numbers of each event a subscription receives from ``answer``."""
    server.answers.put(answer)

    async def read() -> list[list[str]]:
        subscription = await subscriber(server.url).subscribe(PARAMS, blocking)
        try:
            return [[r["SequenceNumber"] for r in body["Records"]] async for body in subscription.events()]
        finally:
            subscription.close()

    return asyncio.run(read())


STREAM = event_stream.initial_response() + records_event(0, 3) + records_event(3, 1) + records_event(4, 2)
EXPECTED = [["49000", "49001", "49002"], ["49003"], ["49004", "49005"]]


@pytest.mark.parametrize("chunk", [1, 7, 100, 100_000])
@pytest.mark.parametrize("write", [1, 5, 64, 100_000])
def test_a_chunked_body_is_read_whatever_its_chunks_and_however_it_is_split_on_the_wire(
    server: Server, chunk: int, write: int
) -> None:
    data = head(Transfer_Encoding="chunked") + chunked(STREAM, chunk)
    assert events_of(server, Answer(pieces(data, write), close=False)) == EXPECTED  # ends at the last chunk


@pytest.mark.parametrize("write", [3, 100_000])
def test_a_body_with_a_content_length_ends_there_and_one_without_at_the_end_of_the_connection(
    server: Server, write: int
) -> None:
    with_length = head(Content_Length=str(len(STREAM))) + STREAM
    assert events_of(server, Answer(pieces(with_length, write), close=False)) == EXPECTED  # not waiting for a close
    assert events_of(server, Answer(pieces(head() + STREAM, write))) == EXPECTED


def test_the_request_is_signed_and_serialized_as_botocore_would(server: Server) -> None:
    at = {"Type": "AT_TIMESTAMP", "Timestamp": 1795500000.5}
    server.answers.put(Answer([head(Content_Length="0")]))

    async def subscribe() -> None:
        (await subscriber(server.url).subscribe({**PARAMS, "StartingPosition": at}, blocking)).close()

    asyncio.run(subscribe())
    ((headers, body),) = server.requests
    assert headers["x-amz-target"] == "Kinesis_20131202.SubscribeToShard"
    assert headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=test/")
    assert body == {**PARAMS, "StartingPosition": at}


def test_error_answers_are_botocores_client_errors_with_the_services_code(server: Server) -> None:
    refusal = json.dumps({"__type": "ResourceInUseException", "message": "Another active subscription"}).encode()
    with pytest.raises(botocore.exceptions.ClientError) as in_use:
        events_of(server, Answer([head(400, Content_Length=str(len(refusal))) + refusal]))
    throttled = b'{"__type": "LimitExceededException"}'
    with pytest.raises(botocore.exceptions.ClientError) as limit:
        events_of(server, Answer([head(400, Transfer_Encoding="chunked"), chunked(throttled, 10)]))
    with pytest.raises(botocore.exceptions.ClientError) as failed:
        events_of(server, Answer([head(503, Content_Length="0")]))
    assert in_use.value.response["Error"]["Code"] == "ResourceInUseException"
    assert in_use.value.response["Error"]["Message"] == "Another active subscription"
    assert in_use.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert is_in_use(in_use.value) and not is_transient(in_use.value)
    assert error_code(limit.value) == "LimitExceededException" and is_transient(limit.value)
    assert error_code(failed.value) == "503" and is_transient(failed.value)


@pytest.mark.parametrize(
    "answer",
    [
        Answer([head(Transfer_Encoding="chunked"), chunked(STREAM, 50, end=False)[:-30]]),  # inside a chunk
        Answer([head(Transfer_Encoding="chunked"), chunked(STREAM, 50, end=False)]),  # between two chunks
        Answer([head(Content_Length=str(len(STREAM))), STREAM[:-10]]),
        Answer([b"HTTP/1.1 200 OK\r\nContent-"]),  # inside the headers
        Answer([]),  # before any answer
    ],
    ids=["in-a-chunk", "between-chunks", "short-of-its-length", "in-the-headers", "no-answer"],
)
def test_a_connection_closed_before_the_answer_ends_is_a_connection_error_that_is_retried(
    server: Server, answer: Answer
) -> None:
    server.answers.put(answer)
    received: list[list[str]] = []

    async def read() -> None:
        subscription = await subscriber(server.url).subscribe(PARAMS, blocking)
        try:
            async for body in subscription.events():
                received.append([r["SequenceNumber"] for r in body["Records"]])
        finally:
            subscription.close()

    with pytest.raises(botocore.exceptions.ConnectionClosedError) as raised:
        asyncio.run(read())
    assert is_transient(raised.value)
    assert received == EXPECTED[: len(received)]  # the events that came whole, in order


def test_a_server_that_does_not_answer_in_the_read_timeout_is_a_read_timeout(server: Server) -> None:
    s = subscriber(server.url)
    s.endpoint.read_timeout = 0.2
    server.answers.put(Answer([head(Transfer_Encoding="chunked")], close=False))  # then nothing

    async def read() -> None:
        subscription = await s.subscribe(PARAMS, blocking)
        try:
            async for _ in subscription.events():
                pass
        finally:
            subscription.close()

    with pytest.raises(botocore.exceptions.ReadTimeoutError):
        asyncio.run(read())


def test_a_port_nobody_listens_on_is_an_endpoint_connection_error() -> None:
    s = Server()
    url = s.url
    s.stop()

    async def subscribe() -> None:
        await subscriber(url).subscribe(PARAMS, blocking)

    with pytest.raises(botocore.exceptions.EndpointConnectionError):
        asyncio.run(subscribe())


def test_a_server_whose_certificate_is_not_trusted_is_botocores_ssl_error(tmp_path: pathlib.Path) -> None:
    with TlsRelay(make_authority(tmp_path), "http://127.0.0.1:9") as relay:  # the handshake fails: no upstream

        async def subscribe() -> None:
            await subscriber(relay.endpoint).subscribe(PARAMS, blocking)

        with pytest.raises(botocore.exceptions.SSLError) as raised:
            asyncio.run(subscribe())
    assert str(raised.value).startswith(f"SSL validation failed for {relay.endpoint}")
    assert "CERTIFICATE_VERIFY_FAILED" in str(raised.value)
    fault = unreached(raised.value)
    assert fault is not None and fault.reason.startswith("certificate verify failed")


def test_a_reader_subscribes_again_after_the_last_record_it_handed_on_when_its_subscription_breaks_or_is_refused(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fanout, "_BACKOFF_FIRST", 0.01)
    monkeypatch.setattr(fanout, "CLOSED_CHECK", 1e9)
    kinesis = client(server.url)
    assert lean_subscriber(kinesis) is not None
    broken = chunked(records_event(0, 2) + records_event(2, 1), 1000, end=False)[:-5]  # breaks in the second event
    refusal = b'{"__type": "ResourceInUseException"}'
    server.answers.put(Answer([head(Transfer_Encoding="chunked"), broken]))
    server.answers.put(Answer([head(400, Content_Length=str(len(refusal))), refusal]))
    server.answers.put(Answer([head(Transfer_Encoding="chunked"), chunked(records_event(2, 2), 1000, end=False)],
                              close=False))  # fmt: skip
    stats = CountingStats()
    r = SubscriptionReader(kinesis, "s", "arn:consumer", SHARD, StartPosition.trim_horizon(), stats=stats)
    try:
        pages = [[x["SequenceNumber"] for x in r.next_page().raw] for _ in range(2)]
    finally:
        r.close()
    assert pages == [["49000", "49001"], ["49002", "49003"]]
    starts = [body["StartingPosition"] for _, body in server.requests]
    after = {"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": "49001"}
    assert starts == [{"Type": "TRIM_HORIZON"}, after, after]
    assert stats.retried[("SubscribeToShard", "ConnectionClosedError")] == 1
    assert stats.retried[("SubscribeToShard", "ResourceInUseException")] == 1
    assert r._finished.is_set()
