"""The tolerant SubscribeToShard parse: an initial-response is put in front only when missing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.eventstream import EventStreamBuffer
from hypothesis import given
from hypothesis import strategies as st

from kinsumer.aws import event_stream

EMPTY_EVENT = json.dumps({"Records": [], "MillisBehindLatest": 0}).encode()
RECORDS = event_stream.event_message("SubscribeToShardEvent", EMPTY_EVENT)


class Raw:
    """A raw HTTP body as botocore's event stream reads it: ``stream()`` yields chunks."""

    def __init__(self, data: bytes, chunk: int) -> None:
        self.data, self.chunk, self.closed = data, chunk, False

    def stream(self) -> Iterator[bytes]:
        for start in range(0, len(self.data), self.chunk):
            yield self.data[start : start + self.chunk]

    def close(self) -> None:
        self.closed = True


def events(data: bytes) -> list[tuple[str, bytes]]:
    buffer: Any = EventStreamBuffer()
    buffer.add_data(data)
    return [(message.headers[":event-type"], message.payload) for message in buffer]


def tolerated(raw: Raw) -> Any:
    response = {"status_code": 200, "body": raw}
    event_stream._calling.ours = True
    try:
        event_stream._tolerate_ours(response)
    finally:
        event_stream._calling.ours = False
    return response["body"]


def test_the_message_encoding_is_what_botocore_decodes() -> None:
    assert events(event_stream.initial_response()) == [("initial-response", b"{}")]
    assert events(RECORDS + RECORDS)[1][0] == "SubscribeToShardEvent"


@given(chunk=st.integers(min_value=1, max_value=200))
def test_a_stream_without_an_initial_response_gets_one_in_front_and_loses_no_event(chunk: int) -> None:
    body = tolerated(Raw(RECORDS + RECORDS, chunk))
    assert [kind for kind, _ in events(b"".join(body.stream()))] == [
        "initial-response",
        "SubscribeToShardEvent",
        "SubscribeToShardEvent",
    ]


@given(chunk=st.integers(min_value=1, max_value=200))
def test_a_stream_as_aws_sends_it_passes_unchanged(chunk: int) -> None:
    data = event_stream.initial_response() + RECORDS
    assert b"".join(tolerated(Raw(data, chunk)).stream()) == data


def test_only_kinsumer_s_own_calls_are_touched_and_close_reaches_the_connection() -> None:
    raw = Raw(RECORDS, 7)
    response = {"status_code": 200, "body": raw}
    event_stream._tolerate_ours(response)  # not inside subscribe_to_shard(): someone else's call
    assert response["body"] is raw
    wrapped = tolerated(raw)
    wrapped.close()
    assert raw.closed


@pytest.mark.parametrize("status", [400, 500])
def test_an_error_answer_is_left_to_botocore(status: int) -> None:
    raw = Raw(b'{"__type": "ResourceNotFoundException"}', 5)
    response = {"status_code": status, "body": raw}
    event_stream._calling.ours = True
    try:
        event_stream._tolerate_ours(response)
    finally:
        event_stream._calling.ours = False
    assert response["body"] is raw
