"""The fan-out reader against a scripted Kinesis client: renewals, positions, errors, stops."""

from __future__ import annotations

import datetime as dt
import queue
import threading
from collections.abc import Iterator
from typing import Any

import botocore.exceptions
import pytest

from kinsumer.aws.retry import Stopped
from kinsumer.reading import fanout
from kinsumer.reading.fanout import SubscriptionReader
from kinsumer.reading.position import StartPosition
from tests.helpers import CountingStats, wait_until

SHARD = "shardId-000000000000"
ARRIVAL = dt.datetime(2026, 11, 24, tzinfo=dt.UTC)


def record(seq: int) -> dict[str, Any]:
    return {"SequenceNumber": str(seq), "Data": b"x", "PartitionKey": "k", "ApproximateArrivalTimestamp": ARRIVAL}


def event(*seqs: int, continuation: str | None = "c", children: tuple[str, ...] = ()) -> dict[str, Any]:
    body: dict[str, Any] = {"Records": [record(s) for s in seqs], "MillisBehindLatest": 0}
    body["ContinuationSequenceNumber"] = continuation
    if children:
        body["ChildShards"] = [{"ShardId": child} for child in children]
    return {"SubscribeToShardEvent": body}


def error(code: str) -> botocore.exceptions.ClientError:
    return botocore.exceptions.ClientError({"Error": {"Code": code, "Message": code}}, "SubscribeToShard")


class Subscription:
    """An event stream: its events (or an exception to raise there), then it ends, or blocks if ``hold``."""

    def __init__(self, items: list[Any], hold: bool = False) -> None:
        self.items, self.hold, self.closed = items, hold, threading.Event()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for item in self.items:
            if isinstance(item, BaseException):
                raise item
            yield item
        if self.hold:  # an open subscription with nothing to say, until closed
            self.closed.wait()
            raise OSError("closed")

    def close(self) -> None:
        self.closed.set()


class Scripted:
    """A Kinesis client answering SubscribeToShard from a script; it notes where each call started."""

    def __init__(self, *answers: Subscription | BaseException) -> None:
        self.answers: queue.Queue[Subscription | BaseException] = queue.Queue()
        for answer in answers:
            self.answers.put(answer)
        self.starts: list[dict[str, Any]] = []

    def get_shard_iterator(self, **params: Any) -> dict[str, Any]:
        self.starts.append({"GetShardIterator": params["ShardIteratorType"]})
        return {"ShardIterator": "it"}

    def get_records(self, ShardIterator: str, Limit: int) -> dict[str, Any]:
        return {"Records": [], "MillisBehindLatest": 0, "ChildShards": [{"ShardId": "child"}]}  # the shard ended

    def subscribe_to_shard(self, ConsumerARN: str, ShardId: str, StartingPosition: dict[str, Any]) -> dict[str, Any]:
        self.starts.append(StartingPosition)
        answer = self.answers.get(timeout=10)
        if isinstance(answer, BaseException):
            raise answer
        return {"EventStream": answer}


def reader(kinesis: Scripted, start: StartPosition, stats: CountingStats | None = None) -> SubscriptionReader:
    return SubscriptionReader(kinesis, "s", "arn:consumer", SHARD, start, stats=stats)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fanout, "_BACKOFF_FIRST", 0.01)
    monkeypatch.setattr(fanout, "CLOSED_CHECK", 1e9)  # no closed-shard check unless a test asks for it


def sequence_numbers(r: SubscriptionReader, pages: int) -> list[str]:
    return [x["SequenceNumber"] for _ in range(pages) for x in r.next_page().raw]


def test_a_subscription_that_ends_is_renewed_after_the_last_record_handed_on() -> None:
    kinesis = Scripted(Subscription([event(1, 2), event()]), Subscription([event(3)], hold=True))
    r = reader(kinesis, StartPosition.trim_horizon())
    try:
        assert sequence_numbers(r, 3) == ["1", "2", "3"]
    finally:
        r.close()
    assert kinesis.starts == [{"Type": "TRIM_HORIZON"}, {"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": "2"}]


def test_in_use_throttled_and_broken_subscriptions_are_retried_with_backoff() -> None:
    stats = CountingStats()
    kinesis = Scripted(
        error("ResourceInUseException"),  # at the call (AWS)
        Subscription([error("ResourceInUseException")]),  # inside the event stream (kinesis-mock)
        Subscription([event(5), ConnectionResetError("reset")]),
        error("LimitExceededException"),
        Subscription([event(6)], hold=True),
    )
    r = reader(kinesis, StartPosition.after("4"), stats)
    try:
        assert sequence_numbers(r, 2) == ["5", "6"]
    finally:
        r.close()
    after = [start.get("SequenceNumber") for start in kinesis.starts]
    assert after == ["4", "4", "4", "5", "5"]
    assert stats.retried[("SubscribeToShard", "ResourceInUseException")] == 2
    assert stats.retried[("SubscribeToShard", "ConnectionResetError")] == 1
    assert stats.retried[("SubscribeToShard", "LimitExceededException")] == 1


def test_a_start_inside_an_aggregate_leaves_out_the_user_records_it_covers() -> None:
    aggregate = [dict(record(7), SubSequenceNumber=i) for i in range(3)]
    first = event()
    first["SubscribeToShardEvent"]["Records"] = aggregate
    kinesis = Scripted(Subscription([first], hold=True))
    start = StartPosition.after("7", 1)  # user records 0 and 1 of 7 are done
    # the scripted records are not real KPL aggregates: deaggregation hands them on as they are
    r = reader(kinesis, start)
    try:
        page = r.next_page()
    finally:
        r.close()
    assert [(x["SequenceNumber"], x.get("SubSequenceNumber")) for x in page.raw] == [("7", 2)]
    assert kinesis.starts == [{"Type": "AT_SEQUENCE_NUMBER", "SequenceNumber": "7"}]


