"""Config(assignment="balanced") over HTTP against a moto server: a leave moves only the leaver's
shards, a join only what the newcomer takes, and records flow through both without loss."""

from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest

from demo.servers import LocalServer
from tests.helpers import Audit, Producer, wait_until
from tests.server.conftest import SERVER_CONFIG, Worker
from tests.server.test_clients import assert_clean

pytestmark = pytest.mark.server

BALANCED = attrs.evolve(SERVER_CONFIG, assignment="balanced")


def owners(workers: list[Worker]) -> dict[str, str]:
    """Shard -> the worker that has captured it."""
    return {s.shard_id: w.name for w in workers for s in w.kinsumer.status().shards if s.captured}


def settled(workers: list[Worker], shards: int) -> Callable[[], bool]:
    """Every shard captured by exactly one of ``workers``, the split balanced."""

    def check() -> bool:
        held = [[s.shard_id for s in w.kinsumer.status().shards if s.captured] for w in workers]  # one look each
        captured = [shard for shards_of in held for shard in shards_of]
        counts = [len(shards_of) for shards_of in held]
        return sorted(captured) == sorted(set(captured)) and len(captured) == shards and max(counts) - min(counts) <= 1

    return check


def moved(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {shard for shard, owner in after.items() if before.get(shard) != owner}


def test_a_leave_moves_only_the_leavers_shards_and_a_join_only_what_the_newcomer_takes(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(6)
    audit = Audit()
    producer = Producer(moto_server.client("kinesis"), stream, total=12_000, batch=200, pause=0.05)
    producer.start()
    workers = [Worker(moto_server, stream, app, f"client-{i}", audit, BALANCED).start() for i in range(3)]
    wait_until(settled(workers, 6), 60, "6 shards settled on 3 clients")
    before = owners(workers)

    leaver = workers.pop(next(i for i, w in enumerate(workers) if w.kinsumer.status().is_leader))  # the hard one
    leavers_shards = {shard for shard, owner in before.items() if owner == leaver.name}
    losses = {w.name: w.stats.calls["shard_lost"] for w in workers}
    leaver.stop()
    wait_until(settled(workers, 6), 60, "6 shards settled on the 2 left")
    after_leave = owners(workers)
    assert moved(before, after_leave) == leavers_shards and len(leavers_shards) == 2
    assert {w.name: w.stats.calls["shard_lost"] for w in workers} == losses  # nobody else gave a shard up

    joiner = Worker(moto_server, stream, app, "client-3", audit, BALANCED).start()
    workers.append(joiner)
    wait_until(settled(workers, 6), 60, "6 shards settled on 3 clients again")
    after_join = owners(workers)
    taken = {shard for shard, owner in after_join.items() if owner == joiner.name}
    assert moved(after_leave, after_join) == taken and len(taken) == 2

    producer.join(120)
    assert producer.error is None
    wait_until(lambda: audit.count() >= len(producer.produced), 120, "every record delivered")
    for worker in workers:
        worker.stop()
    assert_clean(audit, producer.produced)
