"""process()'s lifecycle hooks and max_record_age over HTTP on moto's server, two clients sharing a stream."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from demo.servers import LocalServer
from kinsumer import Failure, Kinsumer, Record
from kinsumer.coordination import checkpoints_table
from kinsumer.handling import attempts
from kinsumer.status import read_status
from tests.helpers import wait_until
from tests.server.conftest import SERVER_CONFIG

pytestmark = pytest.mark.server


def rid(record: Record) -> int:
    return int(json.loads(record.data)["id"])


def put(kinesis: Any, stream: str, ids: range) -> None:
    records = [{"Data": json.dumps({"id": i}).encode(), "PartitionKey": f"k{i}"} for i in ids]
    for start in range(0, len(records), 100):
        kinesis.put_records(StreamName=stream, Records=records[start : start + 100])


def test_a_clean_rebalance_calls_on_revoked_after_the_shards_last_record_and_before_its_release_then_on_assigned(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(2)
    kinesis, db = moto_server.client("kinesis"), moto_server.client("dynamodb")
    lock = threading.Lock()
    events: list[tuple[str, str, str]] = []  # (client, event, shard), in order
    handled: Counter[int] = Counter()
    busy: Counter[tuple[str, str]] = Counter()  # (client, shard) -> calls under way
    at_revoked: list[tuple[int, str | None]] = []  # calls under way on the shard, and its row's owner, then
    clients: list[tuple[Kinsumer, threading.Thread]] = []
    joined = threading.Event()

    def hooks(name: str) -> dict[str, Callable[[str], None]]:
        def note(event: str) -> Callable[[str], None]:
            def hook(shard: str) -> None:
                if event == "revoked":
                    row = checkpoints_table.read_row(db, f"{app}_checkpoints", shard)
                    with lock:
                        at_revoked.append((busy[(name, shard)], row.owner_id if row else None))
                with lock:
                    events.append((name, event, shard))

            return hook

        return {f"on_{event}": note(event) for event in ("assigned", "revoked", "lost")}

    def start(name: str) -> Kinsumer:
        k = Kinsumer(stream, app, name, SERVER_CONFIG, kinesis=moto_server.client("kinesis"), dynamodb=db)

        def handler(record: Record) -> None:
            with lock:
                busy[(name, record.shard_id)] += 1
            time.sleep(0.002 if joined.is_set() else 0.02)  # slow until second joins: it takes a backlog
            with lock:
                handled[rid(record)] += 1
                busy[(name, record.shard_id)] -= 1

        def run() -> None:
            with k:
                k.process(handler, concurrency=2, **hooks(name))

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        clients.append((k, thread))
        return k

    first = start("first")
    wait_until(lambda: sum(1 for s in first.status().shards if s.captured) == 2, 60, "first to take both shards")
    put(kinesis, stream, range(600))
    wait_until(lambda: len(handled) >= 50, 60, "records handled")
    second = start("second")
    wait_until(lambda: any(s.captured for s in second.status().shards), 60, "second to take a shard")
    joined.set()
    put(kinesis, stream, range(600, 700))
    wait_until(lambda: len(handled) == 700, 60, "every record handled")
    for k, thread in clients:
        k.stop()
        thread.join(30)
    assert set(handled.values()) == {1}  # a clean rebalance: none twice
    ((_, _, moved),) = [e for e in events if e[0] == "second" and e[1] == "assigned"]
    first_events = [e[1:] for e in events if e[0] == "first" and e[2] == moved]
    assert first_events[:2] == [("assigned", moved), ("revoked", moved)]  # given up cleanly, never lost
    assert at_revoked[0] == (0, first.client_id)  # its last record done, its row still first's
    assert not [e for e in events if e[1] == "lost"]
    assert events.index(("first", "revoked", moved)) < events.index(("second", "assigned", moved))


def test_records_too_old_go_to_the_sink_as_expired_unseen_and_kinsumer_status_counts_them(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = new_stream(1)
    kinesis, db = moto_server.client("kinesis"), moto_server.client("dynamodb")
    put(kinesis, stream, range(0, 8))
    after_old = time.time()
    wait_until(lambda: time.time() > after_old + 0.2, 5, "a gap between the old and the new records")
    put(kinesis, stream, range(8, 12))
    monkeypatch.setattr(attempts, "_now", lambda: after_old + 0.1 + 1.0)  # the old ones are over 1 s old, not the new
    k = Kinsumer(stream, app, "w", SERVER_CONFIG, kinesis=kinesis, dynamodb=db)
    seen: list[int] = []
    dead: list[Failure] = []

    def finished() -> None:
        if len(seen) + len(dead) == 12:
            threading.Thread(target=k.stop, daemon=True).start()

    def handler(record: Record) -> None:
        seen.append(rid(record))
        finished()

    def sink(failure: Failure) -> None:
        dead.append(failure)
        finished()

    with k:
        k.process(handler, dead_letter=sink, max_record_age=1.0, concurrency=2)
    assert seen == list(range(8, 12))
    assert [(rid(f.record), f.reason, f.attempts) for f in dead] == [(i, "expired", 0) for i in range(8)]
    assert read_status(kinesis, db, stream, app, max_age=10).shards[0].expired == 8
