"""The dead-letter sinks over HTTP: SqsQueue on moto's server, KinesisStream on kinesalite; envelopes read back."""

from __future__ import annotations

import base64
import datetime as dt
import json
import threading
from collections.abc import Callable
from typing import Any

import pytest

from demo.servers import LocalServer
from kinsumer import Config, ConfigError, Failure, Kinsumer, Record, WriteError
from kinsumer.dead_letter import KinesisStream, SqsQueue
from tests.conftest import unique
from tests.reshard import new_stream as new_kinesalite_stream

pytestmark = pytest.mark.server

FAST = Config(
    shard_check_frequency=0.5,
    client_record_max_age=2.0,
    commit_frequency=0.25,
    leader_action_frequency=1.0,
    handoff_timeout=2.0,
)
BAD = {3, 11}


def consume(moto: LocalServer, stream: str, sink: Callable[[Failure], object], total: int) -> list[int]:
    """process() over ``stream`` until every record is done; records BAD always fail. The ids handled."""
    k = Kinsumer(stream, unique("app"), "w", FAST, kinesis=moto.client("kinesis"), dynamodb=moto.client("dynamodb"))
    k.create_required_tables()
    handled: list[int] = []
    lock = threading.Lock()

    def finish_once_all_done(count: int) -> None:
        if count >= total:
            threading.Thread(target=k.stop, daemon=True).start()

    def handler(record: Record) -> None:
        rid = json.loads(record.data)["id"]
        if rid in BAD:
            raise ValueError(f"cannot handle {rid}")
        with lock:
            handled.append(rid)
            finish_once_all_done(len(handled) + len(BAD))

    with k:
        k.process(handler, max_attempts=2, backoff=0.01, dead_letter=sink)
    return handled


def put(moto: LocalServer, stream: str, total: int) -> None:
    kinesis = moto.client("kinesis")
    for i in range(total):
        kinesis.put_record(StreamName=stream, Data=json.dumps({"id": i}).encode(), PartitionKey=f"key-{i % 4}")


def check_envelope(body: dict[str, Any], stream: str) -> None:
    assert body["version"] == 1 and body["stream"] == stream and body["reason"] == "raised"
    assert body["attempts"] == 2 and body["error"].startswith("ValueError: cannot handle ")
    assert json.loads(base64.b64decode(body["data"]))["id"] in BAD
    assert body["shard_id"].startswith("shardId-") and int(body["sequence_number"]) > 0
    assert body["partition_key"].startswith("key-") and body["sub_sequence_number"] is None
    assert dt.datetime.fromisoformat(body["approximate_arrival_timestamp"]).tzinfo is not None
    assert body["application"].startswith("app-") and body["client_id"]


def test_failed_records_go_to_an_sqs_queue_as_envelopes(
    moto_server: LocalServer, new_stream: Callable[[int], str]
) -> None:
    stream = new_stream(2)
    put(moto_server, stream, 20)
    sqs = moto_server.client("sqs")
    url = sqs.create_queue(QueueName=unique("dead"))["QueueUrl"]
    handled = consume(moto_server, stream, SqsQueue(url, client=sqs), 20)
    assert sorted(handled) == [i for i in range(20) if i not in BAD]
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"])["Messages"]
    bodies = [json.loads(m["Body"]) for m in messages]
    assert sorted(json.loads(base64.b64decode(b["data"]))["id"] for b in bodies) == sorted(BAD)
    for body, message in zip(bodies, messages, strict=True):
        check_envelope(body, stream)
        assert message["MessageAttributes"]["reason"]["StringValue"] == "raised"


def test_failed_records_go_to_a_kinesis_stream_as_envelopes(
    moto_server: LocalServer, kinesalite: LocalServer, new_stream: Callable[[int], str]
) -> None:
    stream = new_stream(2)
    put(moto_server, stream, 20)
    target_client = kinesalite.client("kinesis")
    target = new_kinesalite_stream(target_client, 1)
    handled = consume(moto_server, stream, KinesisStream(target, client=target_client), 20)
    assert sorted(handled) == [i for i in range(20) if i not in BAD]
    iterator = target_client.get_shard_iterator(
        StreamName=target, ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    records = target_client.get_records(ShardIterator=iterator)["Records"]
    assert len(records) == len(BAD)
    for record in records:
        body = json.loads(record["Data"])
        check_envelope(body, stream)
        assert record["PartitionKey"] == body["partition_key"]


def test_process_refuses_at_its_start_a_queue_or_a_stream_that_does_not_exist(
    moto_server: LocalServer, new_stream: Callable[[int], str]
) -> None:
    """Before, such a sink failed at the first record that failed, and that took process() down."""
    stream = new_stream(1)
    put(moto_server, stream, 5)
    sqs, kinesis = moto_server.client("sqs"), moto_server.client("kinesis")
    gone = sqs.create_queue(QueueName=unique("dead"))["QueueUrl"]
    sqs.delete_queue(QueueUrl=gone)
    handled: list[Record] = []
    k = Kinsumer(stream, unique("app"), "w", FAST, kinesis=kinesis, dynamodb=moto_server.client("dynamodb"))
    k.create_required_tables()
    with k:
        with pytest.raises(ConfigError, match=rf"dead_letter names the SQS queue {gone}, which does not exist"):
            k.process(handled.append, dead_letter=SqsQueue(gone, client=sqs))
        with pytest.raises(ConfigError, match=r"names the Kinesis stream no-such-dlq, which does not exist"):
            k.process(handled.append, dead_letter=KinesisStream("no-such-dlq", client=kinesis))
        assert handled == []
        assert k.next_record(timeout=30) is not None  # the consumer itself runs on


def test_an_envelope_too_large_for_the_sink_is_an_error_that_says_so_never_a_truncation(
    moto_server: LocalServer, kinesalite: LocalServer
) -> None:
    sqs = moto_server.client("sqs")
    url = sqs.create_queue(QueueName=unique("small"), Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]
    now = dt.datetime.now(dt.UTC)
    failure = Failure(Record(b"x" * 2_000, "k", "49000", "shardId-000000000000", now, now), 3, "raised", "E", "s")
    with pytest.raises(WriteError, match=r"SQS message of [\d,]+ bytes: more than the queue's MaximumMessageSize"):
        SqsQueue(url, client=sqs)(failure)
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    huge = Failure(Record(b"x" * 900_000, "k", "49000", "shardId-000000000000", now, now), 1, "crashed", "died", "s")
    target_client = kinesalite.client("kinesis")
    with pytest.raises(WriteError, match=r"Kinesis record of 1,2[\d,]+ bytes .* more than the 1,048,576"):
        KinesisStream(new_kinesalite_stream(target_client, 1), client=target_client)(huge)
