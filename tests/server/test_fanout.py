"""Enhanced fan-out (SubscribeToShard) on kinesis-mock: its Kinesis, with moto's server for DynamoDB.

kinesis-mock implements stream consumers and SubscribeToShard over plain HTTP, and routes new
records to the children after a split (moto does not). It sends no ``initial-response`` event,
one event a second whether records came or not, never ends a subscription on a split parent
(GetRecords does), and refuses a second subscription to a shard for a second or two after the
first closed (ResourceInUseException, inside the event stream).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import threading
from collections.abc import Iterator
from typing import Any

import attrs
import boto3
import pytest
import urllib3.exceptions
from botocore.parsers import ResponseParserError

from demo.servers import LocalServer
from kinsumer import Config, ConfigError, Kinsumer, NoRecordWithin, StatReceiver
from kinsumer.aws.stream_consumers import describe_stream_consumer
from kinsumer.aws.subscription_http import lean_subscriber
from kinsumer.coordination.committer import COMMIT_THREADS
from kinsumer.reading import fanout, fanout_hub
from kinsumer.reading.fanout import fanout_readers
from kinsumer.status import read_status
from tests.conftest import unique
from tests.helpers import Audit, Producer, wait_until
from tests.reshard import assert_reshard_delivery, merge_adjacent, new_stream, split_first
from tests.server.conftest import SERVER_CONFIG, Worker

pytestmark = pytest.mark.server

EFO_CONFIG = attrs.evolve(SERVER_CONFIG, efo_consumer_name="efo-tests")
KEYS = 12


def stream_arn(kinesis: Any, stream: str) -> str:
    return str(kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamARN"])


def workers(
    kinesis_mock: LocalServer, moto_server: LocalServer, stream: str, app: str, audit: Audit, names: str
) -> list[Worker]:
    return [
        Worker(moto_server, stream, app, name, audit, EFO_CONFIG, kinesis=kinesis_mock.client("kinesis"))
        for name in names
    ]


def check(audit: Audit, produced: list[int]) -> None:
    assert not audit.lost(produced)
    assert not audit.duplicates()
    assert not audit.order_violations()


def test_fan_out_registers_its_consumer_once_reads_every_shard_and_leaves_it_registered(
    kinesis_mock: LocalServer, moto_server: LocalServer, app: str
) -> None:
    kinesis = kinesis_mock.client("kinesis")
    stream, audit = new_stream(kinesis, 4), Audit()
    producer = Producer(kinesis, stream, total=None, keys=KEYS)
    producer.write_batch(200)  # before the subscriptions: read from TRIM_HORIZON
    clients = workers(kinesis_mock, moto_server, stream, app, audit, "ab")
    for worker in clients:
        worker.start()
    wait_until(lambda: audit.count() >= 200, 60, "the records written before")
    producer.write_batch(200)  # pushed to the open subscriptions
    wait_until(lambda: audit.count() >= 400, 60, "the records written since")
    shards = [s for w in clients for s in w.kinsumer.status().shards]
    assert sorted(s.shard_id for s in shards) == [f"shardId-00000000000{i}" for i in range(4)]
    assert {s.reading for s in shards} == {"fan-out:efo-tests"}
    application = read_status(kinesis, moto_server.client("dynamodb"), stream, app, max_age=10)  # kinsumer status
    assert {c.reading for c in application.clients} == {"fan-out:efo-tests"}
    assert {s.reading for s in application.shards} == {"fan-out:efo-tests"}
    for worker in clients:
        worker.stop()
    check(audit, producer.produced)
    assert {d.client for d in audit.deliveries} == {"a", "b"}
    consumers = kinesis.list_stream_consumers(StreamARN=stream_arn(kinesis, stream))["Consumers"]
    assert [c["ConsumerName"] for c in consumers] == ["efo-tests"]  # registered once, still there after stop()
    assert all(w.stats.calls["records_fetched"] > 0 for w in clients)

    assert clients[0].kinsumer.deregister_stream_consumer() is True  # the administrator's explicit call
    wait_until(
        lambda: describe_stream_consumer(kinesis, stream_arn(kinesis, stream), "efo-tests") is None,
        30,
        "the consumer to be deregistered",
    )
    assert clients[0].kinsumer.deregister_stream_consumer() is False


def test_fan_out_across_a_split_and_a_merge_keeps_per_key_order_and_reads_children_after_parents(
    kinesis_mock: LocalServer, moto_server: LocalServer, app: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kinesis-mock never ends a subscription to a closed shard: a reader at its tip finds the end by checking with
    GetRecords, first ``fanout.CLOSED_CHECK`` seconds after records last came (5 s), here 1 s: the parent, then the
    split's child that the merge closed, each waited that long before their children could be read."""
    monkeypatch.setattr(fanout, "CLOSED_CHECK", 1.0)
    kinesis = kinesis_mock.client("kinesis")
    stream, audit = new_stream(kinesis, 2), Audit()
    producer = Producer(kinesis, stream, total=None, keys=KEYS)
    clients = workers(kinesis_mock, moto_server, stream, app, audit, "ab")
    for worker in clients:
        worker.start()
    producer.write_batch(240)
    wait_until(lambda: audit.count() >= 240, 60, "reading before the split")
    split_first(kinesis, stream)
    producer.write_batch(240)
    merge_adjacent(kinesis, stream, 1)  # the right child of the split and the other original
    producer.write_batch(240)
    wait_until(lambda: audit.count() >= len(producer.produced), 90, "every record delivered")
    for worker in clients:
        worker.stop()
    check(audit, producer.produced)
    listing = kinesis.list_shards(StreamName=stream)["Shards"]
    assert assert_reshard_delivery(audit, listing, lambda rid: producer.keys[rid % KEYS]) == 4


