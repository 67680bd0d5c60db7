"""Dead letters in S3 on moto's server, over HTTP: the S3Bucket sink under process(), the claim check of the SQS
and Kinesis sinks, and ``kinsumer dead-letters`` reading each sink back and re-driving it into a stream."""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import pytest

from demo.servers import LocalServer
from kinsumer import ConfigError, Failure, Kinsumer, Record, cli
from kinsumer.dead_letter import KinesisStream, S3Bucket, SqsQueue
from kinsumer.dead_letters.s3 import DEFAULT_PREFIX, key_parts
from kinsumer.writing.aggregation import MAX_RECORD_BYTES
from tests.conftest import unique
from tests.server.test_dead_letter import BAD, FAST, check_envelope, consume, put

pytestmark = pytest.mark.server

TOTAL = 20


def new_bucket(moto: LocalServer) -> str:
    name = unique("dead")
    moto.client("s3").create_bucket(Bucket=name)
    return name


def objects(moto: LocalServer, bucket: str, prefix: str = "") -> dict[str, dict[str, Any]]:
    """Every object under ``prefix``: its key -> its JSON."""
    s3 = moto.client("s3")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]
    return {key: json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read()) for key in keys}


def ids_of(bodies: list[dict[str, Any]]) -> list[int]:
    return sorted(json.loads(base64.b64decode(body["data"]))["id"] for body in bodies)


def run(moto: LocalServer, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = cli.main(["dead-letters", *argv, "--endpoint-url", moto.endpoint])
    except SystemExit as exc:  # a usage error, as argparse's
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def read_stream(moto: LocalServer, stream: str) -> list[dict[str, Any]]:
    """Every record of ``stream`` now, from TRIM_HORIZON."""
    kinesis = moto.client("kinesis")
    found = []
    for shard in kinesis.list_shards(StreamName=stream)["Shards"]:
        iterator = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard["ShardId"],
                                              ShardIteratorType="TRIM_HORIZON")["ShardIterator"]  # fmt: skip
        while iterator:
            answer = kinesis.get_records(ShardIterator=iterator)
            found += answer["Records"]
            iterator = answer.get("NextShardIterator") if answer["Records"] else None
    return found


def big_failure(size: int, stream: str = "clicks") -> Failure:
    now = dt.datetime.now(dt.UTC)
    data = json.dumps({"id": 99, "pad": "x" * size}).encode()
    record = Record(
        data, "key-big", "49000000000000000000000000000000000000000000000001", "shardId-000000000000", now, now
    )
    return Failure(record, 3, "raised", "ValueError: too big", stream, "billing-app", "w")


def test_failed_records_go_to_an_s3_bucket_one_object_each_at_the_documented_keys(
    moto_server: LocalServer, new_stream: Callable[[int], str]
) -> None:
    stream = new_stream(2)
    put(moto_server, stream, TOTAL)
    bucket = new_bucket(moto_server)
    started = dt.datetime.now(dt.UTC)
    handled = consume(moto_server, stream, S3Bucket(bucket, client=moto_server.client("s3")), TOTAL)
    assert sorted(handled) == [i for i in range(TOTAL) if i not in BAD]
    stored = objects(moto_server, bucket)
    assert ids_of(list(stored.values())) == sorted(BAD)  # each failure once, nothing lost
    for key, body in stored.items():
        check_envelope(body, stream)
        parts = key_parts(key, DEFAULT_PREFIX)
        assert parts is not None, key
        assert (parts.application, parts.stream, parts.shard_id) == (body["application"], stream, body["shard_id"])
        failed_at = dt.datetime.fromisoformat(body["failed_at"])
        assert abs(parts.failed_at - failed_at) < dt.timedelta(milliseconds=1) and parts.failed_at >= started
        assert key.startswith(
            f"{DEFAULT_PREFIX}{body['application']}/{stream}/{body['shard_id']}/{failed_at:%Y/%m/%d/%H}/"
        )
        assert key.endswith(f"/{body['sequence_number']}-{int(failed_at.timestamp() * 1000)}.json")


