import botocore.exceptions
import pytest

from kinsumer.aws.error_codes import is_transient
from kinsumer.aws.retry import Stopped, counted, retry_call
from kinsumer.clock import installed
from tests.helpers import CountingStats


def client_error(code: str, status: int = 400) -> botocore.exceptions.ClientError:
    return botocore.exceptions.ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Op"
    )


@pytest.mark.parametrize(
    "exc",
    [
        client_error("ProvisionedThroughputExceededException"),
        client_error("ThrottlingException"),
        client_error("LimitExceededException"),
        client_error("InternalFailure", 500),
        client_error("ServiceUnavailable", 503),
        client_error("Whatever", 502),
        botocore.exceptions.EndpointConnectionError(endpoint_url="http://127.0.0.1:1"),
        botocore.exceptions.ConnectionClosedError(endpoint_url="http://127.0.0.1:1"),
        botocore.exceptions.ReadTimeoutError(endpoint_url="http://127.0.0.1:1"),
        ConnectionResetError(),
    ],
)
def test_transient(exc: Exception) -> None:
    assert is_transient(exc)


@pytest.mark.parametrize(
    "exc",
    [
        client_error("AccessDeniedException"),
        client_error("ResourceNotFoundException"),
        client_error("ValidationException"),
        client_error("ExpiredIteratorException"),
        client_error("ConditionalCheckFailedException"),
        ValueError(),
    ],
)
def test_not_transient(exc: Exception) -> None:
    assert not is_transient(exc)


def test_transient_errors_are_retried_with_growing_waits_and_counted() -> None:
    failures = [client_error("ThrottlingException")] * 4
    waits: list[float] = []
    stats = CountingStats()

    def flaky() -> str:
        if failures:
            raise failures.pop()
        return "ok"

    assert retry_call(flaky, operation="GetRecords", stats=stats, sleep=waits.append) == "ok"
    assert len(waits) == 4
    assert all(0 <= w <= 5.0 for w in waits)
    assert stats.retried[("GetRecords", "ThrottlingException")] == 4


def test_permanent_errors_are_raised_at_once() -> None:
    calls = 0

    def denied() -> None:
        nonlocal calls
        calls += 1
        raise client_error("AccessDeniedException")

    with pytest.raises(botocore.exceptions.ClientError):
        retry_call(denied, operation="Op", stats=CountingStats(), sleep=lambda s: None)
    assert calls == 1


def test_a_stop_request_ends_retrying_and_the_fault_is_counted_as_abandoned() -> None:
    def always() -> None:
        raise client_error("ThrottlingException")

    stats = CountingStats()
    with pytest.raises(Stopped):
        retry_call(always, operation="Op", stats=stats, sleep=lambda s: None, should_stop=lambda: True)
    assert stats.abandoned == [("Op", "ThrottlingException")] and not stats.retried


def test_the_deadline_ends_retrying_with_the_last_error() -> None:
    def always() -> None:
        raise client_error("InternalFailure", 500)

    stats = CountingStats()
    with pytest.raises(botocore.exceptions.ClientError, match="InternalFailure") as raised:
        retry_call(always, operation="Op", stats=stats, sleep=lambda s: None, deadline=0.0)
    # counted once, as abandoned, and marked so that whoever tries again next round does not count it again
    assert stats.abandoned == [("Op", "InternalFailure")] and not stats.retried
    assert counted(raised.value)


def test_a_deadline_that_passes_while_retrying_counts_the_last_fault_as_abandoned() -> None:
    clock = [0.0]

    def always() -> None:
        clock[0] += 1.0
        raise client_error("ThrottlingException")

    class Counted:
        def monotonic(self) -> float:
            return clock[0]

        def wall(self) -> float:
            return clock[0]

        def sleep(self, seconds: float) -> None:
            pass

    stats = CountingStats()
    with pytest.raises(botocore.exceptions.ClientError) as raised, installed(Counted()):
        retry_call(always, operation="Op", stats=stats, deadline=3.5)
    # attempts at t=1, 2, 3 were retried; the one at t=4 was past the deadline
    assert stats.retried[("Op", "ThrottlingException")] == 3
    assert stats.abandoned == [("Op", "ThrottlingException")]
    assert counted(raised.value)


def test_an_error_raised_at_once_is_not_marked_counted() -> None:
    def denied() -> None:
        raise client_error("AccessDeniedException")

    with pytest.raises(botocore.exceptions.ClientError) as raised:
        retry_call(denied, operation="Op", stats=CountingStats(), sleep=lambda s: None, deadline=0.0)
    assert not counted(raised.value)


def test_min_wait_is_a_floor_under_every_backoff() -> None:
    failures = [client_error("ProvisionedThroughputExceededException")] * 6
    waits: list[float] = []

    def flaky() -> None:
        if failures:
            raise failures.pop()

    retry_call(flaky, operation="GetRecords", stats=CountingStats(), sleep=waits.append, min_wait=0.25)
    assert len(waits) == 6
    assert all(w >= 0.25 for w in waits)
