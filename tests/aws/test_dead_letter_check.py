"""The built-in dead-letter sinks are checked when process() starts (moto in-process): a queue or a stream that
does not exist is a ConfigError naming it, before any record is handled, not a failure at the first bad record."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import boto3
import botocore.exceptions
import pytest

from kinsumer import ConfigError, Kinsumer, Record
from kinsumer.dead_letter import KinesisStream, SqsQueue
from tests.aws.conftest import FAST

MISSING_QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/clicks-dlq"


@pytest.fixture
def sqs(aws: None) -> Any:
    return boto3.client("sqs", region_name="us-east-1")


@pytest.fixture
def consumer(kinesis: Any, db: Any) -> Kinsumer:
    kinesis.create_stream(StreamName="clicks", ShardCount=1)
    for i in range(3):
        kinesis.put_record(StreamName="clicks", Data=json.dumps({"id": i}).encode(), PartitionKey="k")
    k = Kinsumer("clicks", "app", "worker", FAST, kinesis=kinesis, dynamodb=db)
    k.create_required_tables()
    return k


def test_a_queue_that_does_not_exist_stops_process_at_its_start_naming_it(consumer: Kinsumer, sqs: Any) -> None:
    handled: list[Record] = []
    with consumer, pytest.raises(ConfigError) as info:
        consumer.process(handled.append, dead_letter=SqsQueue(MISSING_QUEUE, client=sqs))
    message = str(info.value)
    assert message.startswith(f"dead_letter names the SQS queue {MISSING_QUEUE}, which does not exist")
    assert "create it" in message and message.endswith(f"got SqsQueue('{MISSING_QUEUE}')")
    assert info.value.field == "dead_letter"
    assert isinstance(info.value.__cause__, botocore.exceptions.ClientError)
    assert handled == []  # refused before any record went to the handler


def test_a_stream_that_does_not_exist_stops_process_batches_and_aprocess_at_their_start(
    consumer: Kinsumer, kinesis: Any
) -> None:
    sink = KinesisStream("clicks-dead", client=kinesis)

    async def handle(record: Record) -> None:
        raise AssertionError("never called")

    with consumer:
        with pytest.raises(ConfigError, match=r"names the Kinesis stream clicks-dead, which does not exist: create it"):
            consumer.process_batches(lambda records: None, dead_letter=sink)
        with pytest.raises(ConfigError, match=r"got KinesisStream\('clicks-dead'\)"):
            asyncio.run(consumer.aprocess(handle, dead_letter=sink))


def test_sinks_that_exist_pass_their_check(sqs: Any, kinesis: Any) -> None:
    url = sqs.create_queue(QueueName="clicks-dlq", Attributes={"MaximumMessageSize": "2048"})["QueueUrl"]
    queue = SqsQueue(url, client=sqs)
    queue.check()
    assert queue._limit == 2048  # the limit the first failure would have read
    kinesis.create_stream(StreamName="clicks-dead", ShardCount=1)
    KinesisStream("clicks-dead", client=kinesis).check()


class Refusing:
    """A client whose every call is answered with ``code`` (status ``status``)."""

    def __init__(self, code: str, status: int) -> None:
        self.code, self.status = code, status

    def __getattr__(self, operation: str) -> Any:
        def call(**params: Any) -> Any:
            answer: Any = {"Error": {"Code": self.code, "Message": "no"}}
            answer["ResponseMetadata"] = {"HTTPStatusCode": self.status}
            raise botocore.exceptions.ClientError(answer, operation)

        return call


def test_a_queue_this_client_may_not_use_is_refused_with_the_permissions_the_sink_needs() -> None:
    with pytest.raises(ConfigError, match=r"cannot use \(AccessDenied: no\): the sink needs sqs:GetQueueAttributes"):
        SqsQueue(MISSING_QUEUE, client=Refusing("AccessDenied", 403)).check()


@pytest.mark.parametrize(
    ("sink", "code"),
    [
        (SqsQueue(MISSING_QUEUE, client=Refusing("ServiceUnavailable", 503)), "ServiceUnavailable"),
        (KinesisStream("clicks-dead", client=Refusing("LimitExceededException", 400)), "LimitExceededException"),
        (KinesisStream("clicks-dead", client=Refusing("AccessDeniedException", 400)), "AccessDeniedException"),
    ],
)
def test_a_check_that_cannot_be_made_now_is_logged_and_process_goes_on(
    sink: Any, code: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A transient fault, or a stream the sink may write to but not describe (it needs only PutRecord)."""
    caplog.set_level(logging.WARNING, logger="kinsumer")
    sink.check()
    (warning,) = caplog.records
    assert f"could not check the dead-letter sink {sink!r} ({code}: no)" in warning.getMessage()
