"""Planning micro-batches: a simulated stream driven through the planner. Pure, no Spark."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("pyspark")  # the package kinsumer.spark imports it

from kinsumer.aws.kinesis import ShardInfo
from kinsumer.spark.offsets import TRIM_HORIZON, BatchOffset, ShardEnd, Stop, after
from kinsumer.spark.planning import Limits, plan_next, plan_streams, shards_to_probe, task_groups


class Stream:
    """Shards of records (sequence number = 1-based index) with arrival times; reads like the executors."""

    def __init__(self, arrivals: dict[str, list[int]]) -> None:
        self.arrivals = arrivals
        self.listing = [ShardInfo(shard) for shard in sorted(arrivals)]

    @staticmethod
    def _index(position: str) -> int:
        return 0 if position == TRIM_HORIZON else int(position.split(":")[1])

    def _before(self, shard: str, until: int | None) -> int:
        return sum(1 for a in self.arrivals[shard] if until is None or a < until)

    def read(self, shard: str, start: str, limit: int, until: int | None) -> tuple[list[int], ShardEnd]:
        first = self._index(start)
        available = self._before(shard, until) if until is not None else len(self.arrivals[shard])
        last = min(available, first + limit) if limit else available
        read = list(range(first + 1, last + 1))
        position = after(str(last)) if read else start
        if last < available:
            return read, ShardEnd(position, Stop.MORE)
        return read, ShardEnd(position, Stop.TIP if until is None else Stop.TARGET)

    def probe(self, shard: str, start: str, until: int | None) -> bool:
        return self._index(start) < (self._before(shard, until) if until is not None else len(self.arrivals[shard]))


Ran = tuple[BatchOffset, dict[str, ShardEnd]]  # the last batch and its recorded ends (as the ledger keeps them)


def drive(
    stream: Stream, ran: Ran, limits: Limits, until: int | None, max_batches: int = 500
) -> tuple[Ran, dict[str, list[int]], list[int]]:
    """Plan and run batches until the planner has nothing to plan: the last batch, what each shard read, sizes."""
    got: dict[str, list[int]] = {shard: [] for shard in stream.arrivals}
    sizes: list[int] = []  # records read by each batch that read no shard for the first time
    seen: set[str] = set()
    offset, ends = ran
    for _ in range(max_batches):
        probed = {s: stream.probe(s, p, until) for s, p in shards_to_probe(offset, ends, until).items()}
        following = plan_next(offset, ends, stream.listing, probed, limits, until)
        if following is None:
            return (offset, ends), got, sizes
        offset, ends = following, {}
        size = 0
        for shard in offset.read:
            records, ends[shard] = stream.read(shard, offset.shards[shard], offset.limit, offset.until)
            got[shard] += records
            size += len(records)
        if seen.issuperset(offset.read):
            sizes.append(size)
        seen.update(offset.read)
    raise AssertionError("the planner never ran out of batches")


arrivals = st.dictionaries(
    st.sampled_from([f"s{i}" for i in range(5)]),
    st.lists(st.integers(0, 100), max_size=30).map(sorted),
    min_size=1,
)


@settings(max_examples=150, deadline=None)
@given(arrivals, st.integers(1, 12), st.none() | st.integers(1, 40), st.integers(0, 101))
def test_available_now_reads_exactly_what_arrived_before_the_cut_within_the_limits_and_stops(
    shards: dict[str, list[int]], per_shard: int, total: int | None, until: int
) -> None:
    stream, limits = Stream(shards), Limits(per_shard, total)
    final, got, sizes = drive(stream, (BatchOffset("r", -1, TRIM_HORIZON), {}), limits, until)
    for shard, times in shards.items():
        assert got[shard] == [i + 1 for i, a in enumerate(times) if a < until], shard  # all of it, once, in order
    assert all(size <= (total or per_shard * len(shards)) for size in sizes)
    # a restart: more records arrive, the query runs again with a later cut and reads only those
    later = max([until, *(t for times in shards.values() for t in times)]) + 5
    more = {shard: times + [later] * 3 for shard, times in shards.items()}
    _, again, _ = drive(Stream(more), final, limits, later + 1)
    for shard, times in shards.items():
        left = [i + 1 for i in range(len(times)) if times[i] >= until]
        assert again[shard] == left + [len(times) + j for j in (1, 2, 3)]


@settings(max_examples=100, deadline=None)
@given(arrivals, st.integers(1, 12), st.none() | st.integers(1, 40))
def test_without_a_cut_everything_is_read_and_an_idle_stream_plans_no_batch(
    shards: dict[str, list[int]], per_shard: int, total: int | None
) -> None:
    stream, limits = Stream(shards), Limits(per_shard, total)
    (final, ends), got, sizes = drive(stream, (BatchOffset("r", -1, TRIM_HORIZON), {}), limits, None)
    assert got == {shard: list(range(1, len(times) + 1)) for shard, times in shards.items()}
    assert 0 not in sizes  # a batch that reads no shard for the first time is never empty
    probes = shards_to_probe(final, ends, None)
    assert set(probes) == set(shards)  # every shard is at the tip
    assert plan_next(final, ends, stream.listing, dict.fromkeys(probes, False), limits) is None


def test_a_total_smaller_than_the_shards_reads_them_in_turn() -> None:
    limits = Limits(per_shard=100, total=2)
    assert limits.share(["a", "b", "c"], batch=0) == (["a", "b"], 1)
    assert limits.share(["a", "b", "c"], batch=1) == (["b", "c"], 1)
    assert limits.share(["a", "b", "c"], batch=2) == (["c", "a"], 1)
    assert limits.share(["a", "b", "c"], batch=5) == (["c", "a"], 1)
    assert Limits(per_shard=100, total=250).share(["a", "b", "c"], 0) == (["a", "b", "c"], 83)
    assert Limits(per_shard=10, total=250).share(["a", "b", "c"], 0) == (["a", "b", "c"], 10)


def test_only_the_shards_with_something_new_are_read() -> None:
    listing = [ShardInfo("a"), ShardInfo("b")]
    current = BatchOffset("r", 4, TRIM_HORIZON, {"a": after("3"), "b": after("9")})
    ends = {"a": ShardEnd(after("5"), Stop.TIP), "b": ShardEnd(after("9"), Stop.TIP)}
    assert shards_to_probe(current, ends, None) == {"a": after("5"), "b": after("9")}
    assert plan_next(current, ends, listing, {}, Limits(10)) is None  # not probed yet: nothing known to read
    following = plan_next(current, ends, listing, {"a": False, "b": True}, Limits(10))
    assert following is not None
    assert following.read == ["b"] and following.unread == {"a": "tip"}
    assert dict(following.shards) == {"a": after("5"), "b": after("9")}
    # the next batch knows a is still at the tip without a ledger entry for it
    ran_b = {"b": ShardEnd(after("12"), Stop.TIP)}
    assert shards_to_probe(following, ran_b, None) == {"a": after("5"), "b": after("12")}


@given(shards=st.integers(min_value=0, max_value=200), per_task=st.integers(min_value=1, max_value=20))
def test_tasks_hold_every_shard_once_at_most_shards_per_task_each_and_as_few_tasks_as_that_allows(
    shards: int, per_task: int
) -> None:
    ids = [f"shardId-{i:012d}" for i in range(shards)]
    groups = task_groups(ids, per_task)
    assert sorted(s for g in groups for s in g) == ids
    assert all(0 < len(g) <= per_task for g in groups)
    assert len(groups) == -(-shards // per_task)  # ceil: one task fewer could not hold them
    assert max(map(len, groups), default=0) - min(map(len, groups), default=0) <= 1


@settings(max_examples=100, deadline=None)
@given(st.lists(arrivals, min_size=1, max_size=3), st.integers(1, 12), st.none() | st.integers(1, 40))
def test_several_streams_are_read_in_full_each_once_and_share_the_total(
    streams: list[dict[str, list[int]]], per_shard: int, total: int | None
) -> None:
    """Streams with the same shard ids: each read in full, once, in order; no batch over the total."""
    sources = {f"stream{i}": Stream(shards) for i, shards in enumerate(streams)}
    limits = Limits(per_shard, total)
    offsets = {name: BatchOffset(f"r.{name}", -1, TRIM_HORIZON) for name in sources}
    ends: dict[str, dict[str, ShardEnd]] = {name: {} for name in sources}
    got = {name: {shard: [] for shard in source.arrivals} for name, source in sources.items()}
    for _ in range(1000):
        probed = {}
        for name, source in sources.items():
            due = shards_to_probe(offsets[name], ends[name], None)
            probed[name] = {shard: source.probe(shard, position, None) for shard, position in due.items()}
        listings = {name: source.listing for name, source in sources.items()}
        planned = plan_streams(offsets, ends, listings, probed, limits)
        if planned is None:
            break
        assert len({offset.batch for offset in planned.values()}) == 1  # every stream at the same batch
        size = 0
        for name, offset in planned.items():
            ends[name] = {}
            for shard in offset.read:
                records, ends[name][shard] = sources[name].read(shard, offset.shards[shard], offset.limit, None)
                got[name][shard] += records
                size += len(records)
        assert total is None or size <= max(total, 1)
        offsets = planned
    else:
        raise AssertionError("the planner never ran out of batches")
    for name, source in sources.items():
        assert got[name] == {shard: list(range(1, len(times) + 1)) for shard, times in source.arrivals.items()}
