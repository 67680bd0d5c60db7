"""kinsumer.cli.produce: rejected entries are written again; a stop ends it; the records it writes."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from kinsumer.cli.produce import make_record, produce


class ThrottlingKinesis:
    """PutRecords that rejects every other entry of a call's first attempt, and records what it kept."""

    def __init__(self) -> None:
        self.kept: list[int] = []
        self.calls = 0

    def put_records(self, StreamName: str, Records: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls += 1
        answers = []
        for i, entry in enumerate(Records):
            if self.calls % 2 == 1 and i % 2 == 1:
                answers.append({"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "slow down"})
            else:
                self.kept.append(json.loads(entry["Data"])["id"])
                answers.append({"SequenceNumber": str(len(self.kept)), "ShardId": "shardId-000000000000"})
        return {"FailedRecordCount": sum("ErrorCode" in a for a in answers), "Records": answers}


def test_every_record_is_written_once_although_some_are_rejected() -> None:
    kinesis = ThrottlingKinesis()
    batches: list[range] = []
    written = produce(kinesis, "s", count=1234, keys=7, size=50, on_batch=batches.append)  # type: ignore[arg-type]
    assert written == 1234
    assert sorted(kinesis.kept) == list(range(1234))
    assert [len(b) for b in batches] == [500, 500, 234]


def test_a_stop_ends_an_endless_produce() -> None:
    kinesis = ThrottlingKinesis()
    stop = threading.Event()

    def stop_after_three(ids: range) -> None:
        if ids.stop >= 1500:
            stop.set()

    written = produce(kinesis, "s", count=None, stop=stop, on_batch=stop_after_three)  # type: ignore[arg-type]
    assert written == 1500
    assert sorted(kinesis.kept) == list(range(1500))


def test_a_rate_writes_a_seconds_worth_a_batch_and_paces_them() -> None:
    kinesis = ThrottlingKinesis()
    batches: list[range] = []
    started = time.monotonic()
    written = produce(kinesis, "s", count=600, rate=400, on_batch=batches.append)  # type: ignore[arg-type]
    assert written == 600 and [len(b) for b in batches] == [400, 200]
    assert time.monotonic() - started >= 1.5  # 600 records at 400/s: the pacing waited


def test_a_record_is_json_with_its_id_key_and_time_padded_to_its_size() -> None:
    data, key = make_record(1234, keys=100, size=200)
    body = json.loads(data)
    assert key == body["key"] == "key-34"
    assert body["id"] == 1234 and body["ts"].endswith("+00:00")
    assert len(data) == 200 and set(body["pad"]) == {"x"}
    small, _ = make_record(7, keys=3, size=10)  # already longer than asked: no pad
    assert set(json.loads(small)) == {"id", "key", "ts"}


class RefusingKinesis(ThrottlingKinesis):
    """PutRecords that refuses every entry, with throttling."""

    def put_records(self, StreamName: str, Records: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls += 1
        error = {"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "slow down"}
        return {"FailedRecordCount": len(Records), "Records": [error for _ in Records]}


def test_a_stop_ends_the_backoff_of_refused_records_and_no_refused_batch_is_reported() -> None:
    kinesis = RefusingKinesis()
    stop = threading.Event()
    batches: list[range] = []
    stopper = threading.Timer(0.5, stop.set)
    stopper.start()
    try:
        written = produce(kinesis, "s", count=100, stop=stop, on_batch=batches.append)  # type: ignore[arg-type]
    finally:
        stopper.cancel()
    assert (written, batches) == (0, [])
    assert kinesis.calls >= 2  # it sent them again until the stop