def test_process_refuses_at_its_start_a_bucket_that_does_not_exist_sink_or_claim_check(
    moto_server: LocalServer, new_stream: Callable[[int], str]
) -> None:
    stream = new_stream(1)
    put(moto_server, stream, 3)
    s3, sqs = moto_server.client("s3"), moto_server.client("sqs")
    url = sqs.create_queue(QueueName=unique("dead"))["QueueUrl"]
    handled: list[Record] = []
    k = Kinsumer(stream, unique("app"), "w", FAST, kinesis=moto_server.client("kinesis"),
                 dynamodb=moto_server.client("dynamodb"))  # fmt: skip
    k.create_required_tables()
    with k:
        with pytest.raises(ConfigError, match=r"^dead_letter names the S3 bucket no-such-dead, which does not exist"):
            k.process(handled.append, dead_letter=S3Bucket("no-such-dead", client=s3))
        claimed = SqsQueue(url, client=sqs, claim_check=S3Bucket("no-such-claims", client=s3))
        with pytest.raises(ConfigError, match=r"^dead_letter's claim_check names the S3 bucket no-such-claims"):
            k.process(handled.append, dead_letter=claimed)
        assert handled == []
    S3Bucket(new_bucket(moto_server), client=s3).check()  # one that exists passes


def test_an_envelope_too_large_for_the_queue_goes_to_s3_and_the_queue_gets_a_pointer(
    moto_server: LocalServer, new_stream: Callable[[int], str], capsys: pytest.CaptureFixture[str]
) -> None:
    stream = new_stream(2)
    kinesis = moto_server.client("kinesis")
    for i in range(TOTAL):  # the bad ones make an envelope over 1024 bytes, the others do not matter
        pad = "x" * (900 if i == 3 else 10)
        kinesis.put_record(StreamName=stream, Data=json.dumps({"id": i, "pad": pad}).encode(), PartitionKey=f"key-{i}")
    sqs, s3 = moto_server.client("sqs"), moto_server.client("s3")
    url = sqs.create_queue(QueueName=unique("small"), Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]
    bucket = new_bucket(moto_server)
    sink = SqsQueue(url, client=sqs, claim_check=S3Bucket(bucket, prefix="claims", client=s3))
    consume(moto_server, stream, sink, TOTAL)
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)["Messages"]
    bodies = {json.loads(base64.b64decode(b["data"]))["id"] if "data" in b else 3: b
              for b in (json.loads(m["Body"]) for m in messages)}  # fmt: skip
    assert sorted(bodies) == sorted(BAD)
    pointer = bodies[3]
    assert "data" not in pointer and pointer["claim_check"]["bucket"] == bucket
    assert pointer["claim_check"]["key"].startswith(f"claims/{pointer['application']}/{stream}/")
    whole = objects(moto_server, bucket, "claims/")
    assert list(whole) == [pointer["claim_check"]["key"]]
    check_envelope(next(iter(whole.values())), stream)
    assert {k: v for k, v in next(iter(whole.values())).items() if k != "data"} == {
        k: v for k, v in pointer.items() if k != "claim_check"
    }
    assert "claim_check" not in bodies[11] and ids_of([bodies[11]]) == [11]  # small enough: as before
    message_id = next(m["MessageId"] for m in messages if "claim_check" in json.loads(m["Body"]))
    code, out, _ = run(moto_server, capsys, "show", f"sqs:{url}", message_id)
    shown = json.loads(out)
    assert code == 0 and json.loads(base64.b64decode(shown["data"]))["id"] == 3
    assert shown["claim_check"] == pointer["claim_check"]
    code, out, _ = run(moto_server, capsys, "show", f"sqs:{url}", message_id, "--data")
    assert code == 0 and json.loads(out) == {"id": 3, "pad": "x" * 900}


