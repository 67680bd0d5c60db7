"""The dead-letter envelope read back (pure): the parser's checks and errors, claim-check pointers, the S3 keys,
and the sink names of ``kinsumer dead-letters``."""

from __future__ import annotations

import base64
import datetime as dt
import json
from typing import Any

import pytest

from kinsumer import Failure, KinsumerError, Record
from kinsumer.dead_letters.envelope import VERSION, BadEnvelope, ClaimCheck, encode, envelope, parse, pointer
from kinsumer.dead_letters.reading import Filters, SinkName, sink_name
from kinsumer.dead_letters.s3 import DEFAULT_PREFIX, KeyParts, key_parts, object_key

ARRIVED = dt.datetime(2026, 11, 25, 8, 0, 0, 123000, tzinfo=dt.UTC)
SEQUENCE = "49590338271490256608559692538361571095921575989136588898"


def failure(data: bytes = b'{"id": 7}', sub: int | None = None, application: str = "billing-app") -> Failure:
    hash_key = "123" if sub is not None else None
    record = Record(data, "user-17", SEQUENCE, "shardId-000000000003", ARRIVED, ARRIVED, sub_sequence_number=sub,
                    explicit_hash_key=hash_key)  # fmt: skip
    error = "ValueError: bad payload"
    return Failure(record, 3, "raised", error, "clicks", application, "worker-1", "ab" * 16, "cd" * 8)


def test_an_envelope_reads_back_as_the_failure_it_was_made_of() -> None:
    made = failure(data=bytes(range(256)), sub=4)
    dead = parse(encode(envelope(made)), "here")
    assert dead.data == bytes(range(256)) and dead.claim_check is None
    assert (dead.stream, dead.shard_id, dead.sequence_number) == (
        "clicks",
        made.record.shard_id,
        made.record.sequence_number,
    )
    assert (dead.sub_sequence_number, dead.partition_key, dead.explicit_hash_key) == (4, "user-17", "123")
    assert (dead.attempts, dead.reason, dead.error) == (3, "raised", "ValueError: bad payload")
    assert (dead.application, dead.client_id) == ("billing-app", "worker-1")
    assert dead.failed_at.tzinfo is not None and abs(dead.failed_at - dt.datetime.now(dt.UTC)) < dt.timedelta(minutes=1)
    assert dead.position == f"shardId-000000000003/{made.record.sequence_number}/4"
    assert dead.fields["trace_id"] == "ab" * 16


def test_a_pointer_is_the_envelope_without_data_with_where_it_is() -> None:
    fields = envelope(failure())
    made = pointer(fields, "dead-bucket", "claims/k.json")
    assert "data" not in made and made["version"] == VERSION == 1
    assert made["claim_check"] == {"bucket": "dead-bucket", "key": "claims/k.json"}
    assert {k: v for k, v in made.items() if k != "claim_check"} == {k: v for k, v in fields.items() if k != "data"}
    dead = parse(encode(made), "a message")
    assert dead.data is None and dead.claim_check == ClaimCheck("dead-bucket", "claims/k.json")
    assert str(dead.claim_check) == "s3://dead-bucket/claims/k.json"


def _broken(**changes: Any) -> bytes:
    fields = {**envelope(failure()), "failed_at": "2026-11-25T08:00:04.500000+00:00"}  # the same in every worker
    for name, value in changes.items():
        if value is ...:
            del fields[name]
        else:
            fields[name] = value
    return encode(fields)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", r"^SQS message m-1 is not a kinsumer dead letter: not JSON"),
        (b"[1, 2]", r"^SQS message m-1 is not a kinsumer dead letter: not a JSON object$"),
        (_broken(version=2), r"has version 2, newer than the 1 this kinsumer reads: upgrade kinsumer"),
        (_broken(version=0), r"field 'version' must be 1 or more, not 0"),
        (_broken(version="1"), r"field 'version' must be an integer, not '1'"),
        (_broken(version=...), r"^SQS message m-1: field 'version' is missing$"),
        (_broken(data="%%%"), r"field 'data' is not base64"),
        (_broken(data=...), r"field 'data' is missing"),
        (_broken(partition_key=None), r"field 'partition_key' is null"),
        (_broken(shard_id=3), r"field 'shard_id' must be a string, not 3"),
        (_broken(attempts=True), r"field 'attempts' must be an integer, not True"),
        (_broken(sub_sequence_number="2"), r"field 'sub_sequence_number' must be an integer"),
        (_broken(failed_at="yesterday"), r"field 'failed_at' must be an ISO 8601 time, not 'yesterday'"),
        (_broken(claim_check="s3://b/k"), r"field 'claim_check' must be an object"),
        (_broken(claim_check={"bucket": "b"}), r"field 'claim_check.key' must be an object key, not None"),
        (_broken(claim_check={"bucket": "", "key": "k"}), r"field 'claim_check.bucket' must be a bucket name"),
    ],
)
def test_what_is_not_an_envelope_is_an_error_naming_the_field(body: bytes, message: str) -> None:
    with pytest.raises(BadEnvelope, match=message) as info:
        parse(body, "SQS message m-1")
    assert isinstance(info.value, KinsumerError) and isinstance(info.value, ValueError)