def test_an_event_holding_only_what_a_start_inside_an_aggregate_covers_is_no_page() -> None:
    """Such an event says nothing of the tip: the first page is the next event's."""
    covered = event()
    covered["SubscribeToShardEvent"]["Records"] = [dict(record(7), SubSequenceNumber=i) for i in range(2)]
    kinesis = Scripted(Subscription([covered, event(8)], hold=True))
    r = reader(kinesis, StartPosition.after("7", 1))
    try:
        page = r.next_page()
    finally:
        r.close()
    assert [x["SequenceNumber"] for x in page.raw] == ["8"]


def test_a_closed_shard_ends_with_its_children_and_every_later_page_is_the_end() -> None:
    kinesis = Scripted(Subscription([event(1), event(2, continuation=None, children=("a", "b"))]))
    r = reader(kinesis, StartPosition.trim_horizon())
    try:
        assert not r.next_page().end_of_shard
        last = r.next_page()
        assert last.end_of_shard and last.child_shards == ("a", "b")
        assert [x["SequenceNumber"] for x in last.raw] == ["2"]
        assert r.next_page().end_of_shard
    finally:
        r.close()
    assert len(kinesis.starts) == 1


def test_an_error_that_retrying_cannot_fix_reaches_the_caller() -> None:
    kinesis = Scripted(error("AccessDeniedException"))
    r = reader(kinesis, StartPosition.trim_horizon())
    try:
        with pytest.raises(botocore.exceptions.ClientError, match="AccessDenied"):
            r.next_page()
    finally:
        r.close()


def test_a_stop_ends_a_wait_for_an_event_and_close_ends_the_subscription_and_its_pump() -> None:
    subscription = Subscription([], hold=True)
    stop = threading.Event()
    r = SubscriptionReader(Scripted(subscription), "s", "arn", SHARD, StartPosition.trim_horizon(), stop=stop)  # type: ignore[arg-type]
    outcome: list[BaseException] = []

    def wait() -> None:
        try:
            r.next_page()
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=wait)
    thread.start()
    wait_until(lambda: r._events is not None, 10, "the subscription")
    stop.set()  # nothing will ever come: only the stop ends the wait
    thread.join(10)
    assert not thread.is_alive() and isinstance(outcome[0], Stopped)
    r.close()
    assert subscription.closed.is_set()
    assert r._finished.is_set() and r._task is not None and r._task.done()  # the pump ended
    own = f"kinsumer-efo-{SHARD}"  # the thread botocore's subscription was read on (this client is not lean)
    wait_until(lambda: not [t for t in threading.enumerate() if t.name.startswith(own)], 10, "its thread to end")


def test_a_shard_that_ended_without_saying_so_in_an_event_ends_through_a_get_records_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fanout, "CLOSED_CHECK", 0.0)
    kinesis = Scripted(Subscription([event(1), event(), event()], hold=True))  # kinesis-mock on a split parent
    r = reader(kinesis, StartPosition.trim_horizon())
    try:
        pages = [r.next_page() for _ in range(3)]
    finally:
        r.close()
    assert [p.end_of_shard for p in pages] == [False, False, True] and pages[-1].child_shards == ("child",)
    assert kinesis.starts[1:] == [{"GetShardIterator": "AFTER_SEQUENCE_NUMBER"}]  # after the last record handed on


def test_subscriptions_that_end_before_any_event_are_renewed_with_backoff_not_in_a_tight_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slept: list[float] = []

    async def sleep(self: SubscriptionReader, seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(SubscriptionReader, "_sleep", sleep)
    kinesis = Scripted(Subscription([]), Subscription([]), Subscription([]), Subscription([event(1)], hold=True))
    r = reader(kinesis, StartPosition.trim_horizon())
    try:
        assert sequence_numbers(r, 1) == ["1"]
    finally:
        r.close()
    assert len(kinesis.starts) == 4 and slept == sorted(slept) and len(slept) == 3 and slept[0] > 0


class OpenShard(Scripted):
    """A shard that stays open: every GetRecords check finds nothing and a next iterator."""

    def __init__(self, *answers: Subscription | BaseException) -> None:
        super().__init__(*answers)
        self.checks = 0

    def get_records(self, ShardIterator: str, Limit: int) -> dict[str, Any]:
        self.checks += 1
        return {"Records": [], "MillisBehindLatest": 0, "NextShardIterator": "it"}


class Clock:
    """Seconds that pass only when an event is handed on."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_the_closed_shard_check_waits_longer_each_time_an_idle_shard_is_found_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()

    class Ticking(Subscription):
        def __iter__(self) -> Iterator[dict[str, Any]]:
            for item in super().__iter__():
                clock.now += 1.0  # one event a second, as kinesis-mock pushes them
                yield item

    monkeypatch.setattr(fanout, "CLOSED_CHECK", 5.0)
    monkeypatch.setattr(fanout, "time", clock)
    idle = [event() for _ in range(200)]
    kinesis = OpenShard(Ticking([event(1), *idle], hold=True))
    r = reader(kinesis, StartPosition.trim_horizon())
    try:
        pages = [r.next_page() for _ in range(201)]
    finally:
        r.close()
    assert not any(p.end_of_shard for p in pages)
    # after the record: checks 5, 10, 20, 40, 60, 60 s apart within 200 idle seconds
    assert kinesis.checks == 6
