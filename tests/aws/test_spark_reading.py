"""The Spark source's executor-side reading and its options, without Spark (moto in-process)."""

from __future__ import annotations

import concurrent.futures
import pathlib
import threading
import time
from typing import Any

import attrs
import boto3
import pytest

pytest.importorskip("pyspark")

from demo.aggregation import aggregated_entries
from kinsumer import ConfigError, KinsumerError, ReplayError
from kinsumer.aws.tables import create_table
from kinsumer.spark.batch_ends import BatchEnds
from kinsumer.spark.batch_reader import KinsumerBatchReader
from kinsumer.spark.clients import clients
from kinsumer.spark.cut import arrival_ms
from kinsumer.spark.offsets import SHARD_END, TRIM_HORIZON, BatchOffset, ShardEnd, Stop, after
from kinsumer.spark.options import SourceOptions
from kinsumer.spark.path_ledger import PathLedger
from kinsumer.spark.probe import Prober
from kinsumer.spark.shard_range import ShardRange, read_shard_range, read_shard_ranges
from kinsumer.spark.stream_reader import KinsumerStreamReader
from tests.helpers import wait_until

SHARD = "shardId-000000000000"


@pytest.fixture
def ends(db: Any) -> BatchEnds:
    create_table(db, "app_metadata", "Key")
    return BatchEnds(db, "app_metadata", "run1")


_API_NAMES = {
    "data": "Data",
    "partition_key": "PartitionKey",
    "sequence_number": "SequenceNumber",
    "sub_sequence_number": "SubSequenceNumber",
    "explicit_hash_key": "ExplicitHashKey",
}


def rows(batches: list[Any]) -> list[dict[str, Any]]:
    """The rows of a shard range's Arrow batches, under the API's names (as the assertions read them)."""
    return [{_API_NAMES[k]: v for k, v in row.items() if k in _API_NAMES} for b in batches for row in b.to_pylist()]


