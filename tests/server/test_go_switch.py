"""Moving an application between the Go library (twitchscience/kinsumer) and kinsumer in place, on moto's
server: the Go client is ``tests/support/go_library.GoClient``, which makes the Go library's requests
exactly (its rows checked against the real library's in tests/unit/test_go_library_rows.py).

A stream of 4 shards holds 2,000 records with unique ids. Each case checks, by id: nothing lost, what was
delivered by both libraries (none on a clean switch either way, none in a mixed fleet beyond one handoff),
and kinsumer's per-shard order. The Go client runs with short periods (a round every 0.5 s, so its rows
count as live for 2.5 s), and kinsumer's ``go_client_max_age`` is set to match.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import attrs
import pytest

from demo.servers import LocalServer
from kinsumer import Config, GoClientsLive, Kinsumer
from kinsumer.coordination import checkpoints_table
from tests.conftest import unique
from tests.helpers import Audit, wait_until
from tests.server.conftest import SERVER_CONFIG, Worker
from tests.support.go_library import GoClient, GoConfig

pytestmark = pytest.mark.server

TOTAL, HALF = 2000, 1000
GO_CONFIG = GoConfig(throttle_delay=0.2, commit_frequency=0.25, shard_check_frequency=0.5, leader_action_frequency=0.5)
GO_AGE = 5 * GO_CONFIG.shard_check_frequency
CONFIG = attrs.evolve(SERVER_CONFIG, go_client_max_age=GO_AGE)


@attrs.define
class Move:
    """One application on one stream of the server, and what each library delivered."""

    server: LocalServer
    stream: str
    app: str
    audit: Audit = attrs.field(factory=Audit)  # kinsumer's deliveries
    go_ids: list[int] = attrs.field(factory=list)  # the Go client's, in order

    def go_client(self, name: str = "go-worker") -> GoClient:
        return GoClient(self.stream, self.app, name, kinesis=self.server.client("kinesis"),
                        dynamodb=self.server.client("dynamodb"), config=GO_CONFIG)  # fmt: skip

    def go_read(self, go: GoClient, count: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        for _ in range(count):
            data = go.next(max(0.1, deadline - time.monotonic()))
            assert data is not None, "the Go client stopped"
            self.go_ids.append(json.loads(data)["id"])

    def kinsumer(self, name: str = "k", config: Config = CONFIG) -> Worker:
        return Worker(self.server, self.stream, self.app, name, self.audit, config)

    def kinsumer_ids(self) -> list[int]:
        return [d.record_id for d in sorted(self.audit.deliveries, key=lambda d: d.order)]

    def by_both(self) -> set[int]:
        return set(self.go_ids) & self.audit.ids()

    def lost(self) -> set[int]:
        return set(range(TOTAL)) - set(self.go_ids) - self.audit.ids()

    def positions(self) -> dict[str, int]:
        """Each shard's stored checkpoint, as a number."""
        rows = checkpoints_table.load_rows(self.server.client("dynamodb"), f"{self.app}_checkpoints")
        return {shard: int(row.sequence_number) for shard, row in rows.items() if row.sequence_number is not None}

    def owned_by(self, owner: str) -> list[str]:
        rows = checkpoints_table.load_rows(self.server.client("dynamodb"), f"{self.app}_checkpoints")
        return sorted(shard for shard, row in rows.items() if row.owner_id == owner)


@pytest.fixture
def move(moto_server: LocalServer) -> Iterator[Move]:
    kinesis = moto_server.client("kinesis")
    stream, app = unique("stream"), unique("app")
    kinesis.create_stream(StreamName=stream, ShardCount=4)
    kinesis.get_waiter("stream_exists").wait(StreamName=stream, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})
    for start in range(0, TOTAL, 500):
        entries = [
            {"Data": json.dumps({"id": i}).encode(), "PartitionKey": f"key-{i}"} for i in range(start, start + 500)
        ]
        kinesis.put_records(StreamName=stream, Records=entries)
    Kinsumer(stream, app, "admin", kinesis=kinesis, dynamodb=moto_server.client("dynamodb")).create_required_tables()
    yield Move(moto_server, stream, app)
    kinesis.delete_stream(StreamName=stream, EnforceConsumerDeletion=True)


def test_clean_switch_from_go_continues_after_every_go_checkpoint(move: Move) -> None:
    go = move.go_client()
    go.run()
    move.go_read(go, HALF)
    go.stop(30)
    worker = move.kinsumer().start()
    wait_until(lambda: len(move.audit.ids() | set(move.go_ids)) == TOTAL, 60, "every record")
    worker.stop()
    assert move.lost() == set() and move.by_both() == set()  # none lost, none twice
    assert move.audit.duplicates() == {} and move.audit.order_violations() == []
    assert not go.failures


