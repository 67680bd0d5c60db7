"""The Spark source's offsets: pure logic, no Spark."""

from __future__ import annotations

import json

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinsumer import ConfigError
from kinsumer.aws.kinesis import ShardInfo
from kinsumer.reading.position import StartPosition
from kinsumer.spark.offsets import (
    SHARD_END,
    TRIM_HORIZON,
    BatchOffset,
    ShardEnd,
    Stop,
    after,
    end_index,
    next_offset,
    to_start_position,
)
from kinsumer.spark.query_offset import QueryOffset, stream_of_identity
from tests.unit.test_frontier import lineages

pytest.importorskip("pyspark")  # the package kinsumer.spark imports it


def test_json_is_canonical_so_spark_compares_offsets_correctly() -> None:
    a = BatchOffset("r", 3, TRIM_HORIZON, {"s2": "AFTER:9", "s1": "AFTER:5"}, ("s0",), unread={"s2": "tip"}, until=7)
    b = BatchOffset("r", 3, TRIM_HORIZON, {"s1": "AFTER:5", "s2": "AFTER:9"}, ("s0",), unread={"s2": "tip"}, until=7)
    assert json.dumps(a.to_json()) == json.dumps(b.to_json())
    assert list(a.to_json()) == sorted(a.to_json())
    assert BatchOffset.from_json(json.loads(json.dumps(a.to_json()))) == b


def test_an_offset_written_before_unread_and_until_existed_reads_back_as_the_same_json() -> None:
    old = {"batch": 2, "done": [], "initial": TRIM_HORIZON, "limit": 5, "run": "r", "shards": {"s0": "AFTER:1"}}
    assert BatchOffset.from_json(old).to_json() == old
    assert Stop("more") is Stop.MORE and ShardEnd("AFTER:1").stop is Stop.MORE  # ends recorded before stops


def test_first_batch_starts_the_frontier_at_the_initial_position() -> None:
    listing = [ShardInfo("s0", closed=True), ShardInfo("s1", parent_shard_id="s0"), ShardInfo("s2")]
    first = next_offset(BatchOffset("r", -1, TRIM_HORIZON), {}, listing)
    assert first.batch == 0
    assert dict(first.shards) == {"s0": TRIM_HORIZON, "s2": TRIM_HORIZON}


def test_ends_become_starts_and_children_wait_for_shard_end() -> None:
    listing = [ShardInfo("s0", closed=True), ShardInfo("s1", parent_shard_id="s0"), ShardInfo("s2")]
    b0 = next_offset(BatchOffset("r", -1, TRIM_HORIZON), {}, listing)
    b1 = next_offset(b0, {"s0": ShardEnd(after("7")), "s2": ShardEnd(after("3"))}, listing)
    assert dict(b1.shards) == {"s0": "AFTER:7", "s2": "AFTER:3"}
    b2 = next_offset(b1, {"s0": ShardEnd(SHARD_END)}, listing)  # s2 read nothing: stays
    assert dict(b2.shards) == {"s1": TRIM_HORIZON, "s2": "AFTER:3"}
    assert b2.done == ("s0",)
    trimmed = [s for s in listing if s.shard_id != "s0"]
    assert next_offset(b2, {}, trimmed).done == ()


@given(lineages(), st.data())
def test_a_child_is_never_read_before_all_its_parents_reached_shard_end(
    listing: list[ShardInfo], data: st.DataObject
) -> None:
    """Drive batches with random ends: no offset ever holds a shard whose parent is unfinished."""
    offset = BatchOffset("r", -1, TRIM_HORIZON)
    finished: set[str] = set()
    by_id = {s.shard_id: s for s in listing}
    for _ in range(12):
        ends = {}
        for shard in offset.shards:
            if by_id[shard].closed and data.draw(st.booleans()):
                ends[shard] = ShardEnd(SHARD_END)
            elif data.draw(st.booleans()):
                ends[shard] = ShardEnd(after(str(data.draw(st.integers(1, 10**6)))))
        finished |= {s for s, e in ends.items() if e.position == SHARD_END}
        offset = next_offset(offset, ends, listing)
        for shard in offset.shards:
            assert shard not in finished
            assert all(p in finished for p in by_id[shard].parents), (shard, by_id[shard].parents, finished)