def put(kinesis: Any, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        kinesis.put_record(StreamName="s", Data=str(i).encode(), PartitionKey="k")


def part(batch: int, start: str = TRIM_HORIZON, limit: int = 10, until: int | None = None) -> ShardRange:
    return ShardRange("s", SHARD, batch, start, limit, time_budget=5.0, until=until)


def test_a_live_read_records_its_end_and_a_replay_reads_the_same_records(kinesis: Any, ends: BatchEnds) -> None:
    kinesis.create_stream(StreamName="s", ShardCount=1)
    put(kinesis, 15)
    ends.plan(0)
    first = rows(read_shard_range(kinesis, ends, part(0)))
    assert [r["Data"] for r in first] == [str(i).encode() for i in range(10)]
    assert ends.ends(0) == {SHARD: ShardEnd(after(first[-1]["SequenceNumber"]), Stop.MORE)}
    put(kinesis, 5, start=15)  # more data now: a live re-read would differ
    ends.plan(0)  # planning the batch again (a replay) keeps what was recorded
    again = rows(read_shard_range(kinesis, ends, part(0, limit=100)))
    assert [r["SequenceNumber"] for r in again] == [r["SequenceNumber"] for r in first]
    with pytest.raises(ReplayError, match=r"batch 1 .* was never planned"):
        read_shard_range(kinesis, ends, part(1, start=after(first[-1]["SequenceNumber"]), limit=100))


def test_a_replay_whose_recorded_end_is_gone_fails_as_soon_as_it_reads_past_it(kinesis: Any, ends: BatchEnds) -> None:
    kinesis.create_stream(StreamName="s", ShardCount=1)
    put(kinesis, 5)
    ends.plan(0)
    first = rows(read_shard_range(kinesis, ends, part(0, limit=2)))
    gone = str(int(first[0]["SequenceNumber"]) - 1)  # an end before the oldest record: retention trimmed it
    replay = attrs.evolve(part(0), recorded=after(gone))
    with pytest.raises(ReplayError, match=f"recorded end AFTER:{gone} was not found"):
        read_shard_range(kinesis, ends, replay)  # at once: not after the replay's budget of minutes


def test_the_tip_of_the_stream_ends_a_live_read_and_an_empty_read_records_its_start(
    kinesis: Any, ends: BatchEnds
) -> None:
    kinesis.create_stream(StreamName="s", ShardCount=1)
    put(kinesis, 3)
    ends.plan(0)
    assert len(rows(read_shard_range(kinesis, ends, part(0, limit=100)))) == 3
    start = ends.ends(0)[SHARD]
    assert start.stop is Stop.TIP
    ends.plan(1)
    assert rows(read_shard_range(kinesis, ends, part(1, start=start.position))) == []
    assert ends.ends(1) == {SHARD: start}


def test_the_first_recorded_end_wins(ends: BatchEnds) -> None:
    ends.plan(4)
    assert ends.record(4, SHARD, ShardEnd(after("10"), Stop.TIP), 3)
    assert not ends.record(4, SHARD, ShardEnd(after("99")), 50)
    assert ends.ends(4) == {SHARD: ShardEnd(after("10"), Stop.TIP)}
    assert ends.counts(4) == {SHARD: 3}
    assert ends.record(4, "other", ShardEnd(SHARD_END), 0)
    ends.forget(4)
    assert ends.ends(4) == {}


def test_a_batch_that_ends_inside_an_aggregate_replays_it_and_the_next_batch_goes_on_from_there(
    kinesis: Any, ends: BatchEnds
) -> None:
    kinesis.create_stream(StreamName="s", ShardCount=1)
    (entry,) = aggregated_entries([(f"user-{i}", b"a%d" % i, None) for i in range(5)], per_record=5)
    aggregate_seq = kinesis.put_record(StreamName="s", **entry)["SequenceNumber"]
    put(kinesis, 1, start=99)
    ends.plan(0)
    first = rows(read_shard_range(kinesis, ends, part(0, limit=3)))  # maxRecordsPerShard counts user records
    assert [(r["Data"], r["SubSequenceNumber"]) for r in first] == [(b"a0", 0), (b"a1", 1), (b"a2", 2)]
    assert ends.ends(0) == {SHARD: ShardEnd(after(aggregate_seq, 2), Stop.MORE)}
    again = rows(read_shard_range(kinesis, ends, part(0, limit=3)))  # a replay: the same user records
    assert again == first
    ends.plan(1)
    second = rows(read_shard_range(kinesis, ends, part(1, start=after(aggregate_seq, 2), limit=10)))
    assert [r["Data"] for r in second] == [b"a3", b"a4", b"99"]
    assert [r.get("SubSequenceNumber") for r in second] == [3, 4, None]


def test_an_end_recorded_before_deaggregation_replays_the_whole_aggregate(kinesis: Any, ends: BatchEnds) -> None:
    kinesis.create_stream(StreamName="s", ShardCount=1)
    (entry,) = aggregated_entries([("k", b"a%d" % i, None) for i in range(4)], per_record=4)
    aggregate_seq = kinesis.put_record(StreamName="s", **entry)["SequenceNumber"]
    put(kinesis, 1, start=7)
    ends.plan(0)
    assert ends.record(0, SHARD, ShardEnd(after(aggregate_seq)), 1)  # as the source recorded it before
    assert [r["Data"] for r in rows(read_shard_range(kinesis, ends, part(0)))] == [b"a0", b"a1", b"a2", b"a3"]


def put_then_cut(kinesis: Any, n: int) -> int:
    """Put ``n`` records, then return a cut (epoch ms) after all of them, once the clock has passed it."""
    put(kinesis, n)
    reader = boto3.client("kinesis", region_name="us-east-1")  # its calls are not the code under test's
    newest = max(arrival_ms(r) for r in reader.get_records(ShardIterator=iterator(reader))["Records"])
    wait_until(lambda: time.time() * 1000 > newest + 1, 5, "the clock to pass the last arrival")
    return newest + 1


def iterator(kinesis: Any) -> str:
    return str(
        kinesis.get_shard_iterator(StreamName="s", ShardId=SHARD, ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    )


def test_a_read_with_a_cut_stops_before_the_first_record_that_arrived_at_or_after_it(
    kinesis: Any, ends: BatchEnds
) -> None:
    kinesis.create_stream(StreamName="s", ShardCount=1)
    cut = put_then_cut(kinesis, 4)
    put(kinesis, 3, start=4)
    ends.plan(0)
    got = rows(read_shard_range(kinesis, ends, part(0, limit=100, until=cut)))
    assert [r["Data"] for r in got] == [b"0", b"1", b"2", b"3"]
    assert ends.ends(0)[SHARD] == ShardEnd(after(got[-1]["SequenceNumber"]), Stop.TARGET)
    ends.plan(1)  # with a limit below the cut: more to read, before the cut
    assert len(rows(read_shard_range(kinesis, ends, part(1, limit=2, until=cut)))) == 2
    assert ends.ends(1)[SHARD].stop is Stop.MORE
    ends.plan(2)  # at the tip before any record at the cut: the target is reached too
    assert rows(read_shard_range(kinesis, ends, part(2, start=after("99999999999999999999999"), until=cut))) == []
    assert ends.ends(2)[SHARD].stop is Stop.TARGET


def test_a_probe_reads_one_record_at_most_once_per_interval_and_respects_the_cut(kinesis: Any) -> None:
    kinesis.create_stream(StreamName="s", ShardCount=1)
    now = [0.0]
    prober = Prober(kinesis, "s", interval=1.0, clock=lambda: now[0])
    calls: list[dict[str, Any]] = []
    kinesis.meta.events.register("provide-client-params.kinesis.GetRecords", lambda params, **_: calls.append(params))
    assert prober.probe({SHARD: TRIM_HORIZON}, [SHARD]) == {SHARD: False}
    cut = put_then_cut(kinesis, 2)
    assert prober.probe({SHARD: TRIM_HORIZON}, [SHARD]) == {}  # not due yet: no call
    now[0] = 1.0
    assert prober.probe({SHARD: TRIM_HORIZON}, [SHARD], until=cut - 5_000) == {SHARD: False}  # only later records
    now[0] = 2.0
    assert prober.probe({SHARD: TRIM_HORIZON}, [SHARD], until=cut) == {SHARD: True}
    assert [c["Limit"] for c in calls] == [1, 1, 1]


def test_a_probe_after_the_last_user_record_of_an_aggregate_finds_the_records_that_follow(kinesis: Any) -> None:
    """The end of a batch at the tip of a KPL stream lies after an aggregate's last user record.

    The probe's one-record read returns that aggregate again, all of it covered: it must look past it
    (it once answered 'nothing new', and an AvailableNow restart read nothing more).
    """
    kinesis.create_stream(StreamName="s", ShardCount=1)
    # as kinesalite answers (and AWS may, for records that came within the same millisecond)
    at_tip = lambda parsed, **_: parsed.update(MillisBehindLatest=0)  # noqa: E731
    kinesis.meta.events.register("after-call.kinesis.GetRecords", at_tip)
    (entry,) = aggregated_entries([("k", b"a%d" % i, None) for i in range(7)], per_record=7)
    seq = kinesis.put_record(StreamName="s", **entry)["SequenceNumber"]
    prober = Prober(kinesis, "s", interval=1.0)
    assert prober.probe({SHARD: after(seq, 6)}, [SHARD]) == {SHARD: False}  # at the tip
    put(kinesis, 1)
    prober = Prober(kinesis, "s", interval=1.0)
    assert prober.probe({SHARD: after(seq, 6)}, [SHARD], until=int(time.time() * 1000) + 60_000) == {SHARD: True}


def test_a_batch_read_reads_every_shard_up_to_when_it_was_planned(kinesis: Any) -> None:
    kinesis.create_stream(StreamName="s", ShardCount=2)
    for i in range(40):
        kinesis.put_record(StreamName="s", Data=str(i).encode(), PartitionKey=f"k{i}")
    reader = KinsumerBatchReader(SourceOptions.from_options({"streamName": "s", "region": "us-east-1"}, batch=True))
    slices = reader.partitions()
    wait_until(lambda: time.time() * 1000 > slices[0].until + 1, 5, "the clock to pass the cut")
    for i in range(40, 50):  # after the cut: not part of this read
        kinesis.put_record(StreamName="s", Data=str(i).encode(), PartitionKey=f"k{i}")
    batches = [batch for piece in slices for batch in reader.read(piece)]
    data = sorted(int(d) for batch in batches for d in batch.column("data").to_pylist())
    assert data == list(range(40))
    assert {s.shard for s in slices} == {f"shardId-00000000000{i}" for i in range(2)}


def test_the_driver_never_applies_offsets_of_an_earlier_stream_of_the_name(
    kinesis: Any, tmp_path: pathlib.Path
) -> None:
    kinesis.create_stream(StreamName="s", ShardCount=1)
    options = {"streamName": "s", "region": "us-east-1", "metadataPath": str(tmp_path / "ledger")}
    reader = KinsumerStreamReader(SourceOptions.from_options(options))
    current = BatchOffset.from_json(reader.initialOffset()).stream
    assert current is not None and current.startswith("arn:aws:kinesis:") and current != "arn@1"
    old_position = after("49590338271490256608559692538361571095921575989136588898")
    earlier = BatchOffset("r", 3, TRIM_HORIZON, {SHARD: old_position}, ("shardId-000000000001",), stream="arn@1")
    replayed = earlier.to_json()
    assert reader.partitions(attrs.evolve(earlier, batch=2).to_json(), replayed) == []  # its records are gone
    following = BatchOffset.from_json(reader.latestOffset(replayed))
    assert (following.batch, following.stream, following.done) == (4, current, ())
    assert dict(following.shards) == {SHARD: TRIM_HORIZON}
    # written before identities were recorded: the current stream's, positions kept
    legacy = attrs.evolve(earlier, stream=None, done=())
    kept = BatchOffset.from_json(reader.latestOffset(legacy.to_json()))
    assert (kept.stream, dict(kept.shards)) == (current, dict(legacy.shards))


def test_a_batch_read_of_latest_is_refused() -> None:
    with pytest.raises(ConfigError, match="LATEST reads nothing"):
        KinsumerBatchReader(SourceOptions.from_options({"streamName": "s", "startingPosition": "LATEST"}, batch=True))


@pytest.fixture(params=["local", "s3"])
def path_ledger(request: pytest.FixtureRequest, aws: None, tmp_path: pathlib.Path) -> PathLedger:
    if request.param == "local":
        return PathLedger(str(tmp_path / "ledger"), "run1")
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="ckpt")
    return PathLedger("s3://ckpt/queries/q1/ledger", "run1", s3)


def test_a_ledger_at_a_path_keeps_the_first_end_and_forgets_whole_batches(path_ledger: PathLedger) -> None:
    assert not path_ledger.record(4, SHARD, ShardEnd(after("1")), 1)  # not planned: nothing recorded
    path_ledger.plan(4)
    assert path_ledger.record(4, SHARD, ShardEnd(after("10"), Stop.TIP), 3)
    assert not path_ledger.record(4, SHARD, ShardEnd(after("99")), 50)
    path_ledger.plan(4)  # planned again (a replay): what was recorded stays
    assert path_ledger.record(4, "other", ShardEnd(SHARD_END), 0)
    assert path_ledger.ends(4) == {SHARD: ShardEnd(after("10"), Stop.TIP), "other": ShardEnd(SHARD_END)}
    path_ledger.plan(5)
    path_ledger.forget(4)
    assert path_ledger.ends(4) == {}
    assert path_ledger.record(5, SHARD, ShardEnd(after("12")), 2)


def test_racing_attempts_on_a_local_ledger_record_one_end(tmp_path: pathlib.Path) -> None:
    ledger = PathLedger(str(tmp_path), "run1")
    ledger.plan(0)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        won = list(pool.map(lambda i: ledger.record(0, SHARD, ShardEnd(after(str(i))), i), range(32)))
    assert won.count(True) == 1
    assert ledger.ends(0) == {SHARD: ShardEnd(after(str(won.index(True))))}
    assert sorted(p.name for p in (tmp_path / "run1" / f"{0:012d}").iterdir()) == ["_planned", f"{SHARD}.json"]


def test_a_replay_through_a_ledger_at_a_path_reads_the_same_records(kinesis: Any, path_ledger: PathLedger) -> None:
    kinesis.create_stream(StreamName="s", ShardCount=1)
    put(kinesis, 15)
    path_ledger.plan(0)
    first = rows(read_shard_range(kinesis, path_ledger, part(0)))
    put(kinesis, 5, start=15)
    assert rows(read_shard_range(kinesis, path_ledger, part(0, limit=100))) == first
    with pytest.raises(ReplayError, match="never planned"):
        read_shard_range(kinesis, path_ledger, part(1))


def test_a_batch_planned_again_passes_its_recorded_end_so_the_executor_replays_without_asking(
    kinesis: Any, db: Any, ends: BatchEnds
) -> None:
    kinesis.create_stream(StreamName="s", ShardCount=1)
    put(kinesis, 15)
    assert ends.plan(0)  # planned for the first time
    first = rows(read_shard_range(kinesis, ends, part(0)))
    assert not ends.plan(0)  # planned again (a restart): the driver reads the recorded end
    recorded = ends.ends(0)[SHARD].position
    calls: list[str] = []
    db.meta.events.register("before-call.dynamodb", lambda model, **_: calls.append(model.name))
    replay = ShardRange("s", SHARD, 0, TRIM_HORIZON, 100, 5.0, recorded=recorded)
    assert rows(read_shard_range(kinesis, ends, replay)) == first
    assert calls == []  # no ledger call on the executor


class MeetingLedger:
    """A ledger whose ``record`` returns once ``parties`` reads record at the same time, and fails for ``failing``."""

    def __init__(self, ends: BatchEnds, parties: int, failing: str = "") -> None:
        self._ends = ends
        self._barrier = threading.Barrier(parties, timeout=30)
        self._failing = failing
        self.table = ends.table

    def record(self, batch: int, shard: str, end: ShardEnd, count: int) -> bool:
        self._barrier.wait()  # reads one after another would break it
        if shard == self._failing:
            raise KinsumerError(f"recording {shard} failed")
        return self._ends.record(batch, shard, end, count)

    def ends(self, batch: int) -> dict[str, ShardEnd]:
        return self._ends.ends(batch)


def test_a_task_reads_its_shards_concurrently_and_raises_a_failed_read_after_the_others_recorded(
    kinesis: Any, ends: BatchEnds
) -> None:
    kinesis.create_stream(StreamName="s", ShardCount=3)
    for i in range(60):
        kinesis.put_record(StreamName="s", Data=str(i).encode(), PartitionKey=f"key-{i}")
    shards = [s["ShardId"] for s in kinesis.list_shards(StreamName="s")["Shards"]]
    written = {}
    for shard in shards:
        iterator = kinesis.get_shard_iterator(StreamName="s", ShardId=shard, ShardIteratorType="TRIM_HORIZON")
        written[shard] = [r["Data"] for r in kinesis.get_records(ShardIterator=iterator["ShardIterator"])["Records"]]
    assert all(written.values())
    ends.plan(0)
    parts = [ShardRange("s", shard, 0, TRIM_HORIZON, 100, 5.0) for shard in shards]
    meeting = MeetingLedger(ends, 3)
    read = read_shard_ranges(kinesis, lambda part: meeting, parts)
    got = {part.shard: [r["Data"] for r in rows(batches)] for part, batches in read}
    assert got == written
    assert set(ends.ends(0)) == set(shards)

    ends.plan(1)
    failing = MeetingLedger(ends, 3, failing=shards[0])
    with pytest.raises(KinsumerError, match=f"recording {shards[0]} failed"):
        list(read_shard_ranges(kinesis, lambda part: failing, [attrs.evolve(p, batch=1) for p in parts]))
    assert set(ends.ends(1)) == set(shards[1:])  # the others recorded their ends: a retried task replays them


def test_with_a_consumer_name_the_driver_registers_the_consumer_once_and_every_shard_range_reads_through_it(
    kinesis: Any, tmp_path: pathlib.Path
) -> None:
    kinesis.create_stream(StreamName="s", ShardCount=2)
    options = {"streamName": "s", "region": "us-east-1", "metadataPath": str(tmp_path / "ledger"), "consumerName": "c"}
    reader = KinsumerStreamReader(SourceOptions.from_options(options))
    calls: list[str] = []
    driver_kinesis = clients(SourceOptions.from_options(options))[0]
    driver_kinesis.meta.events.register("before-call.kinesis", lambda model, **_: calls.append(model.name))
    start = reader.initialOffset()
    end = reader.latestOffset(start)
    parts = reader.partitions(start, end)
    arn = kinesis.describe_stream_summary(StreamName="s")["StreamDescriptionSummary"]["StreamARN"]
    (consumer,) = kinesis.list_stream_consumers(StreamARN=arn)["Consumers"]
    assert consumer["ConsumerName"] == "c"
    assert {r.consumer for p in parts for r in p.ranges} == {consumer["ConsumerARN"]}
    assert len(parts) == 1 and len(parts[0].ranges) == 2
    reader.partitions(start, end)  # a replay: the consumer is known
    assert calls.count("RegisterStreamConsumer") == 1 and calls.count("DescribeStreamConsumer") <= 2


def test_a_live_read_records_how_far_behind_the_tip_it_ended_in_either_ledger(
    kinesis: Any, ends: BatchEnds, path_ledger: PathLedger
) -> None:
    kinesis.create_stream(StreamName="s", ShardCount=1)
    put(kinesis, 5)
    ends.plan(0)
    read_shard_range(kinesis, ends, part(0, limit=2))
    assert ends.ends(0)[SHARD].behind is not None  # moto says how far behind each page is
    path_ledger.plan(0)
    assert path_ledger.record(0, SHARD, ShardEnd(after("7"), Stop.MORE, 1_234), 2)
    assert path_ledger.ends(0)[SHARD].behind == 1_234
    assert ends.record(0, "shardId-000000000009", ShardEnd(after("7"), Stop.TIP), 0)  # not said: none kept
    assert ends.ends(0)["shardId-000000000009"].behind is None


@pytest.mark.parametrize("drop", [False, True])
def test_a_shard_range_delivers_or_drops_the_kpl_user_records_outside_its_hash_range_and_logs_how_many(
    kinesis: Any, ends: BatchEnds, drop: bool, caplog: pytest.LogCaptureFixture
) -> None:
    kinesis.create_stream(StreamName="s", ShardCount=1)
    users = [("k", b"in-0", "5"), ("k", b"out", "50"), ("k", b"in-1", "7")]  # explicit hash keys
    (entry,) = aggregated_entries(users, per_record=3)
    kinesis.put_record(StreamName="s", **entry)
    ends.plan(0)
    ranged = attrs.evolve(part(0), hash_range=(0, 10), drop_outside=drop)
    got = [r["Data"] for r in rows(read_shard_range(kinesis, ends, ranged))]
    assert got == ([b"in-0", b"in-1"] if drop else [b"in-0", b"out", b"in-1"])
    outcome = "dropped" if drop else "delivered"
    assert f"batch 0, {SHARD} of s: 1 user records of KPL aggregates outside the shard's hash key range, {outcome}" in (
        caplog.text
    )
