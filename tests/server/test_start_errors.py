"""run() against endpoints it cannot reach: a closed port, an unknown host, an untrusted certificate. Each
fails the start within 10 s (the contract; it retried for 30 s before) with an EndpointUnreachable that
names the endpoint and what failed; a server that answers 500 a few times is still started through."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import attrs
import botocore.exceptions
import pytest

from demo.servers import LocalServer, client
from kinsumer import EndpointUnreachable, Kinsumer
from tests.helpers import CountingStats
from tests.relay import KinesisRelay
from tests.server.conftest import SERVER_CONFIG
from tests.support.tls import Authority, TlsRelay

#: How soon run() must give up on an endpoint it never reached (the contract: issue 37).
WITHIN = 10.0


def closed_port() -> str:
    """The URL of a port of 127.0.0.1 nothing listens on (bound for a moment, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def start(endpoint: str, monkeypatch: pytest.MonkeyPatch, stream: str = "clicks", app: str = "app") -> Kinsumer:
    """A Kinsumer whose clients kinsumer makes itself (its own botocore config), sent to ``endpoint``."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    return Kinsumer(stream, app, "worker", attrs.evolve(SERVER_CONFIG, stats=CountingStats()))


def failed_start(k: Kinsumer) -> tuple[EndpointUnreachable, float]:
    """The error run() raised, and how long it took."""
    began = time.monotonic()
    with pytest.raises(EndpointUnreachable) as raised:
        k.run()
    return raised.value, time.monotonic() - began


def test_a_closed_port_fails_the_start_within_seconds_saying_it_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint = closed_port()
    k = start(endpoint, monkeypatch)
    error, took = failed_start(k)
    assert took < WITHIN
    assert error.reason == "connection refused" and error.endpoint.startswith(endpoint)
    assert f"cannot reach {endpoint}/: connection refused; " in str(error)
    assert "check the endpoint URL" in str(error)
    assert isinstance(error.__cause__, botocore.exceptions.EndpointConnectionError)
    with pytest.raises(EndpointUnreachable, match="connection refused"):  # the admin call too (it does not retry)
        k.create_required_tables()


def test_an_unknown_host_fails_the_start_within_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    error, took = failed_start(start("http://kinesis.invalid:4566", monkeypatch))  # .invalid: never a host (RFC 2606)
    assert took < WITHIN
    assert error.reason.startswith("unknown host 'kinesis.invalid'")
    assert "cannot reach http://kinesis.invalid:4566/" in str(error)


def test_an_untrusted_certificate_fails_the_start_at_once_and_a_trusted_one_starts(
    tls: TlsRelay, authority: Authority, app: str, new_stream: Callable[[int], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = new_stream(1)
    error, took = failed_start(start(tls.endpoint, monkeypatch, stream, app))
    assert took < WITHIN
    assert error.reason.startswith("certificate verify failed") and error.code == "SSLError"
    assert f"cannot reach {tls.endpoint}/: certificate verify failed" in str(error) and "AWS_CA_BUNDLE" in str(error)
    assert tls.handshakes_failed > 0
    monkeypatch.setenv("AWS_CA_BUNDLE", str(authority.ca))  # the same endpoint, its CA trusted: it starts
    k = start(tls.endpoint, monkeypatch, stream, app)
    k.run()
    k.stop()


def test_a_server_that_answers_500_twice_is_started_through(
    moto_server: LocalServer, app: str, new_stream: Callable[[int], str]
) -> None:
    stream = new_stream(1)

    def twice(operation: str, n: int) -> str | None:
        return "5xx" if operation == "DescribeStreamSummary" and n <= 2 else None

    with KinesisRelay(moto_server.endpoint, call_fault=twice) as relay:
        stats = CountingStats()
        once = {"retries": {"mode": "standard", "total_max_attempts": 1}}  # kinsumer retries, not botocore
        k = Kinsumer(stream, app, "worker", attrs.evolve(SERVER_CONFIG, stats=stats),
                     kinesis=client(relay.endpoint, "kinesis", **once),
                     dynamodb=client(relay.endpoint, "dynamodb", **once))  # fmt: skip
        k.run()
        k.stop()
    assert relay.call_faults == [("DescribeStreamSummary", "5xx")] * 2
    assert stats.retried[("DescribeStreamSummary", "InternalFailure")] == 2


def test_a_fault_in_the_first_round_after_a_heartbeat_period_is_retried_as_the_rest_of_the_start(
    moto_server: LocalServer, app: str, new_stream: Callable[[int], str]
) -> None:
    """run()'s first membership round retries to run()'s deadline, not to the round's (one heartbeat period):
    on a busy machine a fault could come after the round's deadline, and run() raised it (seen in a fresh
    clone's test run). Here the round's scan of the clients table leaves late, past the period, and is
    answered 500."""
    stream = new_stream(1)

    def members_scan(operation: str, n: int) -> str | None:
        return "5xx" if operation == "Scan" and n == 2 else None  # the 1st: the home stream's, before the round

    with KinesisRelay(moto_server.endpoint, call_fault=members_scan) as relay:
        stats = CountingStats()
        once = {"retries": {"mode": "standard", "total_max_attempts": 1}}  # kinsumer retries, not botocore
        db = client(relay.endpoint, "dynamodb", **once)
        config = attrs.evolve(SERVER_CONFIG, stats=stats)
        scans: list[bytes] = []

        def hold_the_members_scan(request: Any, **_: object) -> None:
            if b"Scan" in request.headers.get("X-Amz-Target", b""):
                scans.append(request.body)
                if len(scans) == 2:
                    time.sleep(config.shard_check_frequency + 0.2)  # the round's deadline passes meanwhile

        db.meta.events.register("before-send.dynamodb", hold_the_members_scan)
        k = Kinsumer(stream, app, "worker", config, kinesis=client(relay.endpoint, "kinesis", **once), dynamodb=db)
        k.run()
        k.stop()
    assert b'_clients", "ConsistentRead": true}' in scans[1]  # the round's: every row of the clients table
    assert relay.call_faults == [("Scan", "5xx")]
    assert stats.retried[("Scan", "InternalFailure")] == 1
