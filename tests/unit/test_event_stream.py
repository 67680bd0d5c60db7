"""SubscribeToShard's event stream parsed in one pass: events, records, error events, other callers."""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import botocore.exceptions
import pytest
from botocore.eventstream import EventStreamBuffer
from hypothesis import given
from hypothesis import strategies as st

from kinsumer.aws import event_stream
from kinsumer.aws.event_stream import Subscription

ARRIVED = 1795500000.125


def records_event(first: int, count: int) -> bytes:
    records = [
        {
            "SequenceNumber": str(49_000 + i),
            "ApproximateArrivalTimestamp": ARRIVED,
            "Data": base64.b64encode(b"payload %d" % i).decode(),
            "PartitionKey": f"k{i}",
        }
        for i in range(first, first + count)
    ]
    body = {"Records": records, "ContinuationSequenceNumber": str(49_000 + first + count), "MillisBehindLatest": 7}
    return event_stream.event_message("SubscribeToShardEvent", json.dumps(body).encode())


class Raw:
    """A raw HTTP body as botocore reads it: ``stream()`` yields chunks."""

    def __init__(self, data: bytes, chunk: int) -> None:
        self.data, self.chunk, self.closed = data, chunk, False

    def stream(self) -> Iterator[bytes]:
        for start in range(0, len(self.data), self.chunk):
            yield self.data[start : start + self.chunk]

    def close(self) -> None:
        self.closed = True


def test_the_message_encoding_is_what_botocore_decodes() -> None:
    buffer: Any = EventStreamBuffer()
    buffer.add_data(event_stream.initial_response() + records_event(0, 1))
    assert [(m.headers[":event-type"], m.headers[":message-type"]) for m in buffer] == [
        ("initial-response", "event"),
        ("SubscribeToShardEvent", "event"),
    ]


@given(chunk=st.integers(min_value=1, max_value=400), aws=st.booleans(), unknown=st.booleans())
def test_every_event_is_parsed_in_order_in_any_chunking_with_or_without_an_initial_response(
    chunk: int, aws: bool, unknown: bool
) -> None:
    data = records_event(0, 3) + records_event(3, 2)
    if unknown:  # an event type this version does not know is passed over
        data = event_stream.event_message("SomethingNew", b"{}") + data
    if aws:
        data = event_stream.initial_response() + data
    bodies = list(Subscription(Raw(data, chunk), None).events())
    sequence_numbers = [[r["SequenceNumber"] for r in b["Records"]] for b in bodies]
    assert sequence_numbers == [["49000", "49001", "49002"], ["49003", "49004"]]
    first = bodies[0]["Records"][0]
    assert first["Data"] == b"payload 0" and first["PartitionKey"] == "k0"
    assert first["ApproximateArrivalTimestamp"] == dt.datetime.fromtimestamp(ARRIVED, dt.UTC)
    assert bodies[1]["ContinuationSequenceNumber"] == "49005" and bodies[1]["MillisBehindLatest"] == 7


def test_an_exception_event_is_raised_as_botocore_raises_it() -> None:
    refusal = json.dumps({"message": "Another active subscription exists"}).encode()
    data = records_event(0, 1) + event_stream.event_message("ResourceInUseException", refusal, "exception")
    events = Subscription(Raw(data, 50), None).events()
    assert [r["SequenceNumber"] for r in next(events)["Records"]] == ["49000"]
    with pytest.raises(botocore.exceptions.EventStreamError) as raised:
        next(events)
    assert raised.value.response["Error"] == {
        "Code": "ResourceInUseException",
        "Message": "Another active subscription exists",
    }


def test_only_kinsumer_s_own_calls_are_kept_and_botocore_reads_just_an_initial_response() -> None:
    raw = Raw(records_event(0, 1), 7)
    response = {"status_code": 200, "body": raw}
    event_stream._keep_ours(response)  # not inside subscribe_to_shard(): someone else's call
    assert response["body"] is raw
    event_stream._calling.ours = True
    try:
        event_stream._keep_ours(response)
        kept = event_stream._calling.raw
    finally:
        event_stream._calling.ours, event_stream._calling.raw = False, None
    assert kept is raw
    assert list(response["body"].stream()) == [event_stream.initial_response()]
    response["body"].close()
    assert raw.closed


@pytest.mark.parametrize("status", [400, 500])
def test_an_error_answer_is_left_to_botocore(status: int) -> None:
    raw = Raw(b'{"__type": "ResourceNotFoundException"}', 5)
    response = {"status_code": status, "body": raw}
    event_stream._calling.ours = True
    try:
        event_stream._keep_ours(response)
    finally:
        event_stream._calling.ours = False
    assert response["body"] is raw and getattr(event_stream._calling, "raw", None) is None