def test_an_envelope_too_large_for_a_kinesis_record_goes_to_s3_and_the_stream_gets_a_pointer(
    moto_server: LocalServer, new_stream: Callable[[int], str], capsys: pytest.CaptureFixture[str]
) -> None:
    target = new_stream(1)
    s3, kinesis = moto_server.client("s3"), moto_server.client("kinesis")
    bucket = new_bucket(moto_server)
    huge = big_failure(800_000)  # base64 makes the envelope over a record's 1 MiB
    sink = KinesisStream(target, client=kinesis, claim_check=S3Bucket(bucket, client=s3))
    sink(huge)
    [record] = read_stream(moto_server, target)
    pointer = json.loads(record["Data"])
    assert len(record["Data"]) < 2_000 < MAX_RECORD_BYTES and record["PartitionKey"] == "key-big"
    assert "data" not in pointer and pointer["claim_check"]["bucket"] == bucket
    stored = objects(moto_server, bucket)
    assert list(stored) == [pointer["claim_check"]["key"]]
    assert base64.b64decode(stored[pointer["claim_check"]["key"]]["data"]) == huge.record.data
    letter_id = f"shardId-000000000000/{record['SequenceNumber']}"
    code, out, _ = run(moto_server, capsys, "show", f"kinesis:{target}", letter_id, "--data")
    assert code == 0 and out.encode() == huge.record.data
    code, out, err = run(moto_server, capsys, "list", f"kinesis:{target}")
    assert code == 0 and out.startswith(f"{letter_id}\t") and f"claim check s3://{bucket}/" in out
    assert "1 dead letters in kinesis:" in err


def fill(moto: LocalServer, stream: str, sink: Callable[[Failure], object]) -> None:
    put(moto, stream, TOTAL)
    consume(moto, stream, sink, TOTAL)


@pytest.mark.parametrize("kind", ["s3", "sqs", "kinesis"])
def test_dead_letters_are_listed_shown_and_redriven_into_a_stream_from_each_sink(
    kind: str, moto_server: LocalServer, new_stream: Callable[[int], str], capsys: pytest.CaptureFixture[str]
) -> None:
    stream, target = new_stream(2), new_stream(2)
    if kind == "s3":
        bucket = new_bucket(moto_server)
        fill(moto_server, stream, S3Bucket(bucket, prefix="dlq/", client=moto_server.client("s3")))
        sink = f"s3://{bucket}/dlq"
    elif kind == "sqs":
        sqs = moto_server.client("sqs")
        url = sqs.create_queue(QueueName=unique("dead"))["QueueUrl"]
        fill(moto_server, stream, SqsQueue(url, client=sqs))
        sink = f"sqs:{url}"
    else:
        dead = new_stream(1)
        fill(moto_server, stream, KinesisStream(dead, client=moto_server.client("kinesis")))
        sink = f"kinesis:{dead}"

    code, out, err = run(moto_server, capsys, "list", sink, "--json")
    listed = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and ids_of([item["envelope"] for item in listed]) == sorted(BAD), err
    assert f"{len(BAD)} dead letters in {sink}" in err
    for item in listed:
        check_envelope(item["envelope"], stream)
    first = listed[0]
    code, out, _ = run(moto_server, capsys, "show", sink, first["id"])  # an SQS message is visible again
    assert code == 0 and json.loads(out) == first["envelope"]
    code, out, _ = run(moto_server, capsys, "list", sink, "--stream", "another", "--since", "2000-01-01T00:00:00")
    assert code == 0 and out == ""
    code, out, _ = run(moto_server, capsys, "list", sink, "--app", first["envelope"]["application"], "--limit", "1")
    assert code == 0 and len(out.splitlines()) == 1 and "\traised\t2 attempts\t" in out

    deleting = ["--delete"] if kind != "kinesis" else []
    code, out, err = run(moto_server, capsys, "redrive", sink, "--to", target, "--yes", *deleting)
    assert code == 0, err
    assert sorted(line.split("\t")[0] for line in out.splitlines()[:-1]) == sorted(f"sent {i['id']}" for i in listed)
    summary = f"sent {len(BAD)} dead letters of {sink.rstrip('/')}"
    assert out.splitlines()[-1].startswith(summary) and out.splitlines()[-1].endswith(
        f"into {target}; deleted {len(BAD)} from the sink" if deleting else f"into {target}"
    )
    again = read_stream(moto_server, target)
    assert sorted(json.loads(r["Data"])["id"] for r in again) == sorted(BAD)  # each once, nothing lost
    by_id = {json.loads(base64.b64decode(i["envelope"]["data"]))["id"]: i["envelope"] for i in listed}
    for record in again:
        assert record["PartitionKey"] == by_id[json.loads(record["Data"])["id"]]["partition_key"]
    code, out, err = run(moto_server, capsys, "list", sink)
    assert code == 0 and (out == "" if deleting else len(out.splitlines()) == len(BAD)), err


