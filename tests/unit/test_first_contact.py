"""run()'s patience with an endpoint it never reached (kinsumer/aws/first_contact.py), the faults that say so
(error_codes.unreached), retry_call's give_up_on, and the KinsumerError a caller gets for them."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable

import botocore.exceptions
import pytest

from kinsumer import AWSError, EndpointUnreachable
from kinsumer.aws.error_codes import is_transient, to_kinsumer_error, unreached
from kinsumer.aws.first_contact import FirstContact
from kinsumer.aws.retry import counted, retry_call
from tests.helpers import CountingStats

URL = "http://127.0.0.1:1/"


def refused(url: str = URL) -> botocore.exceptions.EndpointConnectionError:
    return botocore.exceptions.EndpointConnectionError(endpoint_url=url, error=ConnectionRefusedError(111, "refused"))


def unknown_host() -> botocore.exceptions.EndpointConnectionError:
    return botocore.exceptions.EndpointConnectionError(
        endpoint_url="http://kinesis.invalid:4566/", error=socket.gaierror(-2, "Name or service not known")
    )


def untrusted() -> botocore.exceptions.SSLError:
    cause = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    return botocore.exceptions.SSLError(endpoint_url="https://127.0.0.1:1/", error=cause)


def server_error() -> botocore.exceptions.ClientError:
    return botocore.exceptions.ClientError(
        {"Error": {"Code": "InternalFailure", "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": 500}}, "Op"
    )


def test_the_faults_of_an_endpoint_never_reached_say_what_failed() -> None:
    fault = unreached(refused())
    assert fault is not None and fault.reason == "connection refused" and not fault.lasting
    assert fault.endpoint == URL
    fault = unreached(unknown_host())
    assert fault is not None and fault.reason == "unknown host 'kinesis.invalid' (Name or service not known)"
    assert fault.lasting  # the DNS answered that the name has no address
    no_answer = socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
    fault = unreached(botocore.exceptions.EndpointConnectionError(endpoint_url="http://h:1/", error=no_answer))
    assert fault is not None and fault.reason == "host 'h' not resolved (Temporary failure in name resolution)"
    assert not fault.lasting  # the DNS did not answer: it may next time
    fault = unreached(untrusted())
    assert fault is not None and fault.reason.startswith("certificate verify failed") and fault.lasting


def test_a_cause_is_found_through_the_chain_botocore_and_urllib3_make() -> None:
    try:
        try:
            raise ConnectionRefusedError(111, "Connection refused")
        except OSError as exc:
            raise OSError("Failed to establish a new connection") from exc
    except OSError as wrapped:
        error = botocore.exceptions.EndpointConnectionError(endpoint_url=URL, error=wrapped)
    fault = unreached(error)
    assert fault is not None and fault.reason == "connection refused"


@pytest.mark.parametrize(
    "exc",
    [
        botocore.exceptions.ConnectionClosedError(endpoint_url=URL),
        botocore.exceptions.ReadTimeoutError(endpoint_url=URL),
        botocore.exceptions.ConnectTimeoutError(endpoint_url=URL),
        botocore.exceptions.EndpointConnectionError(endpoint_url=URL),  # no cause: nothing said what failed
        server_error(),
        ConnectionRefusedError(),  # not botocore's
    ],
)
def test_other_faults_are_not_of_an_endpoint_never_reached(exc: Exception) -> None:
    assert unreached(exc) is None


def test_they_stay_transient_as_botocore_has_them() -> None:
    assert is_transient(refused()) and is_transient(unknown_host()) and is_transient(untrusted())


def test_the_kinsumer_error_names_the_endpoint_what_failed_and_what_to_do() -> None:
    error = to_kinsumer_error(refused(), "run()")
    assert isinstance(error, EndpointUnreachable) and isinstance(error, AWSError)
    assert error.endpoint == URL and error.reason == "connection refused" and error.code == "EndpointConnectionError"
    assert str(error).startswith(f"run() failed: EndpointConnectionError: cannot reach {URL}: connection refused; ")
    assert "check the endpoint URL" in str(error)
    error = to_kinsumer_error(untrusted(), "run()")
    assert isinstance(error, EndpointUnreachable) and error.code == "SSLError"
    assert "certificate verify failed" in str(error) and "AWS_CA_BUNDLE" in str(error)
    assert "unknown host 'kinesis.invalid'" in str(to_kinsumer_error(unknown_host(), "run()"))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def failing(clock: Clock, faults: list[BaseException], step: float = 0.5) -> tuple[list[int], object]:
    """A call that takes ``step`` seconds and raises the next of ``faults`` (then succeeds); its call count."""
    calls = [0]

    def call() -> str:
        calls[0] += 1
        clock.now += step
        if faults:
            raise faults.pop(0)
        return "ok"

    return calls, call


def test_a_refused_endpoint_is_tried_again_for_the_patience_from_its_first_try_then_given_up() -> None:
    clock, stats = Clock(), CountingStats()
    contact = FirstContact(2.0, clock)
    calls, call = failing(clock, [refused() for _ in range(100)])
    with pytest.raises(botocore.exceptions.EndpointConnectionError) as raised:
        retry_call(contact.watched(URL, call), operation="DescribeTable", stats=stats,  # type: ignore[arg-type]
                   sleep=lambda s: None, give_up_on=lambda e: contact.gives_up(URL, e))  # fmt: skip
    assert calls[0] == 4  # at 0.5, 1.0 and 1.5 s it was tried again; at 2.0 s it was given up
    assert stats.retried[("DescribeTable", "EndpointConnectionError")] == 3
    assert stats.abandoned == [("DescribeTable", "EndpointConnectionError")] and counted(raised.value)


@pytest.mark.parametrize("fault", [untrusted, unknown_host])
def test_an_untrusted_certificate_or_an_unknown_host_is_given_up_at_once(fault: Callable[[], Exception]) -> None:
    clock = Clock()
    contact = FirstContact(2.0, clock)
    calls, call = failing(clock, [fault() for _ in range(100)])
    with pytest.raises(type(fault())):
        retry_call(contact.watched(URL, call), operation="Op", stats=CountingStats(),  # type: ignore[arg-type]
                   sleep=lambda s: None, give_up_on=lambda e: contact.gives_up(URL, e))  # fmt: skip
    assert calls[0] == 1


def test_once_an_endpoint_answered_its_connection_faults_are_retried_as_any_transient_fault() -> None:
    clock = Clock()
    contact = FirstContact(2.0, clock)
    # a 500 (the server is there), then it restarts: refused for 10 s, then it answers
    calls, call = failing(clock, [server_error()] + [refused() for _ in range(20)])
    result = retry_call(contact.watched(URL, call), operation="Op", stats=CountingStats(),  # type: ignore[arg-type]
                        sleep=lambda s: None, deadline=time.monotonic() + 30,
                        give_up_on=lambda e: contact.gives_up(URL, e))  # fmt: skip
    assert result == "ok" and calls[0] == 22
    # and so are they in the start's later calls to it, not those to another endpoint it never reached
    assert not contact.gives_up(URL, untrusted())
    assert contact.gives_up("https://other:443", untrusted())


def test_an_answered_call_also_counts_as_reaching_the_endpoint() -> None:
    contact = FirstContact(0.0, Clock())
    assert contact.watched(URL, lambda: 1)() == 1
    assert not contact.gives_up(URL, refused())
    assert contact.gives_up("http://elsewhere/", refused())  # no patience, never reached


def test_other_transient_faults_are_never_given_up_by_it() -> None:
    contact = FirstContact(0.0, Clock())
    for fault in (server_error(), botocore.exceptions.ConnectionClosedError(endpoint_url=URL)):
        assert not contact.gives_up(URL, fault)


def test_the_waits_end_with_the_patience_while_the_endpoint_was_never_reached() -> None:
    clock = Clock()
    contact = FirstContact(3.0, clock)
    assert contact.wait(URL, 5.0) == 5.0  # not tried yet
    fault = refused()

    def refusing() -> None:
        raise fault

    with pytest.raises(botocore.exceptions.EndpointConnectionError):
        contact.watched(URL, refusing)()
    clock.now += 1.0
    assert contact.wait(URL, 5.0) == 2.0 and contact.wait(URL, 0.5) == 0.5
    clock.now += 5.0
    assert contact.wait(URL, 5.0) == 0.0  # the patience is over: the next try at once, the last
    assert contact.watched(URL, lambda: "answered")() == "answered"
    assert contact.wait(URL, 5.0) == 5.0  # reached: waits as asked
