"""Several clients over real HTTP against a moto server: delivery, rebalancing, manual mode, faults."""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import json
import random
import threading
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from demo.servers import LocalServer
from kinsumer import Checkpoint, Kinsumer, Record
from tests.faults import FaultPlan
from tests.helpers import Audit, Producer, produce_per_shard, wait_until
from tests.server.conftest import SERVER_CONFIG, Worker

pytestmark = pytest.mark.server


def assert_clean(audit: Audit, produced: list[int]) -> None:
    assert not audit.lost(produced), f"lost {len(audit.lost(produced))} records"
    assert not audit.duplicates(), f"duplicated: {sorted(audit.duplicates().items())[:10]}"
    assert not audit.order_violations(), f"order broken: {audit.order_violations()[:3]}"


def test_three_clients_eight_shards_deliver_every_record_once_in_order(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(8)
    kinesis = moto_server.client("kinesis")
    audit = Audit()
    workers = [Worker(moto_server, stream, app, f"client-{i}", audit).start() for i in range(3)]
    produced: list[int] = []
    for round_ in range(10):  # 5,000 records per shard, written while the clients read
        produced += produce_per_shard(kinesis, stream, 500, first_id=round_ * 4000)
    wait_until(lambda: audit.count() >= len(produced), 120, "every record delivered")
    for worker in workers:
        worker.stop()
    assert len(produced) == 40_000
    assert_clean(audit, produced)
    per_client = {w.name: sum(1 for d in audit.deliveries if d.client == w.name) for w in workers}
    assert all(n > 0 for n in per_client.values()), per_client  # the work was shared


def test_a_client_joins_and_one_leaves_cleanly_mid_stream_without_loss_or_duplicates(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(8)
    audit = Audit()
    producer = Producer(moto_server.client("kinesis"), stream, total=30_000, batch=500, pause=0.05)
    producer.start()
    workers = [Worker(moto_server, stream, app, f"client-{i}", audit).start() for i in range(3)]
    wait_until(lambda: audit.count() >= 6_000, 120, "a first part delivered")
    joiner = Worker(moto_server, stream, app, "client-3", audit).start()
    wait_until(lambda: joiner.stats.calls["shard_gained"] >= 2, 60, "the new client to take shards")
    count_at_leave = audit.count()
    leaver = workers.pop(0)
    leaver.stop()
    wait_until(lambda: audit.count() >= count_at_leave + 3_000, 60, "delivery after the leave")
    producer.join(120)
    assert producer.error is None
    wait_until(lambda: audit.count() >= len(producer.produced), 120, "every record delivered")
    for worker in [*workers, joiner]:
        worker.stop()
    assert_clean(audit, producer.produced)
    handoffs = [h for w in [*workers, joiner, leaver] for h in w.stats.handoffs]
    assert handoffs and all(clean for _, _, clean in handoffs)


def test_manual_mode_redelivers_exactly_what_was_never_acknowledged_after_a_restart(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(4)
    produced = produce_per_shard(moto_server.client("kinesis"), stream, 500)
    config = attrs.evolve(SERVER_CONFIG, manual_checkpointing=True, handoff_timeout=1.0)
    never = {rid for rid in produced if rid % 37 == 5}
    rng = random.Random(7)

    def run(acknowledge: Callable[[int], bool], until: Callable[[list[Record]], bool]) -> list[Record]:
        """One client, a pool acknowledging in random order; stops once ``until`` holds."""
        k = Kinsumer(
            stream,
            app,
            "manual",
            config,
            kinesis=moto_server.client("kinesis"),
            dynamodb=moto_server.client("dynamodb"),
        )
        seen: list[Record] = []
        futures = []
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            k.run()
            while not until(seen):
                record, mark = k.next_record_with_checkpointer(timeout=30)
                assert record is not None and mark is not None
                seen.append(record)
                rid = json.loads(record.data)["id"]
                if acknowledge(rid):
                    futures.append(pool.submit(process, mark, rng.random() / 500))
            concurrent.futures.wait(futures)
        k.stop()
        return seen

    def process(mark: Checkpoint, delay: float) -> None:
        threading.Event().wait(delay)  # uneven work, so acknowledgements arrive out of order
        mark()

    first = run(lambda rid: rid not in never, lambda seen: len(seen) >= len(produced))
    assert len(first) == len(produced)
    # the stored checkpoint of each shard stops before its first never-acknowledged record
    expected_again: set[int] = set()
    for shard in {r.shard_id for r in first}:
        in_shard = [r for r in first if r.shard_id == shard]
        first_unacked = next(i for i, r in enumerate(in_shard) if json.loads(r.data)["id"] in never)
        expected_again |= {json.loads(r.data)["id"] for r in in_shard[first_unacked:]}
    second = run(lambda rid: True, lambda seen: len(seen) >= len(expected_again))
    again = [json.loads(r.data)["id"] for r in second]
    assert set(again) == expected_again
    assert len(again) == len(set(again))
    assert never <= set(again)
    acknowledged_first = {json.loads(r.data)["id"] for r in first} - expected_again
    assert acknowledged_first | set(again) == set(produced)  # nothing lost
    for shard in {r.shard_id for r in second}:
        seqs = [int(r.sequence_number) for r in second if r.shard_id == shard]
        assert seqs == sorted(seqs)


@pytest.mark.parametrize(
    "choose",
    [
        pytest.param(lambda n: "ExpiredIteratorException" if n % 3 == 0 else None, id="expired-iterators"),
        pytest.param(lambda n: "ProvisionedThroughputExceededException" if n % 4 == 0 else None, id="throttling"),
        pytest.param(
            lambda n: {0: "ExpiredIteratorException", 1: "ProvisionedThroughputExceededException"}.get(n % 5),
            id="both",
        ),
    ],
)
def test_readers_recover_from_injected_get_records_faults(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str, choose: Callable[[int], str | None]
) -> None:
    stream = new_stream(4)
    # no botocore retries: every injected fault reaches kinsumer's own handling
    kinesis: Any = moto_server.client("kinesis", retries={"total_max_attempts": 1})
    plan = FaultPlan(kinesis, "GetRecords", choose)
    audit = Audit()
    producer = Producer(moto_server.client("kinesis"), stream, total=8_000, batch=200, pause=0.02)
    producer.start()
    worker = Worker(
        moto_server,
        stream,
        app,
        "faulty",
        audit,
        config=attrs.evolve(SERVER_CONFIG, max_records_per_call=100),
        kinesis=kinesis,
    ).start()
    producer.join(120)
    wait_until(lambda: audit.count() >= len(producer.produced), 120, "every record delivered")
    worker.stop()  # re-raises anything next_record() raised
    assert_clean(audit, producer.produced)
    assert sum(plan.injected.values()) >= 10
    for code, count in plan.injected.items():  # a fault on a call under way as the worker stops is abandoned
        abandoned = worker.stats.abandoned.count(("GetRecords", code))
        assert worker.stats.retried[("GetRecords", code)] + abandoned == count


def test_a_kinesis_client_shared_with_kinsumer_answers_its_other_callers_as_before(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    """kinsumer parses its own GetRecords in one pass; the user's calls on the same client get botocore's."""
    stream = new_stream(2)
    shared, plain = moto_server.client("kinesis"), moto_server.client("kinesis")
    zones: set[object] = set()

    class ZoneAudit(Audit):
        def add(self, client: str, record: Record) -> Any:
            zones.add(record.approximate_arrival_timestamp.tzinfo)
            return super().add(client, record)

    audit = ZoneAudit()
    worker = Worker(moto_server, stream, app, "client", audit, kinesis=shared).start()
    produced = produce_per_shard(plain, stream, 50)
    wait_until(lambda: audit.count() >= len(produced), 60, "every record delivered")
    answers = []
    for client in (plain, shared):  # the user's own reads, while kinsumer reads with the same client
        iterator = client.get_shard_iterator(
            StreamName=stream, ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        answers.append(client.get_records(ShardIterator=iterator, Limit=1000)["Records"])
    worker.stop()
    assert_clean(audit, produced)
    assert answers[0] and [
        (r["Data"], r["SequenceNumber"], repr(r["ApproximateArrivalTimestamp"])) for r in answers[1]
    ] == [(r["Data"], r["SequenceNumber"], repr(r["ApproximateArrivalTimestamp"])) for r in answers[0]]
    # kinsumer's own reads went through its parser (UTC timestamps), not botocore's (local time)
    assert zones == {dt.UTC}


def test_two_streams_under_one_application_name_lose_nothing_the_second_client_refuses(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    """As reported: streams a and b (the same shard IDs), one client each, one application name. The
    client of b refuses to start instead of taking half of the shard rows; a's client reads all of a."""
    from kinsumer import ConfigError

    a, b = new_stream(2), new_stream(2)
    kinesis = moto_server.client("kinesis")
    produced = produce_per_shard(kinesis, a, 150)
    produce_per_shard(kinesis, b, 150)
    audit = Audit()
    reader = Worker(moto_server, a, app, "c-a", audit).start()
    with pytest.raises(ConfigError, match=f"consumes, '{a}'.*got '{b}'"):
        Worker(moto_server, b, app, "c-b", Audit()).start()
    wait_until(lambda: audit.count() >= len(produced), 60, "every record of stream a")
    reader.stop()
    assert not audit.lost(produced) and not audit.duplicates()


def test_run_starts_through_transient_faults_of_its_first_calls(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    """The first DescribeTable, DescribeStreamSummary and the home stream's PutItem each fail twice
    (botocore retries nothing here): run() retries them and starts, as reading retries its faults."""
    stream = new_stream(1)
    produced = produce_per_shard(moto_server.client("kinesis"), stream, 5)
    kinesis: Any = moto_server.client("kinesis", retries={"total_max_attempts": 1})
    dynamodb: Any = moto_server.client("dynamodb", retries={"total_max_attempts": 1})
    plans = [
        FaultPlan(dynamodb, "DescribeTable", lambda n: "InternalServerError" if n <= 2 else None),
        FaultPlan(kinesis, "DescribeStreamSummary", lambda n: "LimitExceededException" if n <= 2 else None),
        FaultPlan(dynamodb, "PutItem", lambda n: "InternalServerError" if n <= 2 else None),
    ]
    consumer = Kinsumer(stream, app, "faulty-start", SERVER_CONFIG, kinesis=kinesis, dynamodb=dynamodb)
    got = []
    with consumer:
        while len(got) < len(produced):
            record = consumer.next_record(timeout=30)
            assert record is not None
            got.append(json.loads(record.data)["id"])
    assert sorted(got) == produced
    assert [sum(plan.injected.values()) for plan in plans] == [2, 2, 2]