def test_fields_added_after_the_first_envelopes_may_be_missing() -> None:
    body = _broken(trace_id=..., span_id=..., client_id=..., application=..., explicit_hash_key=..., error=None)
    dead = parse(body, "old")
    assert (dead.application, dead.client_id, dead.error, dead.explicit_hash_key) == ("", "", "", None)


def test_a_key_names_application_stream_shard_hour_and_position_and_reads_back() -> None:
    fields = envelope(failure(sub=4))
    fields["failed_at"] = "2026-11-25T09:59:58.250000+01:00"  # 08:59:58.25 UTC
    key = object_key(fields, DEFAULT_PREFIX)
    ms = int(dt.datetime(2026, 11, 25, 8, 59, 58, 250000, tzinfo=dt.UTC).timestamp() * 1000)
    sequence = fields["sequence_number"]
    assert key == f"kinsumer-dead-letters/billing-app/clicks/shardId-000000000003/2026/11/25/08/{sequence}-4-{ms}.json"
    assert key_parts(key, DEFAULT_PREFIX) == KeyParts(
        "billing-app", "clicks", "shardId-000000000003", dt.datetime(2026, 11, 25, 8, 59, 58, 250000, tzinfo=dt.UTC)
    )
    fields["sub_sequence_number"] = None
    assert object_key(fields, "p/").endswith(f"/2026/11/25/08/{sequence}-{ms}.json")
    assert key_parts(key, "other/") is None and key_parts(DEFAULT_PREFIX + "notes.txt", DEFAULT_PREFIX) is None


def test_a_name_that_is_not_a_plain_segment_is_escaped_and_an_empty_one_is_an_underscore() -> None:
    fields = envelope(failure(application=""))
    fields["stream"] = "arn:aws:kinesis:us-east-1:123456789012:stream/clicks"
    key = object_key(fields, "")
    assert key.startswith("_/arn%3Aaws%3Akinesis%3Aus-east-1%3A123456789012%3Astream%2Fclicks/shardId-000000000003/")
    parts = key_parts(key, "")
    assert parts is not None and (parts.application, parts.stream) == ("_", fields["stream"])


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("s3://dead-letters", SinkName("s3", "dead-letters", DEFAULT_PREFIX)),
        ("s3://dead-letters/", SinkName("s3", "dead-letters", "")),
        ("s3://dead-letters/billing/dlq", SinkName("s3", "dead-letters", "billing/dlq/")),
        ("sqs:https://sqs.us-east-1.amazonaws.com/1/q", SinkName("sqs", "https://sqs.us-east-1.amazonaws.com/1/q")),
        ("https://sqs.us-east-1.amazonaws.com/1/q", SinkName("sqs", "https://sqs.us-east-1.amazonaws.com/1/q")),
        ("kinesis:clicks-dlq", SinkName("kinesis", "clicks-dlq")),
    ],
)
def test_a_sink_is_named_by_its_scheme(text: str, name: SinkName) -> None:
    assert sink_name(text) == name


@pytest.mark.parametrize("text", ["clicks-dlq", "s3://", "sqs:", "kinesis:", "ftp://x"])
def test_a_sink_name_without_a_known_scheme_says_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match=r"s3://BUCKET/PREFIX, sqs:QUEUE_URL or kinesis:STREAM; got"):
        sink_name(text)


def test_filters_admit_by_application_stream_shard_and_time() -> None:
    when = dt.datetime(2026, 11, 25, 8, tzinfo=dt.UTC)
    assert Filters().admit("a", "s", "shard", when)
    assert Filters(application="a", stream="s", shard_id="shard", since=when).admit("a", "s", "shard", when)
    assert not Filters(application="b").admit("a", "s", "shard", when)
    assert not Filters(stream="t").admit("a", "s", "shard", when)
    assert not Filters(shard_id="other").admit("a", "s", "shard", when)
    assert not Filters(since=when + dt.timedelta(milliseconds=1)).admit("a", "s", "shard", when)


def test_the_data_survives_any_bytes() -> None:
    data = base64.b64decode("AAEC/f7/")
    assert parse(json.dumps({**envelope(failure(data=data))}), "x").data == data
