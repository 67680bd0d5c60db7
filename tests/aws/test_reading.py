"""The reading seam: PollingReader on moto's in-process Kinesis, and the one-place rule."""

from __future__ import annotations

import datetime as dt
import email.utils
import itertools
import pathlib
import re
import threading
import time
from typing import Any

import botocore.exceptions
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kinsumer
from demo.aggregation import aggregated_entries
from kinsumer.aws.retry import Stopped
from kinsumer.reading import reader as reader_module
from kinsumer.reading.kpl import MAGIC
from kinsumer.reading.polling import FIRST_PAGE, PollingReader
from kinsumer.reading.position import StartPosition
from kinsumer.reading.reader import ReaderSettings
from tests.faults import FaultPlan
from tests.helpers import CountingStats

SHARD = "shardId-000000000000"
FAST = ReaderSettings(throttle_delay=0.2)


@pytest.fixture
def stream(kinesis: Any) -> str:
    kinesis.create_stream(StreamName="s", ShardCount=1)
    return "s"


def put(kinesis: Any, *payloads: bytes) -> list[str]:
    """Write the payloads in order; their sequence numbers."""
    return [kinesis.put_record(StreamName="s", Data=p, PartitionKey="k")["SequenceNumber"] for p in payloads]


def reader(kinesis: Any, start: StartPosition, **kwargs: Any) -> PollingReader:
    return PollingReader(kinesis, "s", SHARD, start, settings=FAST, **kwargs)


def read_all(r: PollingReader, pages: int = 3) -> list[bytes]:
    """The data of a few pages: moto answers everything in the first, the rest are empty."""
    return [record.data for _ in range(pages) for record in r.next_page().records()]


def iterator_calls(kinesis: Any) -> list[dict[str, Any]]:
    """Record the parameters of every GetShardIterator call."""
    calls: list[dict[str, Any]] = []
    kinesis.meta.events.register(
        "provide-client-params.kinesis.GetShardIterator", lambda params, **_: calls.append(dict(params))
    )
    return calls


def test_each_start_position_reads_from_where_it_says(kinesis: Any, stream: str) -> None:
    seqs = put(kinesis, b"a", b"b", b"c")
    assert read_all(reader(kinesis, StartPosition.trim_horizon())) == [b"a", b"b", b"c"]
    assert read_all(reader(kinesis, StartPosition.after(seqs[0]))) == [b"b", b"c"]
    latest = reader(kinesis, StartPosition.latest())
    assert latest.next_page().raw == []
    put(kinesis, b"d")
    assert read_all(latest) == [b"d"]
    future = reader(kinesis, StartPosition.at_timestamp(dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)))
    assert read_all(future, pages=1) == []


def test_a_position_inside_an_aggregate_starts_at_its_record_and_skips_what_is_done(kinesis: Any, stream: str) -> None:
    seqs = put(kinesis, b"a", b"b", b"c")
    calls = iterator_calls(kinesis)
    inside = StartPosition.after(seqs[1], sub_sequence=0)  # user record 0 of record b is done
    assert read_all(reader(kinesis, inside)) == [b"c"]
    assert calls[0]["ShardIteratorType"] == "AT_SEQUENCE_NUMBER"
    assert calls[0]["StartingSequenceNumber"] == seqs[1]
    assert not inside.is_done(seqs[1], 1)  # a later user record of the same aggregate is not done
    assert not inside.is_done(seqs[2], 0)


def test_an_expired_iterator_is_renewed_after_the_last_record_handed_on(kinesis: Any, stream: str) -> None:
    seqs = put(kinesis, b"a", b"b", b"c")
    stats = CountingStats()
    r = reader(kinesis, StartPosition.trim_horizon(), stats=stats)
    calls = iterator_calls(kinesis)
    assert [x.data for x in r.next_page(limit=2).records()] == [b"a", b"b"]
    plan = FaultPlan(kinesis, "GetRecords", lambda n: "ExpiredIteratorException" if n == 1 else None)
    assert [x.data for x in r.next_page().records()] == [b"c"]  # nothing lost, nothing twice
    assert plan.injected["ExpiredIteratorException"] == 1
    assert calls[-1]["ShardIteratorType"] == "AFTER_SEQUENCE_NUMBER"
    assert calls[-1]["StartingSequenceNumber"] == seqs[1]
    assert stats.retried[("GetRecords", "ExpiredIteratorException")] == 1


