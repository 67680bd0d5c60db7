"""A real Kinsumer against kinsumer.testing's stream and tables: create_required_tables(), run(), next(),
process(); every record put is handled, in order per shard, across a split and a merge (children after their
parents) and for KPL aggregates; checkpoints survive a stop, and the next client resumes after them."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from kinsumer import Config, Kinsumer, Record
from kinsumer.testing import LocalAWS
from tests.helpers import wait_until

#: Rounds every 0.25 s, a silent client dead after 1 s, commits every 0.1 s.
FAST = Config(
    shard_check_frequency=0.25, client_record_max_age=1.0, commit_frequency=0.1, leader_action_frequency=0.5,
    throttle_delay=0.2, handoff_timeout=1,
)  # fmt: skip


@pytest.fixture
def aws() -> LocalAWS:
    return LocalAWS()


@pytest.fixture
def made() -> Iterator[list[Kinsumer]]:
    """The Kinsumers a test makes, stopped at its end whatever happens."""
    clients: list[Kinsumer] = []
    yield clients
    for k in clients:
        k.stop()


def client(aws: LocalAWS, made: list[Kinsumer], name: str = "worker") -> Kinsumer:
    k = aws.kinsumer("clicks", "app", name, FAST)
    k.create_required_tables()
    made.append(k)
    return k


def put_numbered(aws: LocalAWS, first: int, count: int, keys: int = 10) -> list[str]:
    """Records whose data is their number, keyed ``key-<n % keys>``; their data."""
    for n in range(first, first + count):
        aws.kinesis.put("clicks", str(n), f"key-{n % keys}")
    return [str(n) for n in range(first, first + count)]


def assert_in_order_per_shard_and_key(handled: list[Record]) -> None:
    by_shard: dict[str, list[int]] = {}
    by_key: dict[str, list[int]] = {}
    for r in handled:
        by_shard.setdefault(r.shard_id, []).append(int(r.sequence_number))
        by_key.setdefault(r.partition_key, []).append(int(r.data))
    for shard_id, numbers in by_shard.items():
        assert numbers == sorted(numbers), f"{shard_id} out of order"
    for key, numbers in by_key.items():
        assert numbers == sorted(numbers), f"{key} out of order"


def test_next_gets_every_record_put_in_order_per_shard(aws: LocalAWS, made: list[Kinsumer]) -> None:
    aws.kinesis.add_stream("clicks", shards=3)
    put = put_numbered(aws, 0, 300)
    k = client(aws, made)
    k.run()
    handled: list[Record] = []
    while len(handled) < len(put):
        record = k.next_record(timeout=10)
        assert record is not None
        handled.append(record)
    assert sorted(r.data.decode() for r in handled) == sorted(put)
    assert {r.shard_id for r in handled} == set(aws.kinesis.open_shards("clicks"))
    assert_in_order_per_shard_and_key(handled)


def test_process_gets_every_record_across_a_split_and_a_merge_children_after_their_parents(
    aws: LocalAWS, made: list[Kinsumer]
) -> None:
    aws.kinesis.add_stream("clicks", shards=2)
    put = put_numbered(aws, 0, 100)
    low, high = aws.kinesis.split("clicks", "shardId-000000000000")
    put += put_numbered(aws, 100, 100)
    merged = aws.kinesis.merge("clicks", high, "shardId-000000000001")
    put += put_numbered(aws, 200, 100)
    parents = {low: ["shardId-000000000000"], high: ["shardId-000000000000"],
               merged: [high, "shardId-000000000001"]}  # fmt: skip
    k = client(aws, made)
    k.run()
    handled: list[Record] = []
    lock = threading.Lock()

    def handle(record: Record) -> None:
        with lock:
            handled.append(record)

    thread = threading.Thread(target=k.process, args=(handle,))
    thread.start()
    wait_until(lambda: len(handled) >= len(put), 30, "every record handled")
    k.stop()
    thread.join(10)
    assert not thread.is_alive()
    data = [r.data.decode() for r in handled]
    assert sorted(data) == sorted(put) and len(data) == len(set(data))  # each once
    assert_in_order_per_shard_and_key(handled)
    position = {r.data.decode(): i for i, r in enumerate(handled)}
    for child, its_parents in parents.items():
        first_of_child = min(position[r.data.decode()] for r in handled if r.shard_id == child)
        for parent in its_parents:
            assert max(position[r.data.decode()] for r in handled if r.shard_id == parent) < first_of_child


def test_kpl_aggregates_are_delivered_as_their_user_records_in_order(aws: LocalAWS, made: list[Kinsumer]) -> None:
    aws.kinesis.add_stream("clicks", shards=2)
    users = [(f"user {n}", f"key-{n % 7}") for n in range(300)]
    written = aws.kinesis.put_aggregated("clicks", users, max_records=50)
    assert written < len(users) / 10  # aggregates, not plain records
    k = client(aws, made)
    k.run()
    handled = []
    while len(handled) < len(users):
        record = k.next_record(timeout=10)
        assert record is not None
        handled.append(record)
    assert sorted((r.data.decode(), r.partition_key) for r in handled) == sorted(users)
    assert all(r.sub_sequence_number is not None for r in handled)
    for shard_id in {r.shard_id for r in handled}:
        positions = [(int(r.sequence_number), r.sub_sequence_number) for r in handled if r.shard_id == shard_id]
        assert positions == sorted(positions)
    by_key: dict[str, list[int]] = {}
    for r in handled:
        by_key.setdefault(r.partition_key, []).append(int(r.data.decode().split()[1]))
    assert all(numbers == sorted(numbers) for numbers in by_key.values())


def test_checkpoints_survive_a_stop_and_the_next_client_resumes_after_them(aws: LocalAWS, made: list[Kinsumer]) -> None:
    aws.kinesis.add_stream("clicks", shards=2)
    put = put_numbered(aws, 0, 100)
    first = client(aws, made, "first")
    first_handled = []
    with first:
        while len(first_handled) < 60:
            data = first.next(timeout=10)
            assert data is not None
            first_handled.append(data.decode())
    put += put_numbered(aws, 100, 50)
    second = client(aws, made, "second")
    second_handled: list[str] = []
    with second:
        while len(first_handled) + len(second_handled) < len(put):
            data = second.next(timeout=10)
            assert data is not None
            second_handled.append(data.decode())
    assert not set(first_handled) & set(second_handled)  # a clean stop: nothing twice
    assert sorted(first_handled + second_handled) == sorted(put)


def test_the_packages_example_runs_as_written() -> None:
    import textwrap

    import kinsumer.testing

    doc = kinsumer.testing.__doc__ or ""
    example = textwrap.dedent(doc.split("Example::", 1)[1])
    exec(compile(example, "kinsumer.testing example", "exec"), {})