class Disconnects:
    """Breaks subscriptions: every ``every``-th event of a subscription raises a connection error.

    Registered on ``before-parse.kinesis.SubscribeToShard`` like kinsumer's own handler, it
    wraps the raw event stream; odd subscriptions break, even ones end early (as one does on
    AWS after 5 minutes), so both renewals are exercised.
    """

    def __init__(self, every: int) -> None:
        self.every = every
        self.broken = 0
        self.ended = 0
        self._count = itertools.count()
        self._lock = threading.Lock()

    def __call__(self, response_dict: dict[str, Any], **_: Any) -> None:
        if response_dict.get("status_code") == 200:
            response_dict["body"] = _Breaking(response_dict["body"], self, next(self._count) % 2 == 0)

    def note(self, broke: bool) -> None:
        with self._lock:
            if broke:
                self.broken += 1
            else:
                self.ended += 1


class _Breaking:
    def __init__(self, raw: Any, disconnects: Disconnects, breaks: bool) -> None:
        self._raw, self._disconnects, self._breaks = raw, disconnects, breaks

    def stream(self) -> Iterator[bytes]:
        for i, chunk in enumerate(self._raw.stream()):
            if i == self._disconnects.every:
                self._disconnects.note(self._breaks)
                if self._breaks:
                    raise urllib3.exceptions.ProtocolError("Connection broken: injected by the test")
                return
            yield chunk

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


def test_subscriptions_broken_or_ended_midway_are_renewed_after_the_last_record_handed_on(
    kinesis_mock: LocalServer, moto_server: LocalServer, app: str
) -> None:
    """Six shards: the first subscriptions, one a shard, are three broken and three ended, each after three events
    (kinesis-mock sends one a second); each shard's renewal then has to start after the last record handed on (with
    two shards, the three of each took three rounds, each of four events and the second or two kinesis-mock refuses
    a new subscription after one closed)."""
    kinesis = kinesis_mock.client("kinesis")
    stream, audit = new_stream(kinesis, 6), Audit()
    producer = Producer(kinesis, stream, total=None, batch=20, pause=0.2, keys=2 * KEYS)  # 12 leave a shard empty
    disconnects = Disconnects(every=3)
    client = kinesis_mock.client("kinesis")
    client.meta.events.register("before-parse.kinesis.SubscribeToShard", disconnects)
    (worker,) = [Worker(moto_server, stream, app, "a", audit, EFO_CONFIG, kinesis=client)]
    worker.start()
    producer.start()
    wait_until(lambda: disconnects.broken >= 3 and disconnects.ended >= 3, 90, "subscriptions broken and ended")
    produced = producer.stop()
    wait_until(lambda: audit.count() >= len(produced), 60, "every record delivered")
    worker.stop()
    check(audit, produced)
    assert worker.stats.retried[("SubscribeToShard", "ProtocolError")] >= 3


