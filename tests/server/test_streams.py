"""One application, several streams: clients over HTTP against moto's server.

The streams have the same shard IDs, so every check is per stream: nothing lost, nothing twice,
shard order kept, each record naming its stream; and the rows a single-stream application already
has keep their keys.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable

import attrs
import pytest

from demo.servers import LocalServer
from kinsumer import Kinsumer, Record, StatReceiver
from kinsumer.coordination import checkpoints_table
from kinsumer.errors import ConfigError
from tests.helpers import StreamAudits, produce_per_shard, wait_until
from tests.server.conftest import SERVER_CONFIG, Worker

pytestmark = pytest.mark.server


def produce(moto_server: LocalServer, streams: list[str], per_shard: int, first: int = 0) -> dict[str, list[int]]:
    kinesis = moto_server.client("kinesis")
    return {s: produce_per_shard(kinesis, s, per_shard, first_id=first + i * 1_000_000) for i, s in enumerate(streams)}


@pytest.mark.parametrize("assignment", ["modulo", "balanced"])
def test_two_clients_share_the_shards_of_two_streams_and_deliver_each_record_once(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str, assignment: str
) -> None:
    streams = [new_stream(3), new_stream(2)]
    audits = StreamAudits(streams)
    config = attrs.evolve(SERVER_CONFIG, assignment=assignment)
    workers = [Worker(moto_server, streams, app, f"client-{i}", audits, config).start() for i in range(2)]
    produced = produce(moto_server, streams, 150)
    total = sum(len(ids) for ids in produced.values())
    wait_until(lambda: audits.count() >= total, 60, "every record of both streams")
    every = sorted(
        [(streams[0], f"shardId-00000000000{i}") for i in range(3)]
        + [(streams[1], f"shardId-00000000000{i}") for i in range(2)]
    )

    def owned() -> list[set[tuple[str, str]]]:
        return [{(s.stream, s.shard_id) for s in w.kinsumer.status().shards if s.captured} for w in workers]

    def shared() -> bool:  # all five shards, each read by one client, both clients reading
        mine, theirs = owned()
        return sorted(mine | theirs) == every and not mine & theirs and bool(mine) and bool(theirs)

    wait_until(shared, 30, "the five shards of both streams shared between the clients")
    for worker in workers:
        worker.stop()
    audits.assert_clean(produced)
    rows = checkpoints_table.load_rows(moto_server.client("dynamodb"), f"{app}_checkpoints")
    # the first stream (the application's home) keeps the keys of a single-stream application
    assert sorted(rows) == sorted(
        [f"shardId-00000000000{i}" for i in range(3)] + [f"{streams[1]}/shardId-00000000000{i}" for i in range(2)]
    )
    assert all(row.checkpoint is not None for row in rows.values())


def test_a_stream_is_added_by_restarting_the_clients_with_the_longer_list(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    first, added = new_stream(2), new_stream(2)
    audits = StreamAudits([first, added])
    one = Worker(moto_server, first, app, "one", audits).start()
    two = Worker(moto_server, first, app, "two", audits).start()
    produced = produce(moto_server, [first, added], 100)
    wait_until(lambda: audits.of[first].count() >= len(produced[first]), 60, "the first stream")
    # "two" comes back listing both streams; "one" lists only the first: the added one waits
    two.stop()
    two = Worker(moto_server, [first, added], app, "two", audits).start()
    assert {s.stream for s in two.kinsumer.status().shards} <= {first}  # its first round: "one" lacks it
    assert audits.of[added].count() == 0
    more = produce(moto_server, [first], 50, first=500_000)
    wait_until(lambda: audits.of[first].count() >= len(produced[first]) + len(more[first]), 60, "more of the first")
    one.stop()  # the last client without the added stream leaves: it is read from now on
    one = Worker(moto_server, [added, first], app, "one", audits).start()
    wait_until(lambda: audits.of[added].count() >= len(produced[added]), 60, "the added stream")
    one.stop()
    two.stop()
    audits.assert_clean({first: produced[first] + more[first], added: produced[added]})


def test_every_client_lists_the_home_stream_and_the_list_is_checked(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    home, other = new_stream(1), new_stream(1)
    clients = {"kinesis": moto_server.client("kinesis"), "dynamodb": moto_server.client("dynamodb")}
    first = Kinsumer([home, other], app, "first", SERVER_CONFIG, **clients)
    first.run()
    try:
        lacking = Kinsumer([other], app, "lacking", SERVER_CONFIG, **clients)
        with pytest.raises(ConfigError, match=rf"consumes, '{home}'.*Kinsumer\(\['{home}', '{other}'\]"):
            lacking.run()
    finally:
        first.stop()
    with pytest.raises(ConfigError, match="more than once"):
        Kinsumer([home, home], app, "twice", **clients)
    with pytest.raises(ConfigError, match="non-empty list"):
        Kinsumer([], app, "none", **clients)
    with pytest.raises(ConfigError, match="stream_name"):
        Kinsumer([home, "no spaces"], app, "bad", **clients)


def test_a_reset_of_one_stream_rewinds_its_rows_only(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    home, other = new_stream(2), new_stream(2)
    streams = [home, other]
    produced = produce(moto_server, streams, 40)
    first = StreamAudits(streams)
    worker = Worker(moto_server, streams, app, "first", first).start()
    wait_until(lambda: first.count() >= 160, 60, "both streams read")
    worker.stop()
    first.assert_clean(produced)
    admin = Worker(moto_server, streams, app, "admin", StreamAudits(streams)).kinsumer
    with pytest.raises(ConfigError, match="must name the stream to reset"):
        admin.reset("TRIM_HORIZON")
    plan = admin.reset("TRIM_HORIZON", stream=other)
    assert plan.stream == other
    assert [s.shard_id for s in plan.shards] == ["shardId-000000000000", "shardId-000000000001"]
    assert all(s.checkpoint is not None for s in plan.shards)  # it read the second stream's rows
    again = StreamAudits(streams)
    worker = Worker(moto_server, streams, app, "again", again).start()
    wait_until(lambda: again.of[other].count() >= 80, 60, "the reset stream read again")
    worker.stop()
    again.assert_clean({home: [], other: produced[other]})  # the home stream kept its checkpoints


def test_an_application_from_before_the_home_record_keeps_its_stream_home_whatever_comes_first(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    """Tables of a version that did not record the home stream: its rows name their stream, so a client
    listing a new stream first still reads the old one from its checkpoints, under the old keys."""
    old, new = new_stream(2), new_stream(2)
    produced = produce(moto_server, [old], 30)
    first = StreamAudits([old])
    worker = Worker(moto_server, old, app, "first", first).start()
    wait_until(lambda: first.count() >= 60, 60, "the old stream read")
    worker.stop()
    first.assert_clean(produced)
    db = moto_server.client("dynamodb")
    db.delete_item(TableName=f"{app}_metadata", Key={"Key": {"S": "Stream"}})  # as a version before the record
    more = {**produce(moto_server, [old], 20, first=500_000), **produce(moto_server, [new], 25, first=900_000)}
    audits = StreamAudits([new, old])
    worker = Worker(moto_server, [new, old], app, "second", audits).start()
    wait_until(lambda: audits.count() >= 90, 60, "both streams read")
    worker.stop()
    audits.assert_clean(more)  # the old stream went on from its checkpoints: nothing read twice
    assert sorted(checkpoints_table.load_rows(db, f"{app}_checkpoints")) == sorted(
        ["shardId-000000000000", "shardId-000000000001", f"{new}/shardId-000000000000", f"{new}/shardId-000000000001"]
    )


class ShardNames(StatReceiver):
    """The shard names each StatReceiver method was called with."""

    def __init__(self) -> None:
        self.names: dict[str, set[str]] = defaultdict(set)
        self._lock = threading.Lock()

    def _saw(self, method: str, shard_id: str) -> None:
        with self._lock:
            self.names[method].add(shard_id)

    def records_fetched(self, shard_id: str, count: int, millis_behind_latest: int | None) -> None:
        self._saw("records_fetched", shard_id)

    def record_delivered(self, shard_id: str, latency_seconds: float) -> None:
        self._saw("record_delivered", shard_id)

    def checkpoint_written(self, shard_id: str) -> None:
        self._saw("checkpoint_written", shard_id)

    def shard_gained(self, shard_id: str) -> None:
        self._saw("shard_gained", shard_id)


def test_stats_name_a_shard_of_the_second_stream_by_its_key(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    home, other = new_stream(1), new_stream(1)
    produced = produce(moto_server, [home, other], 20)
    stats = ShardNames()
    aws = {"kinesis": moto_server.client("kinesis"), "dynamodb": moto_server.client("dynamodb")}
    consumer = Kinsumer([home, other], app, "stats", attrs.evolve(SERVER_CONFIG, stats=stats), **aws)
    got: list[Record] = []
    with consumer:
        while len(got) < sum(map(len, produced.values())):
            record = consumer.next_record(timeout=30)
            assert record is not None
            got.append(record)
        wait_until(lambda: len(stats.names["checkpoint_written"]) == 2, 30, "both shards' checkpoints")
    keys = {"shardId-000000000000", f"{other}/shardId-000000000000"}
    assert {m: names for m, names in stats.names.items()} == dict.fromkeys(
        ("records_fetched", "record_delivered", "checkpoint_written", "shard_gained"), keys
    )
    assert {(r.stream, r.shard_id) for r in got} == {(home, "shardId-000000000000"), (other, "shardId-000000000000")}
