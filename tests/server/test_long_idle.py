"""A long-idle shard, on moto's server: read less often, up to ``max_idle_poll_interval``, and a record
written to it still reaches ``next()`` (after at most about that long), in order."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from demo.servers import LocalServer
from kinsumer import Kinsumer
from kinsumer.aws import lean_get_records
from kinsumer.reading import reader as reader_module
from tests.helpers import wait_until
from tests.server.conftest import SERVER_CONFIG

pytestmark = pytest.mark.server

#: An idle shard's GetRecords go 5 times 0.2 s apart, then 3 times 0.4 s apart (LONG_IDLE_AFTER, made 1 s
#: here), then 0.8 s, then 1.2 s apart.
CONFIG = attrs.evolve(SERVER_CONFIG, throttle_delay=0.2, idle_poll_interval=0.4, max_idle_poll_interval=1.2)
LONGEST = 1.2


class Reads:
    """When each GetRecords of the client was sent (monotonic)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.lock = threading.Lock()
        self.sent: list[float] = []
        send = lean_get_records.get_records

        def get_records(kinesis: Any, shard_iterator: str, limit: int, stream_arn: str | None = None) -> dict[str, Any]:
            with self.lock:
                self.sent.append(time.monotonic())
            return send(kinesis, shard_iterator, limit, stream_arn)

        monkeypatch.setattr(lean_get_records, "get_records", get_records)

    def since(self, index: int) -> list[float]:
        with self.lock:
            return self.sent[index:]


def test_a_long_idle_shard_is_read_at_the_longest_wait_and_a_record_written_to_it_still_comes(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reader_module, "LONG_IDLE_AFTER", 1.0)
    stream = new_stream(1)
    kinesis = moto_server.client("kinesis")
    reads = Reads(monkeypatch)
    k = Kinsumer(stream, app, "a", CONFIG, kinesis=kinesis, dynamodb=moto_server.client("dynamodb"))
    k.run()
    try:
        kinesis.put_record(StreamName=stream, Data=b"first", PartitionKey="k")
        first = k.next_record(timeout=30)
        assert first is not None and first.data == b"first"
        settled = len(reads.since(0))
        wait_until(lambda: len(reads.since(settled)) >= 13, 60, "the reads of the idle shard to slow down")
        gaps = [b - a for a, b in itertools.pairwise(reads.since(settled))]
        assert min(gaps[-2:]) >= LONGEST - 1e-6  # read at the longest wait, no sooner
        kinesis.put_record(StreamName=stream, Data=b"second", PartitionKey="k")
        kinesis.put_record(StreamName=stream, Data=b"third", PartitionKey="k")
        got = [k.next_record(timeout=30) for _ in range(2)]
        assert [r.data for r in got if r is not None] == [b"second", b"third"]  # none lost, in order
    finally:
        k.stop()