def test_a_latest_iterator_that_expires_before_any_record_resumes_from_when_the_server_made_it(
    kinesis: Any, stream: str
) -> None:
    server_time = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(hours=1)  # this host runs 1 h fast

    def server_clock(response_dict: dict[str, Any], **_: Any) -> None:
        response_dict["headers"]["date"] = email.utils.format_datetime(server_time, usegmt=True)

    kinesis.meta.events.register("before-parse.kinesis.GetShardIterator", server_clock)
    r = reader(kinesis, StartPosition.latest())
    calls = iterator_calls(kinesis)
    assert r.next_page().raw == []
    put(kinesis, b"written while the iterator was valid")
    FaultPlan(kinesis, "GetRecords", lambda n: "ExpiredIteratorException" if n == 1 else None)
    assert read_all(r) == [b"written while the iterator was valid"]
    assert [c["ShardIteratorType"] for c in calls] == ["LATEST", "AT_TIMESTAMP"]
    assert calls[1]["Timestamp"] == server_time  # the server's time, not this host's


def test_a_shard_gone_from_the_stream_ends_like_a_closed_one(kinesis: Any, stream: str) -> None:
    gone = PollingReader(kinesis, "s", "shardId-000000000042", StartPosition.trim_horizon(), settings=FAST)
    end = gone.next_page()
    assert (end.raw, end.end_of_shard, end.child_shards) == ((), True, ())
    assert gone.next_page().end_of_shard  # and stays ended


def test_a_missing_stream_is_an_error_not_an_end(kinesis: Any) -> None:
    with pytest.raises(botocore.exceptions.ClientError, match="ResourceNotFoundException"):
        PollingReader(kinesis, "nope", SHARD, StartPosition.trim_horizon(), settings=FAST).next_page()


def test_a_stop_request_interrupts_the_throttle_wait(kinesis: Any, stream: str) -> None:
    stop = threading.Event()
    r = PollingReader(kinesis, "s", SHARD, StartPosition.trim_horizon(), settings=ReaderSettings(60.0), stop=stop)
    r.next_page()  # the next call is due in 60 s
    threading.Timer(0.1, stop.set).start()
    started = time.monotonic()
    with pytest.raises(Stopped):
        r.next_page()
    assert time.monotonic() - started < 30  # woken by the stop, far before the throttle's 60 s


class ScriptedKinesis:
    """A Kinesis client answering GetRecords from a script (no local server returns ChildShards)."""

    def __init__(self, responses: list[dict[str, Any]]) -> None:
        self.responses = responses

    def get_shard_iterator(self, **_: Any) -> dict[str, Any]:
        return {"ShardIterator": "it-0"}

    def get_records(self, **_: Any) -> dict[str, Any]:
        return self.responses.pop(0)


def test_the_end_of_a_shard_names_its_children() -> None:
    arrival = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    record = {"Data": b"x", "PartitionKey": "k", "SequenceNumber": "7", "ApproximateArrivalTimestamp": arrival}
    fake = ScriptedKinesis(
        [
            {"Records": [record], "NextShardIterator": "it-1", "MillisBehindLatest": 5},
            {
                "Records": [],
                "MillisBehindLatest": 0,
                "ChildShards": [
                    {"ShardId": "shardId-000000000001", "ParentShards": [SHARD]},
                    {"ShardId": "shardId-000000000002", "ParentShards": [SHARD]},
                ],
            },
        ]
    )
    r = PollingReader(fake, "s", SHARD, StartPosition.trim_horizon(), settings=FAST)  # type: ignore[arg-type]
    first = r.next_page()
    assert [x.sequence_number for x in first.records()] == ["7"] and not first.end_of_shard
    assert first.records()[0].shard_id == SHARD
    assert first.millis_behind_latest == 5
    last = r.next_page()
    assert last.end_of_shard and last.child_shards == ("shardId-000000000001", "shardId-000000000002")


def test_get_records_and_get_shard_iterator_are_called_in_one_place() -> None:
    package = pathlib.Path(kinsumer.__file__).parent
    calls = {
        str(path.relative_to(package)): len(re.findall(r"\.(get_records|get_shard_iterator)\(", path.read_text()))
        for path in package.rglob("*.py")
    }
    # polling calls GetShardIterator (also to place LATEST for fan-out), and GetRecords through
    # lean_get_records.get_records (the one GetRecords call: it sends it itself, or through botocore
    # with records_parser.get_records, which marks the call as kinsumer's own for the parser);
    # fan-out's subscriptions check a closed shard's end with a PollingReader
    assert {path: n for path, n in calls.items() if n} == {
        "reading/polling.py": 3, "aws/lean_get_records.py": 2, "aws/records_parser.py": 1,
    }  # fmt: skip


def put_aggregate(kinesis: Any, users: list[tuple[str, bytes, str | None]]) -> str:
    (entry,) = aggregated_entries(users, per_record=len(users))
    return str(kinesis.put_record(StreamName="s", **entry)["SequenceNumber"])