def test_a_config_without_a_consumer_name_has_nothing_to_deregister(moto_server: LocalServer) -> None:
    db = moto_server.client("dynamodb")
    k = Kinsumer("s", "app", "c", Config(), kinesis=moto_server.client("kinesis"), dynamodb=db)
    with pytest.raises(ConfigError, match="efo_consumer_name"):
        k.deregister_stream_consumer()
    with pytest.raises(ConfigError, match="efo_consumer_name"):
        Config(efo_consumer_name="not a name!")


def test_a_kinesis_client_shared_with_kinsumer_answers_its_own_subscribe_calls_as_before(
    kinesis_mock: LocalServer,
) -> None:
    kinesis = kinesis_mock.client("kinesis")
    stream = new_stream(kinesis, 1)
    consumer = kinesis.register_stream_consumer(StreamARN=stream_arn(kinesis, stream), ConsumerName="own")["Consumer"]
    wait_until(
        lambda: describe_stream_consumer(kinesis, stream_arn(kinesis, stream), "own")["ConsumerStatus"] == "ACTIVE",  # type: ignore[index]
        30,
        "the consumer",
    )
    fanout_readers(kinesis, stream, consumer["ConsumerARN"], StatReceiver())  # as Kinsumer.run() does
    with pytest.raises(ResponseParserError, match="initial-response"):  # botocore's own behaviour with this server
        kinesis.subscribe_to_shard(
            ConsumerARN=consumer["ConsumerARN"], ShardId="shardId-000000000000", StartingPosition={"Type": "LATEST"}
        )


def test_a_join_and_a_clean_leave_hand_shards_over_with_fan_out_without_a_duplicate(
    kinesis_mock: LocalServer, moto_server: LocalServer, app: str
) -> None:
    kinesis = kinesis_mock.client("kinesis")
    stream, audit = new_stream(kinesis, 4), Audit()
    producer = Producer(kinesis, stream, total=None, batch=20, pause=0.1, keys=KEYS)
    first, second = workers(kinesis_mock, moto_server, stream, app, audit, "ab")
    first.start()
    producer.start()
    wait_until(lambda: audit.count() >= 100, 60, "a reading every shard")
    second.start()  # a join: shards move from a to b
    wait_until(lambda: any(d.client == "b" for d in audit.deliveries), 60, "b reading")
    first.stop()  # a clean leave: every shard moves to b
    after_leave = audit.count()
    wait_until(lambda: audit.count() >= after_leave + 100, 60, "b reading on alone")
    produced = producer.stop()
    wait_until(lambda: audit.count() >= len(produced), 60, "every record delivered")
    second.stop()
    check(audit, produced)  # no duplicate: both handovers were clean
    assert {d.shard_id for d in audit.deliveries if d.client == "b"} == {f"shardId-00000000000{i}" for i in range(4)}