def test_offsets_of_an_earlier_stream_of_the_name_restart_every_shard_at_the_initial_position() -> None:
    old_stream, new_stream = "arn:aws:kinesis:us-east-1:1:stream/s@1000", "arn:aws:kinesis:us-east-1:1:stream/s@2000"
    listing = [ShardInfo("s0", closed=True), ShardInfo("s1", parent_shard_id="s0"), ShardInfo("s2")]
    old = BatchOffset("r", 4, TRIM_HORIZON, {"s1": "AFTER:9", "s2": "AFTER:5"}, ("s0",), limit=7, stream=old_stream)
    assert BatchOffset.from_json(json.loads(json.dumps(old.to_json()))) == old
    assert old.to_json()["stream"] == old_stream
    assert old.foreign(new_stream) and not old.foreign(old_stream)
    assert not BatchOffset("r", 4, TRIM_HORIZON).foreign(new_stream)  # written before identities: the current one
    # the new stream reuses the shard IDs: nothing of the old positions or the old "done" applies
    following = next_offset(old.restarted(new_stream), {"s1": ShardEnd(after("11"))}, listing)
    assert following.batch == 5 and following.stream == new_stream and following.limit == 7
    assert dict(following.shards) == {"s0": TRIM_HORIZON, "s2": TRIM_HORIZON}
    assert following.done == ()


def test_start_positions() -> None:
    assert to_start_position("AFTER:42").sequence_number == "42"
    assert to_start_position(after("42", 3)) == StartPosition.after("42", 3)  # inside a KPL aggregate
    assert after("42", 3) == "AFTER:42:3" and after("42") == "AFTER:42"
    assert to_start_position(TRIM_HORIZON).kind == "TRIM_HORIZON"
    assert to_start_position("AT_TIMESTAMP:1700000000000").timestamp is not None
    with pytest.raises(ConfigError, match="start position"):
        to_start_position(SHARD_END)


def test_a_recorded_end_names_a_user_record_or_a_whole_kinesis_record() -> None:
    page = [
        {"SequenceNumber": "1"},
        {"SequenceNumber": "5", "SubSequenceNumber": 0},
        {"SequenceNumber": "5", "SubSequenceNumber": 1},
        {"SequenceNumber": "5", "SubSequenceNumber": 2},
        {"SequenceNumber": "9"},
    ]
    assert end_index(page, after("1")) == 0
    assert end_index(page, after("5", 1)) == 2
    assert end_index(page, after("5")) == 3  # a whole aggregate: its last user record
    assert end_index(page, after("9")) == 4
    assert end_index(page, after("7")) is None
    assert end_index(page, SHARD_END) is None


def test_a_query_of_one_stream_writes_the_offset_it_always_wrote_and_several_streams_nest_theirs() -> None:
    one = BatchOffset("r", 3, TRIM_HORIZON, {"shardId-0": after("5")}, stream="arn:aws:kinesis:us-east-1:1:stream/a@7")
    query = QueryOffset.start("r", {"a": one})
    assert query.to_json() == one.to_json()  # a checkpoint written before several streams reads back the same
    assert QueryOffset.from_json(one.to_json(), "b") == query  # its stream is the one its identity names
    unnamed = attrs.evolve(one, stream=None)
    assert QueryOffset.from_json(unnamed.to_json(), "b").streams == {"b": unnamed}  # before identities: the first
    # a stream joins: the offset nests both, each with a run (ledger items) of its own
    joined = query.with_streams({**query.streams, "b": BatchOffset(query.stream_run("b"), 3, TRIM_HORIZON)})
    data = joined.to_json()
    assert data["run"] == "r" and sorted(data["streams"]) == ["a", "b"] and data["batch"] == 3
    assert data["streams"]["b"]["run"] == "r.b" and data["streams"]["a"]["run"] == "r"
    assert QueryOffset.from_json(json.loads(json.dumps(data)), "zzz") == joined
    assert json.dumps(data) == json.dumps(QueryOffset.from_json(data, "a").to_json())  # Spark compares the text
    # the other stream dropped: one stream left, whose run is not the query's, keeps the nested form
    left = joined.with_streams({"b": joined.streams["b"]})
    assert "streams" in left.to_json() and QueryOffset.from_json(left.to_json(), "a") == left


def test_the_stream_in_an_identity() -> None:
    assert stream_of_identity("arn:aws:kinesis:us-east-1:123456789012:stream/clicks.v2@1700000000000") == "clicks.v2"
    assert stream_of_identity("clicks@0") is None  # a server that gave no ARN
    assert stream_of_identity(None) is None
