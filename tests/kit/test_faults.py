"""Faults a fleet can be put through besides crashes: a client paused (its process stopped, then resumed), and
calls throttled or failing for a while; and the in-memory clients' pause() and fail() they rest on."""

from __future__ import annotations

import collections
import threading

import attrs
import botocore.exceptions
import pytest

from kinsumer import Record, StatReceiver
from kinsumer.testing import FAST_CONFIG, Fleet, LocalAWS, LocalKinesis, PerClient
from tests.helpers import wait_until


def kinesis_with_a_record() -> LocalKinesis:
    kinesis = LocalKinesis()
    kinesis.add_stream("s")
    kinesis.put("s", "x", "k")
    return kinesis


def test_a_paused_connections_calls_wait_until_it_resumes_and_the_others_go_on() -> None:
    kinesis = kinesis_with_a_record()
    paused = kinesis.connection()
    paused.pause()
    answered = threading.Event()
    caller = threading.Thread(target=lambda: (paused.list_shards(StreamName="s"), answered.set()))
    caller.start()
    assert kinesis.list_shards(StreamName="s")["Shards"]  # the service and its other clients go on
    assert not answered.wait(0.2)  # held, as long as it stays paused
    paused.resume()
    assert answered.wait(10)
    caller.join(10)


def test_failed_calls_are_refused_with_the_error_and_its_status_for_a_while_then_answered() -> None:
    kinesis = kinesis_with_a_record()
    faulty = kinesis.connection()
    faulty.fail(0.3, "ServiceUnavailable", operations=["ListShards"])
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        faulty.list_shards(StreamName="s")
    response = refused.value.response
    assert (response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]) == ("ServiceUnavailable", 503)
    assert faulty.describe_stream_summary(StreamName="s")  # another operation is answered
    assert kinesis.list_shards(StreamName="s")  # and so is another connection
    faulty.fail(0.3)  # every call: the default, throttling (400)
    with pytest.raises(faulty.exceptions.ProvisionedThroughputExceededException):
        faulty.describe_stream_summary(StreamName="s")
    wait_until(lambda: _answers(faulty), 10, "the faults' end")
    with pytest.raises(ValueError, match="operations: GetItem not among LocalKinesis's"):
        faulty.fail(1, operations=["GetItem"])
    with pytest.raises(ValueError, match="seconds: how long calls fail, more than 0"):
        faulty.fail(0)


def _answers(kinesis: LocalKinesis) -> bool:
    try:
        kinesis.list_shards(StreamName="s")
    except botocore.exceptions.ClientError:
        return False
    return True


class Counting:
    def __init__(self) -> None:
        self.handled = 0

    def handle(self, record: Record) -> None:
        self.handled += 1


def test_a_paused_client_loses_its_shards_to_the_others_and_what_it_handles_late_is_allowed_twice() -> None:
    aws = LocalAWS()
    stream = aws.stream("clicks", 2)
    made: dict[str, Counting] = {}

    def make(client: str) -> Counting:
        made[client] = Counting()
        return made[client]

    def put(first: int) -> None:
        stream.put_all((str(n), f"key-{n % 11}") for n in range(first, first + 100))

    with Fleet(aws, "clicks", "app", PerClient(make)) as fleet:
        first, second = fleet.start(2)
        wait_until(lambda: bool(fleet.shards(first) and fleet.shards(second)), 30, "each client holding a shard")
        put(0)
        fleet.wait_handled()
        held = fleet.shards(first)
        fleet.pause(first)
        at_pause = made[first].handled
        put(100)
        fleet.wait_handled()  # the paused client's shards were taken: their records were handled by the other
        assert set(held) <= set(fleet.shards(second))
        assert made[first].handled - at_pause <= 1  # a call already under way finishes; no other is made
        fleet.resume(first)  # it learns at its next write that its shards are gone (on_lost), and goes on
        put(200)
        fleet.wait_handled()
    report = fleet.report()
    print(report, report.captures_by_end)
    assert report.ok, str(report)
    assert report.captures_by_end.get("taken", 0) >= len(held)
    assert set(report.duplicates_by_reason) <= {"taken"}


class Retried(StatReceiver):
    def __init__(self) -> None:
        self.errors: collections.Counter[tuple[str, str]] = collections.Counter()

    def error_retried(self, operation: str, error: str) -> None:
        self.errors[(operation, error)] += 1


def test_throttled_and_failing_calls_are_retried_and_nothing_is_lost_or_repeated_without_a_reason() -> None:
    aws = LocalAWS()
    stream = aws.stream("clicks", 2)
    retried = Retried()
    config = attrs.evolve(FAST_CONFIG, stats=retried)
    with Fleet(aws, "clicks", "app", lambda record: None, config=config) as fleet:
        (client,) = fleet.start(1)
        stream.put_all((str(n), f"key-{n % 11}") for n in range(50))
        fleet.wait_handled()
        fleet.fail(client, 0.5, service="dynamodb")  # throttled: shorter than client_record_max_age (1 s)
        fleet.fail(client, 1.0, "ServiceUnavailable", operations=["GetRecords"])  # a 5xx for a second
        stream.put_all((str(n), f"key-{n % 11}") for n in range(50, 100))
        wait_until(lambda: {e for _, e in retried.errors} >= {"ServiceUnavailable"}, 10, "GetRecords retried")
        report = fleet.wait_handled()
        with pytest.raises(ValueError, match="service: kinesis, dynamodb or None"):
            fleet.fail(client, 1, service="sqs")
        with pytest.raises(ValueError, match="operations: GetRecords: not calls of dynamodb"):
            fleet.fail(client, 1, service="dynamodb", operations=["GetRecords"])
    assert report.put == 100 and report.ok, str(report)
    codes = {error for _, error in retried.errors}
    assert {"ProvisionedThroughputExceededException", "ServiceUnavailable"} <= codes, retried.errors
    assert set(report.duplicates_by_reason) <= {"taken"}  # a heartbeat late past 1 s on a loaded machine
