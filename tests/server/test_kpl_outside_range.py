"""KPL user records outside their shard's hash key range, after a split, on kinesalite.

A stream of one shard gets KPL aggregates (awslabs' aws-kinesis-agg, whose aggregates mix
partition keys as the KPL's do when its shard map is out of date), is split, and gets more: each
aggregate is stored by the child of its first user record's key, and holds user records of the
other child's keys too. As the KPL does with a "Wrong Shard" user record, the test sends those
again on their own, so that they reach their own shard. With ``kpl_outside_shard="deliver"`` each
such record comes twice (once inside the aggregate, once on its own), every other once; with
``"drop"`` every record comes once and per partition key in the order written. Either way the
readers count them, and ``kinsumer status`` says so.

Records outside their shard are found by the test with Kinesis's rule (the MD5 of the partition key
within the shard's range) and checked against kinesalite's own routing of the records sent again.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter, defaultdict
from typing import Any

import attrs
import pytest

from demo.aggregation import aggregated_entries
from demo.servers import LocalServer
from kinsumer import Kinsumer, StatReceiver
from kinsumer.cli.status_view import render
from kinsumer.coordination import checkpoints_table
from kinsumer.status import read_status
from tests.conftest import unique
from tests.helpers import put_all, wait_until
from tests.reshard import new_stream, open_in_hash_order, split_first
from tests.server.conftest import SERVER_CONFIG

pytestmark = pytest.mark.server

KEYS = 16
PER_AGGREGATE = 8


class OutsideStats(StatReceiver):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.outside: Counter[bool] = Counter()  # by dropped

    def outside_range(self, shard_id: str, count: int, dropped: bool) -> None:
        with self._lock:
            self.outside[dropped] += count


def hash_key(partition_key: str) -> int:
    return int(hashlib.md5(partition_key.encode()).hexdigest(), 16)


def user(rid: int) -> tuple[str, bytes, None]:
    key = f"key-{rid % KEYS}"
    return key, json.dumps({"id": rid, "key": key}).encode(), None


@attrs.define
class Written:
    ids: list[int] = attrs.field(factory=list)
    outside: set[int] = attrs.field(factory=set)  # user records stored outside their shard's range
    by_key: dict[str, list[int]] = attrs.field(factory=lambda: defaultdict(list))


def write(kinesis: Any, stream: str) -> Written:
    """Aggregates before the split (all in range), the split, aggregates built for the parent's range with
    the records outside sent again at once; the last record of each child a marker."""
    written = Written()
    rid = 0
    before = [user(i) for i in range(40)]
    put_all(kinesis, stream, list(aggregated_entries(before, per_record=PER_AGGREGATE)))
    written.ids += range(40)
    rid = 40
    split_first(kinesis, stream)
    children = {s["ShardId"]: s["HashKeyRange"] for s in open_in_hash_order(kinesis, stream)}
    ranges = {shard: (int(r["StartingHashKey"]), int(r["EndingHashKey"])) for shard, r in children.items()}
    for _ in range(30):
        users = [user(rid + i) for i in range(PER_AGGREGATE)]
        (entry,) = aggregated_entries(users, per_record=PER_AGGREGATE)
        stored = kinesis.put_record(StreamName=stream, **entry)["ShardId"]
        low, high = ranges[stored]
        again = []
        for i, (key, data, _) in enumerate(users):
            if not low <= hash_key(key) <= high:
                written.outside.add(rid + i)
                again.append({"Data": data, "PartitionKey": key})
        if again:  # the KPL's "Wrong Shard" retry: each to its own shard
            answer = kinesis.put_records(StreamName=stream, Records=again)["Records"]
            assert all(r["ShardId"] != stored for r in answer), "kinesalite routed a record outside back to its shard"
        written.ids += range(rid, rid + PER_AGGREGATE)
        rid += PER_AGGREGATE
    for shard, (low, _) in ranges.items():  # a marker at the end of each child
        marker = json.dumps({"id": -1, "shard": shard}).encode()
        kinesis.put_record(StreamName=stream, Data=marker, PartitionKey="m", ExplicitHashKey=str(low))
    for i in written.ids:
        written.by_key[user(i)[0]].append(i)
    return written


@pytest.mark.parametrize("rule", ["deliver", "drop"])
def test_user_records_outside_their_shard_after_a_split_are_counted_and_delivered_or_dropped(
    kinesalite: LocalServer, moto_server: LocalServer, rule: str
) -> None:
    kinesis = kinesalite.client("kinesis")
    stream, app = new_stream(kinesis, 1), unique("app")
    written = write(kinesis, stream)
    assert 0 < len(written.outside) < len(written.ids) // 2  # the aggregates after the split do mix keys
    stats = OutsideStats()
    config = attrs.evolve(SERVER_CONFIG, kpl_outside_shard=rule, stats=stats)
    db = moto_server.client("dynamodb")
    k = Kinsumer(stream, app, "a", config, kinesis=kinesalite.client("kinesis"), dynamodb=db)
    k.create_required_tables()
    got: list[int] = []
    keys: dict[str, list[int]] = defaultdict(list)
    markers = 0
    with k:
        while markers < 2:  # each child's marker: everything before it on the child was read
            record = k.next_record(timeout=60)
            assert record is not None, f"{len(got)} records read, then none for 60 s"
            body = json.loads(record.data)
            if body["id"] < 0:
                markers += 1
                continue
            got.append(body["id"])
            keys[body["key"]].append(body["id"])

        def stored() -> int:
            rows = checkpoints_table.load_rows(db, f"{app}_checkpoints").values()
            return sum(row.outside_range for row in rows)

        wait_until(lambda: stored() == len(written.outside), 30, "the count in the checkpoints table")
        view = render(read_status(kinesis, db, stream, app, max_age=10))
        assert "KPL records outside its range" in view
    if rule == "deliver":
        assert Counter(got) == Counter({i: 2 if i in written.outside else 1 for i in written.ids})
        assert stats.outside == Counter({False: len(written.outside)})
    else:
        assert Counter(got) == Counter(written.ids)  # each once, none lost
        assert keys == written.by_key  # per partition key, in the order written
        assert stats.outside == Counter({True: len(written.outside)})


@pytest.mark.parametrize("rule", ["deliver", "drop"])
def test_fan_out_counts_and_delivers_or_drops_user_records_outside_their_shard(
    kinesis_mock: LocalServer, moto_server: LocalServer, rule: str
) -> None:
    """Two shards, aggregates of every key (no split needed for an aggregate to hold another shard's keys)."""
    kinesis = kinesis_mock.client("kinesis")
    stream, app = new_stream(kinesis, 2), unique("app")
    ranges = {
        s["ShardId"]: (int(s["HashKeyRange"]["StartingHashKey"]), int(s["HashKeyRange"]["EndingHashKey"]))
        for s in open_in_hash_order(kinesis, stream)
    }
    ids, outside = list(range(10 * PER_AGGREGATE)), set()
    for first in range(0, len(ids), PER_AGGREGATE):
        users = [user(i) for i in range(first, first + PER_AGGREGATE)]
        (entry,) = aggregated_entries(users, per_record=PER_AGGREGATE)
        low, high = ranges[kinesis.put_record(StreamName=stream, **entry)["ShardId"]]
        outside |= {first + i for i, (key, _, _) in enumerate(users) if not low <= hash_key(key) <= high}
    assert outside
    stats = OutsideStats()
    config = attrs.evolve(SERVER_CONFIG, kpl_outside_shard=rule, stats=stats, efo_consumer_name="outside")
    k = Kinsumer(stream, app, "a", config, kinesis=kinesis, dynamodb=moto_server.client("dynamodb"))
    k.create_required_tables()
    expected = [i for i in ids if rule == "deliver" or i not in outside]
    got: list[int] = []
    with k:
        while len(got) < len(expected):
            record = k.next_record(timeout=60)
            assert record is not None, f"{len(got)} records read, then none for 60 s"
            got.append(json.loads(record.data)["id"])
        wait_until(lambda: sum(stats.outside.values()) == len(outside), 30, "every record outside counted")
    assert sorted(got) == expected
    assert stats.outside == Counter({rule == "drop": len(outside)})
