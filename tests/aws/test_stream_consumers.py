"""Registering and deregistering enhanced fan-out consumers (moto in-process, and a scripted client)."""

from __future__ import annotations

from typing import Any

import botocore.exceptions
import pytest

from kinsumer import KinsumerError
from kinsumer.aws.stream_consumers import (
    deregister_stream_consumer,
    describe_stream_consumer,
    ensure_stream_consumer,
    stream_arn,
)


def arn_of(kinesis: Any, name: str) -> str:
    return str(kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamARN"])


def test_a_consumer_is_registered_once_and_found_by_every_later_call(kinesis: Any) -> None:
    kinesis.create_stream(StreamName="s", ShardCount=1)
    stream = arn_of(kinesis, "s")
    first = ensure_stream_consumer(kinesis, stream, "app")
    assert ensure_stream_consumer(kinesis, stream, "app") == first
    assert [c["ConsumerARN"] for c in kinesis.list_stream_consumers(StreamARN=stream)["Consumers"]] == [first]
    assert deregister_stream_consumer(kinesis, stream, "app") is True  # (gone afterwards: on kinesis-mock)
    assert describe_stream_consumer(kinesis, stream, "other") is None


def test_the_arn_of_a_stream_identity() -> None:
    assert stream_arn("arn:aws:kinesis:us-east-1:1:stream/s@1700000000000") == "arn:aws:kinesis:us-east-1:1:stream/s"


def client_error(code: str, operation: str) -> botocore.exceptions.ClientError:
    return botocore.exceptions.ClientError({"Error": {"Code": code, "Message": code}}, operation)


class Scripted:
    """A Kinesis client whose consumer goes through the given states; registering can race."""

    def __init__(self, states: list[str | None], register_error: str | None = None) -> None:
        self.states, self.register_error, self.registered = states, register_error, 0

    def describe_stream_consumer(self, StreamARN: str, ConsumerName: str) -> dict[str, Any]:
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        if state is None:
            raise client_error("ResourceNotFoundException", "DescribeStreamConsumer")
        return {"ConsumerDescription": {"ConsumerStatus": state, "ConsumerARN": f"{StreamARN}/consumer/{ConsumerName}"}}

    def register_stream_consumer(self, StreamARN: str, ConsumerName: str) -> dict[str, Any]:
        self.registered += 1
        if self.register_error:
            raise client_error(self.register_error, "RegisterStreamConsumer")
        return {}


def test_a_registration_that_lost_the_race_waits_for_the_winner_s_consumer_to_be_active() -> None:
    kinesis = Scripted([None, "CREATING", "CREATING", "ACTIVE"], register_error="ResourceInUseException")
    slept: list[float] = []
    arn = ensure_stream_consumer(kinesis, "arn:s", "app", sleep=slept.append)  # type: ignore[arg-type]
    assert arn == "arn:s/consumer/app"
    assert kinesis.registered == 1 and len(slept) == 2


def test_a_consumer_that_never_becomes_active_fails_run_with_what_to_check() -> None:
    kinesis = Scripted(["CREATING"])
    with pytest.raises(KinsumerError, match=r"'app' of arn:s is not ACTIVE after 0.2 s \(it is CREATING\)"):
        ensure_stream_consumer(kinesis, "arn:s", "app", timeout=0.2, sleep=lambda s: None)  # type: ignore[arg-type]


def test_a_registration_refused_for_good_is_raised() -> None:
    kinesis = Scripted([None], register_error="AccessDeniedException")
    with pytest.raises(botocore.exceptions.ClientError, match="AccessDenied"):
        ensure_stream_consumer(kinesis, "arn:s", "app", sleep=lambda s: None)  # type: ignore[arg-type]