def test_the_sqs_messages_read_are_left_in_the_queue_and_visible_unless_deleted(
    moto_server: LocalServer, new_stream: Callable[[int], str], capsys: pytest.CaptureFixture[str]
) -> None:
    stream, target = new_stream(1), new_stream(1)
    sqs = moto_server.client("sqs")
    url = sqs.create_queue(QueueName=unique("dead"))["QueueUrl"]
    fill(moto_server, stream, SqsQueue(url, client=sqs))
    for argv in (["list", f"sqs:{url}"], ["redrive", f"sqs:{url}", "--to", target, "--yes"]):
        code, _, err = run(moto_server, capsys, *argv, "--visibility-timeout", "600")
        assert code == 0, err
        visible = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
        assert visible["Attributes"]["ApproximateNumberOfMessages"] == str(len(BAD))


def test_what_is_not_a_dead_letter_is_reported_and_left_where_it_is(
    moto_server: LocalServer, new_stream: Callable[[int], str], capsys: pytest.CaptureFixture[str]
) -> None:
    target = new_stream(1)
    s3 = moto_server.client("s3")
    bucket = new_bucket(moto_server)
    sink = S3Bucket(bucket, client=s3)
    sink(big_failure(10))
    s3.put_object(Bucket=bucket, Key=f"{DEFAULT_PREFIX}notes.txt", Body=b"hello")
    code, out, err = run(moto_server, capsys, "redrive", f"s3://{bucket}", "--to", target, "--yes", "--delete")
    assert code == 1 and out.splitlines()[-1].endswith(
        "; deleted 1 from the sink; 1 unreadable left where they are (see above)"
    )
    assert (
        f"kinsumer: {DEFAULT_PREFIX}notes.txt: s3://{bucket}/{DEFAULT_PREFIX}notes.txt is not a kinsumer dead letter"
        in err
    )
    left = s3.list_objects_v2(Bucket=bucket)["Contents"]
    assert [item["Key"] for item in left] == [f"{DEFAULT_PREFIX}notes.txt"]
    assert [json.loads(r["Data"])["id"] for r in read_stream(moto_server, target)] == [99]
    code, _, err = run(moto_server, capsys, "show", f"s3://{bucket}", "no/such/key.json")
    assert (
        code == 1
        and f"has no dead letter 'no/such/key.json' (kinsumer dead-letters list s3://{bucket} lists them)" in err
    )
    code, _, err = run(moto_server, capsys, "redrive", f"kinesis:{target}", "--to", target, "--delete", "--yes")
    assert code == 2 and "--delete: records cannot be deleted from a Kinesis stream" in err
    code, _, err = run(moto_server, capsys, "list", "clicks-dlq")
    assert code == 2 and "a dead-letter sink is s3://BUCKET/PREFIX, sqs:QUEUE_URL or kinesis:STREAM" in err