def test_crash_switch_takes_a_killed_go_clients_shards_once_its_age_passed(move: Move) -> None:
    go = move.go_client()
    go.run()
    move.go_read(go, HALF)
    go.kill()  # SIGKILL: no release, its client row stays
    killed_at = time.monotonic()
    committed = move.positions()  # what the Go client had committed (every 0.25 s, of the records handed out)
    with pytest.raises(GoClientsLive, match=go.client_id):  # it still counts as live: refused at once
        move.kinsumer(config=CONFIG).kinsumer.run()
    worker = move.kinsumer(config=attrs.evolve(CONFIG, beside_go="wait")).start()
    wait_until(lambda: len(move.owned_by(worker.kinsumer.client_id)) == 4, 30, "kinsumer to own every shard")
    taken_after = time.monotonic() - killed_at
    wait_until(lambda: len(move.audit.ids() | set(move.go_ids)) == TOTAL, 60, "every record")
    worker.stop()
    assert move.lost() == set()
    # delivered again: only what the Go client handed out after its last commit (a crash's allowance)
    early = [
        d for d in move.audit.deliveries if d.shard_id in committed and int(d.sequence_number) <= committed[d.shard_id]
    ]
    assert early == []
    assert move.audit.duplicates() == {} and move.audit.order_violations() == []
    # its age, then a kinsumer round, a capture, and the dead owner's rows as old as a dead owner's may be
    assert taken_after < GO_AGE + CONFIG.effective_client_record_max_age + 2 * CONFIG.shard_check_frequency + 5


def test_a_go_client_joining_takes_the_shards_kinsumer_hands_over(move: Move) -> None:
    worker = move.kinsumer().start()
    wait_until(lambda: len(move.audit.ids()) >= HALF, 60, "kinsumer to read half")
    go = move.go_client()
    go.run()  # a rollback: a Go client joins the running kinsumer client
    done = threading.Event()

    def go_reads() -> None:
        while not done.is_set():
            try:
                data = go.next(0.5)
            except TimeoutError:
                continue
            if data is None:
                return
            move.go_ids.append(json.loads(data)["id"])

    reader = threading.Thread(target=go_reads, daemon=True)
    reader.start()
    wait_until(lambda: move.owned_by(worker.kinsumer.client_id) == [], 30, "kinsumer to hand every shard over")
    assert {r.code for r in worker.kinsumer.health().reasons} == {"beside_go"}
    wait_until(lambda: len(move.audit.ids() | set(move.go_ids)) == TOTAL, 60, "every record")
    done.set()
    reader.join(10)
    go.stop(30)
    worker.stop()
    assert move.lost() == set() and move.by_both() == set()
    assert move.audit.duplicates() == {} and move.audit.order_violations() == []
    assert not go.failures


def test_a_rolling_deploy_waits_for_the_go_client_then_takes_over(move: Move) -> None:
    go = move.go_client()
    go.run()
    move.go_read(go, HALF // 2)
    worker = move.kinsumer(config=attrs.evolve(CONFIG, beside_go="wait")).start()
    wait_until(lambda: {r.code for r in worker.kinsumer.health().reasons} == {"beside_go"}, 10, "kinsumer to wait")
    move.go_read(go, HALF // 2)  # the Go client reads on meanwhile: kinsumer reads none of it
    assert move.audit.count() == 0 and move.owned_by(worker.kinsumer.client_id) == []
    go.stop(30)  # the deploy stops the last Go client
    wait_until(lambda: len(move.audit.ids() | set(move.go_ids)) == TOTAL, 60, "every record")
    worker.stop()
    assert move.lost() == set() and move.by_both() == set()
    assert move.audit.duplicates() == {} and move.audit.order_violations() == []


def test_back_to_go_continues_after_kinsumers_checkpoints(move: Move) -> None:
    worker = move.kinsumer().start()
    wait_until(lambda: len(move.audit.ids()) >= HALF, 60, "kinsumer to read half")
    worker.stop()  # a clean stop: every shard released with its checkpoint
    go = move.go_client()
    go.run()
    move.go_read(go, TOTAL - len(move.audit.ids()))
    go.stop(30)
    assert move.lost() == set() and move.by_both() == set()
    assert move.audit.duplicates() == {}
    assert not go.failures