def test_kpl_aggregates_are_read_as_their_user_records(kinesis: Any, stream: str) -> None:
    stats = CountingStats()
    put(kinesis, b"plain")
    seq = put_aggregate(kinesis, [("user-a", b"one", None), ("user-b", b"two", "12345"), ("user-a", b"three", None)])
    kinesis.put_record(StreamName="s", Data=MAGIC + b"not an aggregate", PartitionKey="k")
    r = reader(kinesis, StartPosition.trim_horizon(), stats=stats)
    records = [record for _ in range(3) for record in r.next_page().records()]
    assert [(x.data, x.partition_key, x.sub_sequence_number, x.explicit_hash_key) for x in records] == [
        (b"plain", "k", None, None),
        (b"one", "user-a", 0, None),
        (b"two", "user-b", 1, "12345"),
        (b"three", "user-a", 2, None),
        (MAGIC + b"not an aggregate", "k", None, None),
    ]
    assert {r.sequence_number for r in records[1:4]} == {seq}
    assert stats.calls["malformed_aggregates"] == 1


def test_a_checkpoint_inside_an_aggregate_resumes_at_its_next_user_record(kinesis: Any, stream: str) -> None:
    seq = put_aggregate(kinesis, [("k", b"%d" % i, None) for i in range(5)])
    put(kinesis, b"after")
    assert read_all(reader(kinesis, StartPosition.after(seq, 2))) == [b"3", b"4", b"after"]
    assert read_all(reader(kinesis, StartPosition.after(seq, 4))) == [b"after"]
    assert read_all(reader(kinesis, StartPosition.after(seq))) == [b"after"]


def test_a_start_after_the_last_user_record_of_an_aggregate_never_returns_a_page_emptied_by_the_skip(
    kinesis: Any, stream: str
) -> None:
    """The aggregate is read again and all of it is covered: the reader reads on, so an empty page means the tip."""
    seq = put_aggregate(kinesis, [("k", b"%d" % i, None) for i in range(3)])
    put(kinesis, b"after", b"later")
    r = reader(kinesis, StartPosition.after(seq, 2))
    first = r.next_page(1)  # one Kinesis record a call: the covered aggregate, then "after"
    assert [x.data for x in first.records()] == [b"after"]
    assert [x.data for x in r.next_page(1).records()] == [b"later"]
    at_tip = r.next_page(1)
    assert at_tip.raw == [] and not at_tip.end_of_shard
    alone = reader(kinesis, StartPosition.after(put_aggregate(kinesis, [("k", b"x", None)]), 0))
    assert alone.next_page(1).raw == []  # nothing follows: an empty page from a read at the tip


def test_the_first_page_of_a_backlog_is_small_so_its_records_come_sooner(kinesis: Any, stream: str) -> None:
    limits: list[int] = []
    kinesis.meta.events.register(
        "provide-client-params.kinesis.GetRecords", lambda params, **_: limits.append(params["Limit"])
    )
    total = FIRST_PAGE + 500
    for start in range(0, total, 500):
        kinesis.put_records(
            StreamName="s", Records=[{"Data": b"%d" % i, "PartitionKey": "k"} for i in range(start, start + 500)]
        )
    r = reader(kinesis, StartPosition.trim_horizon())
    pages = [len(r.next_page().raw) for _ in range(2)]
    assert pages == [FIRST_PAGE, 500]
    assert limits == [FIRST_PAGE, FAST.max_records_per_call]
    explicit = reader(kinesis, StartPosition.trim_horizon())
    assert len(explicit.next_page(FIRST_PAGE + 100).raw) == FIRST_PAGE + 100  # a limit asked for is kept


def test_a_backlog_is_read_without_pauses_yet_never_more_than_per_second_reads_in_a_second(
    kinesis: Any, stream: str
) -> None:
    """The small first page of a backlog costs no throttle wait; a page that is not full does."""
    kinesis.put_records(StreamName="s", Records=[{"Data": b"%d" % i, "PartitionKey": "k"} for i in range(60)])
    r = reader(kinesis, StartPosition.trim_horizon())
    calls: list[float] = []
    for _ in range(12):
        page = r.next_page(5)
        calls.append(r._attempts[-1])
        assert page.full
        assert r.ready_at() <= r._attempts[-1] or len(calls) >= FAST.per_second  # a full page: read on at once
    assert FAST.per_second == 5
    for i in range(len(calls)):  # any one second holds at most per_second reads
        assert sum(1 for t in calls[i:] if t < calls[i] + 1.0) <= FAST.per_second
    page = r.next_page(5)
    assert page.raw == [] and not page.full
    # at the tip: spaced out again (ready_at is a sum of floats: its difference may be off in the last bit)
    assert r.ready_at() - r._attempts[-1] >= FAST.throttle_delay - 1e-9


