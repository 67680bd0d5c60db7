"""The age of the oldest record in hand per shard, on moto's server: ``status()``, the stats'
``record_age``, the checkpoint row at commits, and ``kinsumer status --json``."""

from __future__ import annotations

import threading
from collections.abc import Callable

import attrs
import pytest

from demo.servers import LocalServer
from kinsumer import Kinsumer, StatReceiver
from kinsumer.coordination import checkpoints_table
from kinsumer.status import read_status
from tests.helpers import wait_until
from tests.server.conftest import SERVER_CONFIG

pytestmark = pytest.mark.server


class Ages(StatReceiver):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[str, float | None]] = []

    def record_age(self, shard_id: str, oldest_seconds: float | None) -> None:
        with self.lock:
            self.calls.append((shard_id, oldest_seconds))

    def last(self, shard_id: str) -> float | None:
        with self.lock:
            return next((age for shard, age in reversed(self.calls) if shard == shard_id), -1.0)


def test_a_record_held_ages_in_status_stats_and_the_row_until_it_is_checkpointed(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(1)
    kinesis, db = moto_server.client("kinesis"), moto_server.client("dynamodb")
    kinesis.put_record(StreamName=stream, Data=b"held", PartitionKey="k")
    ages = Ages()
    config = attrs.evolve(SERVER_CONFIG, manual_checkpointing=True, stats=ages)
    k = Kinsumer(stream, app, "w1", config, kinesis=kinesis, dynamodb=db)
    k.run()
    try:
        data, checkpoint = k.next_with_checkpointer(timeout=30)
        assert data == b"held" and checkpoint is not None
        shard = checkpoint.shard_id

        def owned_age() -> float | None:
            return next(s.oldest_record_age for s in k.status().shards if s.shard_id == shard)

        wait_until(lambda: (owned_age() or 0) > 0.6, 10, "status() to show the held record's age")
        wait_until(lambda: (ages.last(shard) or 0) > 0.6, 10, "record_age to report the held record")
        row = lambda: checkpoints_table.read_row(db, f"{app}_checkpoints", shard)  # noqa: E731
        wait_until(lambda: row().oldest_arrival is not None, 10, "the row to store the held record's arrival")
        status = read_status(kinesis, db, stream, app, max_age=2.0)
        [seen] = [s for s in status.shards if s.shard_id == shard]
        assert seen.oldest_record_age is not None and seen.oldest_record_age > 0.5
        assert status.to_json()["shards"][0]["oldest_record_age"] == seen.oldest_record_age

        checkpoint()  # finished with: nothing held any more
        wait_until(lambda: owned_age() is None, 10, "status() to show nothing held")
        wait_until(lambda: ages.last(shard) is None, 10, "record_age to report None")
        wait_until(lambda: row().oldest_arrival is None, 10, "the row to drop the arrival at the next commit")
    finally:
        k.stop()
