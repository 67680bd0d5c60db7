"""The lean GetRecords parser gives what botocore's own parser gives, or stands aside."""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import boto3
import botocore.parsers
import botocore.session
import pytest
from hypothesis import given
from hypothesis import strategies as st
from moto import mock_aws

from kinsumer.aws import records_parser

_OUTPUT = botocore.session.get_session().get_service_model("kinesis").operation_model("GetRecords").output_shape


def _botocore(response: dict[str, Any]) -> dict[str, Any]:
    parsed: dict[str, Any] = botocore.parsers.create_parser("json").parse(response, _OUTPUT)
    return parsed


def _ours(response: dict[str, Any]) -> dict[str, Any]:
    """What botocore returns with the hook installed: the hook, then botocore on what is left."""
    response = dict(response)
    customized: dict[str, Any] = {}
    records_parser.parse_get_records(response_dict=response, customized_response_dict=customized)
    parsed = _botocore(response)
    parsed.update(customized)
    return parsed


def _response(body: dict[str, Any], status: int = 200) -> dict[str, Any]:
    return {"status_code": status, "headers": {}, "body": json.dumps(body).encode()}


def _without_metadata(parsed: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in parsed.items() if k != "ResponseMetadata"}


records = st.lists(
    st.fixed_dictionaries(
        {
            "SequenceNumber": st.integers(0, 10**56).map(str),
            # runs of equal timestamps (records written together share one), ints among them
            "ApproximateArrivalTimestamp": st.floats(0, 4e9, allow_nan=False).map(lambda f: round(f, 3))
            | st.sampled_from([1_764_000_000, 1_764_000_000.0, 1_764_000_000.001]),
            "Data": st.binary(max_size=300).map(lambda b: base64.b64encode(b).decode()),
            "PartitionKey": st.text(min_size=1, max_size=256),
        },
        optional={"EncryptionType": st.sampled_from(["NONE", "KMS"])},
    ),
    max_size=20,
)


@given(records, st.integers(0, 10**9))
def test_same_result_as_botocore(raw_records: list[dict[str, Any]], behind: int) -> None:
    body = {
        "Records": raw_records,
        "NextShardIterator": "AAAA/iterator==",
        "MillisBehindLatest": behind,
        "ChildShards": [
            {
                "ShardId": "shardId-000000000002",
                "ParentShards": ["shardId-000000000000"],
                "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "170141183460469231731687303715884105727"},
            }
        ],
    }
    response = _response(body)
    assert _without_metadata(_ours(response)) == _without_metadata(_botocore(response))


def test_error_responses_are_left_to_botocore() -> None:
    body = {"__type": "ExpiredIteratorException", "message": "Iterator expired"}
    response = _response(body, status=400)
    customized: dict[str, Any] = {}
    records_parser.parse_get_records(response_dict=response, customized_response_dict=customized)
    assert customized == {}
    assert response["body"] == json.dumps(body).encode()


def test_an_unexpected_body_is_left_to_botocore() -> None:
    iso_timestamp = {
        "Records": [
            {
                "SequenceNumber": "1",
                "ApproximateArrivalTimestamp": "2026-01-01T00:00:00Z",
                "Data": "",
                "PartitionKey": "k",
            }
        ],
        "NextShardIterator": "it",
    }
    for body in (json.dumps(iso_timestamp).encode(), b"\xbf not json", b""):
        response = {"status_code": 200, "headers": {}, "body": body}
        customized: dict[str, Any] = {}
        records_parser.parse_get_records(response_dict=response, customized_response_dict=customized)
        assert customized == {}
        assert response["body"] == body


PAYLOADS = [bytes([i]) * i for i in range(1, 40)]


def _answers(read: Callable[[Any, str], dict[str, Any]]) -> list[dict[str, Any]]:
    """What a plain client and a client with the parser installed answer to ``read(client, iterator)``."""
    plain = boto3.client("kinesis", region_name="us-east-1")
    installed = boto3.client("kinesis", region_name="us-east-1")
    assert records_parser.install(installed)
    plain.create_stream(StreamName="s", ShardCount=1)
    plain.put_records(StreamName="s", Records=[{"Data": p, "PartitionKey": f"k{i}"} for i, p in enumerate(PAYLOADS)])
    answers = []
    for client in (plain, installed):
        iterator = client.get_shard_iterator(
            StreamName="s", ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON"
        )
        answers.append(read(client, iterator["ShardIterator"]))
    return answers


@mock_aws
def test_a_client_with_the_parser_reads_what_a_plain_client_reads() -> None:
    answers = _answers(lambda client, it: records_parser.get_records(client, ShardIterator=it, Limit=100))
    assert [r["Data"] for r in answers[1]["Records"]] == PAYLOADS
    assert answers[1]["Records"] == answers[0]["Records"]  # timestamps: the same instants
    assert all(r["ApproximateArrivalTimestamp"].tzinfo is dt.UTC for r in answers[1]["Records"])  # ours: UTC
    assert answers[1]["MillisBehindLatest"] == answers[0]["MillisBehindLatest"]
    assert set(answers[1]) == set(answers[0])


@mock_aws
def test_the_users_own_calls_on_a_client_with_the_parser_get_botocores_answer() -> None:
    """A Kinesis client the user passed to kinsumer answers the user's code exactly as before."""
    answers = _answers(lambda client, it: client.get_records(ShardIterator=it, Limit=100))

    def in_detail(response: dict[str, Any]) -> list[tuple[Any, ...]]:  # down to each timestamp's time zone
        return [
            (r["Data"], r["PartitionKey"], r["SequenceNumber"], repr(r["ApproximateArrivalTimestamp"]))
            for r in response["Records"]
        ]

    assert in_detail(answers[0]) and in_detail(answers[1]) == in_detail(answers[0])
    assert not any(r["ApproximateArrivalTimestamp"].tzinfo is dt.UTC for r in answers[1]["Records"])


def test_install_ignores_objects_without_botocore_events() -> None:
    assert records_parser.install(object()) is False


def test_null_fields_are_left_out_as_botocore_leaves_them_out_and_null_records_are_none() -> None:
    body = {"Records": [], "NextShardIterator": None, "MillisBehindLatest": None, "ChildShards": None}
    response = _response(body)
    assert _without_metadata(_ours(response)) == _without_metadata(_botocore(response)) == {"Records": []}
    event = records_parser.parse_event(
        json.dumps({"Records": None, "ContinuationSequenceNumber": "49", "ChildShards": None}).encode()
    )
    assert event == {"Records": [], "ContinuationSequenceNumber": "49"}


def test_an_event_s_records_are_parsed_as_a_get_records_answer_s() -> None:
    record = {"SequenceNumber": "7", "ApproximateArrivalTimestamp": 1_764_000_000.25}
    record |= {"Data": "aGk=", "PartitionKey": "p"}
    arrival = dt.datetime(2025, 11, 24, 16, 0, 0, 250000, dt.UTC)
    expected = {**record, "Data": b"hi", "ApproximateArrivalTimestamp": arrival}
    event = records_parser.parse_event(json.dumps({"Records": [record], "MillisBehindLatest": 0}).encode())
    assert event == {"Records": [expected], "MillisBehindLatest": 0}
    for bad in (b"{", b'{"Records": [{"Data": 5}]}', b'{"Records": "none"}'):
        with pytest.raises(ValueError, match="not a SubscribeToShardEvent"):
            records_parser.parse_event(bad)
