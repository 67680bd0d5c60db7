"""The roster on moto's server: the leader scans the clients table, the others read what it publishes,
and still see a join and a client that dies as soon as a scanning client would."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from demo.servers import LocalServer
from kinsumer.aws.tables import now_ms
from tests.helpers import Audit, Producer, wait_until
from tests.server.conftest import SERVER_CONFIG, Worker

pytestmark = pytest.mark.server

#: Rounds of 1 s (a client is dead 3.5 s after its last heartbeat, the default multiple): a follower
#: trusts the headline while the leader's heartbeat is less than 1.5 s old, which a loaded machine keeps.
CONFIG = attrs.evolve(SERVER_CONFIG, shard_check_frequency=1.0, client_record_max_age=None, leader_action_frequency=2.0)


class Calls:
    """The membership reads of one client: its Scans, and its GetItems by table (and the roster's)."""

    def __init__(self, dynamodb: Any) -> None:
        self.made: Counter[str] = Counter()
        dynamodb.meta.events.register("provide-client-params.dynamodb.*", self._count)

    def _count(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        if model.name in ("Scan", "GetItem"):
            self.made[f"{model.name} {params['TableName'].rsplit('_', 1)[-1]}"] += 1
            if params.get("Key", {}).get("Key", {}).get("S") == "Roster":
                self.made["GetItem roster"] += 1


def counts(workers: list[Worker]) -> list[int]:
    return [w.kinsumer.status().client_count for w in workers]


def test_followers_read_the_roster_instead_of_scanning_and_see_a_join_and_a_death_in_time(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(6)
    audit = Audit()
    producer = Producer(moto_server.client("kinesis"), stream, total=None, batch=60, pause=0.1)
    producer.start()
    calls: dict[str, Calls] = {}

    def worker(name: str) -> Worker:
        dynamodb = moto_server.client("dynamodb")
        calls[name] = Calls(dynamodb)
        config = attrs.evolve(CONFIG, client_id=name)
        workers.append(Worker(moto_server, stream, app, name, audit, config, dynamodb=dynamodb).start())

    workers: list[Worker] = []
    try:
        check_the_roster(moto_server, app, workers, calls, worker)
        produced = producer.stop()
        wait_until(lambda: not audit.lost(produced), 60, "every record delivered")
    finally:
        producer.stop()
        for w in workers:
            w.stop()
    assert not audit.lost(produced)
    assert not audit.duplicates(), sorted(audit.duplicates().items())[:10]
    assert not audit.order_violations()


def check_the_roster(
    moto_server: LocalServer, app: str, workers: list[Worker], calls: dict[str, Calls], worker: Callable[[str], None]
) -> None:
    for i in range(3):  # client-0 sorts first: it leads
        worker(f"client-{i}")
    wait_until(lambda: counts(workers) == [3, 3, 3], 30, "every client to see 3 clients")
    assert [w.kinsumer.status().is_leader for w in workers] == [True, False, False]

    # a quiet stretch of 8 leader rounds (after 3 for the start to settle: each client announces the
    # shard cache it read): the followers read the leader's row, not the table
    settled = calls["client-0"].made["Scan clients"] + 3
    wait_until(lambda: calls["client-0"].made["Scan clients"] >= settled, 30, "3 rounds of the leader")
    before = {name: Counter(c.made) for name, c in calls.items()}
    wait_until(lambda: calls["client-0"].made["Scan clients"] >= before["client-0"]["Scan clients"] + 8, 30,
               "8 rounds of the leader")  # fmt: skip
    made = {name: c.made - before[name] for name, c in calls.items()}
    leader_scans = made["client-0"]["Scan clients"]
    print({name: dict(m) for name, m in made.items()}, end="; ")
    for name in ("client-1", "client-2"):
        assert made[name]["GetItem clients"] >= leader_scans - 2, made  # the leader's row, each round
        assert made[name]["Scan clients"] <= leader_scans // 4, made  # a scan only when a heartbeat ran late
        assert made[name]["GetItem roster"] <= 1, made  # the roster: read again only when it changes

    # a join: every client counts it within two rounds or so of its first heartbeat
    worker("client-3")
    wait_until(lambda: counts(workers) == [4, 4, 4, 4], 10, "every client to see the joiner")

    # a client that dies: a row that heartbeats once and never again, sorted last (not the leader)
    db = moto_server.client("dynamodb")
    last_beat = now_ms()
    db.put_item(TableName=f"{app}_clients", Item={
        "ID": {"S": "client-9"}, "Name": {"S": "ghost"}, "LastUpdate": {"N": str(last_beat)},
        "Instance": {"S": uuid.uuid4().hex}, "CacheVersion": {"N": "0"}, "Reading": {"S": "polling"},
    })  # fmt: skip
    wait_until(lambda: counts(workers) == [5, 5, 5, 5], 10, "every client to count the ghost")
    dead_at = last_beat / 1000 + CONFIG.effective_client_record_max_age
    wait_until(lambda: time.time() >= dead_at, CONFIG.effective_client_record_max_age + 10, "the ghost to expire")
    at_expiry = {w.name: rounds(calls[w.name]) for w in workers}
    dropped: dict[str, int] = {}  # rounds each client made from the ghost's expiry until it dropped it

    def all_dropped() -> bool:
        for w in workers:
            if w.name not in dropped and w.kinsumer.status().client_count == 4:
                dropped[w.name] = rounds(calls[w.name]) - at_expiry[w.name]
        return len(dropped) == len(workers)

    wait_until(all_dropped, 10 + 10 * CONFIG.shard_check_frequency, "every client to drop it")
    # a scanning client drops a silent client in the round after it expires; the followers too: the
    # leader's headline says a client is silent, and they scan until it is dead. Counted in rounds,
    # not seconds: a loaded machine makes rounds late, not more of them
    print(f"the dead client dropped within {dropped} membership rounds after it expired", end="; ")
    assert max(dropped.values()) <= 2, dropped


def rounds(calls: Calls) -> int:
    """Membership rounds a client made: a follower reads the leader's row each round (and may scan too),
    the leader scans each round."""
    return max(calls.made["GetItem clients"], calls.made["Scan clients"])