def test_a_client_of_its_own_making_reads_more_shards_than_the_default_pool_holds_without_dropping_connections(
    kinesis_mock: LocalServer,
    moto_server: LocalServer,
    app: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """80 shards, a subscription each, one client: its own Kinesis client keeps every connection it opens."""
    kinesis = kinesis_mock.client("kinesis")
    stream = new_stream(kinesis, 80)
    monkeypatch.setenv("AWS_ENDPOINT_URL_KINESIS", kinesis_mock.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "fan-out")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fan-out")
    k = Kinsumer(stream, app, "wide", EFO_CONFIG, session=boto3.Session(region_name="us-east-1"),
                 dynamodb=moto_server.client("dynamodb"))  # fmt: skip
    hash_keys = [
        str((int(s["HashKeyRange"]["StartingHashKey"]) + int(s["HashKeyRange"]["EndingHashKey"])) // 2)
        for s in kinesis.list_shards(StreamName=stream)["Shards"]
    ]
    got: set[int] = set()
    with k:
        wait_until(lambda: sum(1 for s in k.status().shards if s.captured) == 80, 60, "every shard subscribed")
        kinesis.put_records(StreamName=stream, Records=[
            {"Data": json.dumps({"id": i}).encode(), "PartitionKey": "p", "ExplicitHashKey": hash_keys[i % 80]}
            for i in range(240)
        ])  # fmt: skip
        while len(got) < 240:
            record = k.next_record(timeout=60)
            assert record is not None
            got.add(json.loads(record.data)["id"])
    assert got == set(range(240))
    assert not [r for r in caplog.records if "Connection pool is full" in r.getMessage()]


#: The pools of a fan-out client's threads and their caps (none grows with the shards).
POOLS = {
    "kinsumer-io": EFO_CONFIG.reader_threads, "kinsumer-commit": COMMIT_THREADS, "kinsumer-efo-io": fanout_hub.THREADS,
}  # fmt: skip


def read_by_fan_out_counting_threads(
    kinesis_mock: LocalServer, moto_server: LocalServer, shards: int, per_shard: int
) -> collections.Counter[str]:
    """One client reads a stream of ``shards`` shards by fan-out, ``per_shard`` records each, written once
    every shard is subscribed; each record comes once, in its shard's order. The threads the process
    ran beyond those it ran before the client started, while subscribing and reading: the most at
    any one time of each kind (a thread's name without its number)."""
    kinesis = kinesis_mock.client("kinesis")
    stream, app = new_stream(kinesis, shards), unique("app")
    assert lean_subscriber(kinesis) is not None, "the subscriptions are sent by kinsumer itself"
    before = {thread.ident for thread in threading.enumerate()}
    most: collections.Counter[str] = collections.Counter()

    def count() -> bool:
        now = [thread.name.rstrip("0123456789-") for thread in threading.enumerate() if thread.ident not in before]
        most.update(collections.Counter(now) - most)  # the most of each kind
        return True

    k = Kinsumer(stream, app, "threads", EFO_CONFIG, kinesis=kinesis, dynamodb=moto_server.client("dynamodb"))
    k.create_required_tables()
    listing = kinesis.list_shards(StreamName=stream)["Shards"]
    hash_keys = {
        s["ShardId"]: str((int(s["HashKeyRange"]["StartingHashKey"]) + int(s["HashKeyRange"]["EndingHashKey"])) // 2)
        for s in listing
    }
    got: dict[str, list[int]] = {shard: [] for shard in hash_keys}
    with k:
        wait_until(lambda: count() and sum(1 for s in k.status().shards if s.captured) == shards, 60,
                   "every shard subscribed")  # fmt: skip
        entries = [
            {"Data": json.dumps({"shard": shard, "n": n}).encode(), "PartitionKey": "p", "ExplicitHashKey": key}
            for n in range(per_shard)
            for shard, key in hash_keys.items()
        ]
        for start in range(0, len(entries), 500):
            answer = kinesis.put_records(StreamName=stream, Records=entries[start : start + 500])
            assert not answer.get("FailedRecordCount")
        for _ in range(len(entries)):
            record = k.next_record(timeout=60)
            assert record is not None
            body = json.loads(record.data)
            assert record.shard_id == body["shard"]
            got[body["shard"]].append(body["n"])
            count()
        with pytest.raises(NoRecordWithin):
            k.next_record(timeout=1.5)  # nothing twice
    assert got == {shard: list(range(per_shard)) for shard in hash_keys}  # every record once, in order
    wait_until(lambda: pumps() == 0, 10, "the pumps of the subscriptions to end with the client")
    return most


def pumps() -> int:
    """The coroutines on the fan-out hub's loop (but the one that counts them)."""

    async def count() -> int:
        return len(asyncio.all_tasks()) - 1

    return asyncio.run_coroutine_threadsafe(count(), fanout_hub.hub().loop).result(10)


def test_the_threads_of_a_fan_out_client_do_not_grow_with_its_shards(
    kinesis_mock: LocalServer, moto_server: LocalServer
) -> None:
    """8 shards, then 80: the subscriptions are read on one event loop, whatever their number.

    Besides a few threads of one each, a client's threads are its pools', each capped whatever
    the shards (the shards' calls, the commits, the fan-out hub's blocking calls)."""
    few = read_by_fan_out_counting_threads(kinesis_mock, moto_server, 8, 5)
    many = read_by_fan_out_counting_threads(kinesis_mock, moto_server, 80, 5)
    print(f"threads beyond the test's own at 8 shards: {few.total()} {dict(few)}; at 80: {many.total()} {dict(many)}")
    for threads in (few, many):
        assert all(threads[pool] <= cap for pool, cap in POOLS.items()), threads
        singles = {kind: n for kind, n in threads.items() if kind not in POOLS}
        assert all(n == 1 for n in singles.values()) and len(singles) <= 8, singles  # no thread a shard
    assert many.total() <= sum(POOLS.values()) + 8