@settings(max_examples=300, deadline=None)
@given(
    throttle=st.sampled_from([0.2, 0.25, 0.3, 0.5, 1.0]),
    pages=st.lists(st.tuples(st.booleans(), st.integers(0, 12), st.floats(0, 0.4)), min_size=1, max_size=40),
)
def test_reads_come_at_most_per_second_in_any_second_and_spaced_unless_a_backlog_waits(
    throttle: float, pages: list[tuple[bool, int, float]]
) -> None:
    """Reads made as soon as ``next_read`` allows (``late``: the caller came that much later)."""
    pacing = ReaderSettings(throttle_delay=throttle, idle_poll_interval=1.0)
    reads: list[float] = []
    backlog, empty = False, 0
    for full, empty_reads, late in pages:
        due = pacing.next_read(reads, empty, backlog)
        at = max(due, reads[-1] if reads else 0.0) + late
        if reads and not backlog:
            assert at - reads[-1] >= pacing.delay(empty) - 1e-9
        reads.append(at)
        backlog, empty = full, 0 if full else empty_reads
    assert pacing.per_second <= 1 / throttle + 1e-9
    for i, start in enumerate(reads):
        assert sum(1 for t in reads[i:] if t < start + 1.0 - 1e-9) <= pacing.per_second


def test_a_full_page_is_not_the_tip_even_where_the_server_says_it_is_0_ms_behind(kinesis: Any, stream: str) -> None:
    """kinesalite answers MillisBehindLatest 0 on every page: a page cut at its limit has more after it."""
    at_tip = lambda parsed, **_: parsed.update(MillisBehindLatest=0)  # noqa: E731
    kinesis.meta.events.register("after-call.kinesis.GetRecords", at_tip)
    put(kinesis, b"a", b"b", b"c")
    r = reader(kinesis, StartPosition.trim_horizon())
    first = r.next_page(2)
    assert (len(first.raw), first.full, first.at_tip) == (2, True, False)
    last = r.next_page(2)
    assert (len(last.raw), last.full, last.at_tip) == (1, False, True)


def test_an_idle_shard_is_read_at_the_full_rate_for_a_second_then_less_often_up_to_the_idle_interval() -> None:
    settings = ReaderSettings(throttle_delay=0.25, idle_poll_interval=1.0)
    assert [settings.delay(n) for n in range(8)] == [0.25, 0.25, 0.25, 0.25, 0.5, 1.0, 1.0, 1.0]
    slow = ReaderSettings(throttle_delay=2.0, idle_poll_interval=5.0)  # a throttle longer than IDLE_AFTER
    assert [slow.delay(n) for n in range(4)] == [2.0, 4.0, 5.0, 5.0]


@given(
    throttle=st.sampled_from([0.01, 0.2, 0.25, 1.0, 2.0]),
    idle=st.sampled_from([0.01, 1.0, 5.0, 3600.0]),
    empty_reads=st.integers(0, 10**12),
)
def test_a_shard_idle_for_any_number_of_reads_is_read_every_idle_interval_at_most(
    throttle: float, idle: float, empty_reads: int
) -> None:
    """Found by the simulator (tests/sim): 2 ** n overflowed a float after 1,024 empty reads in a row, which a
    shard idle for 17 minutes reaches at one read a second, and the reader failed."""
    settings = ReaderSettings(throttle_delay=throttle, idle_poll_interval=max(idle, throttle))
    delay = settings.delay(empty_reads)
    assert throttle <= delay <= max(idle, throttle)
    assert delay >= settings.delay(max(0, empty_reads - 1))  # never sooner for more empty reads


def test_a_shard_whose_reads_come_back_empty_is_read_less_often_and_at_full_rate_once_records_come(
    kinesis: Any, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reader_module, "IDLE_AFTER", 0.02)  # two empty reads at the full rate, then slower
    settings = ReaderSettings(throttle_delay=0.01, idle_poll_interval=0.08)
    r = PollingReader(kinesis, stream, SHARD, StartPosition.trim_horizon(), settings=settings)
    calls: list[float] = []  # when each GetRecords went (monotonic)

    def pause_after_last_read() -> float:
        """How long after its last GetRecords the reader will make the next one."""
        return r.ready_at() - r._attempts[-1]

    pauses = []
    for _ in range(6):
        assert r.next_page().raw == []
        calls.append(r._attempts[-1])
        pauses.append(round(pause_after_last_read(), 6))
    assert pauses == [0.01, 0.02, 0.04, 0.08, 0.08, 0.08]
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    # it did wait that long (to the microsecond the pauses are rounded to: a difference of two floats can
    # come out a hair under the delay it waited for)
    assert all(gap >= want - 1e-6 for gap, want in zip(gaps, pauses, strict=False))
    put(kinesis, b"x")
    assert [x.data for x in r.next_page().records()] == [b"x"]
    assert round(pause_after_last_read(), 6) == 0.01  # a read with records: the full rate again
