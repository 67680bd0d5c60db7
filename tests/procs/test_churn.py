"""A bounded soak: client processes killed and restarted at random while a producer writes."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import pytest

from demo.servers import LocalServer
from tests.helpers import Producer, wait_until
from tests.procs.harness import ClientProcess, Deployment, ProcessAudit

pytestmark = pytest.mark.server

CHURN_SECONDS = 35.0


def test_clients_killed_and_restarted_at_random_lose_nothing(
    deploy: Callable[..., Deployment], moto_server: LocalServer, processes: list[ClientProcess]
) -> None:
    rng = random.Random(20261122)
    deployment = deploy(6)
    producer = Producer(moto_server.client("kinesis"), deployment.stream, total=None, batch=50, pause=0.1)
    producer.start()
    generation = 0

    def launch(slot: int) -> ClientProcess:
        nonlocal generation
        generation += 1
        proc = ClientProcess(deployment, f"slot{slot}-gen{generation}").start()
        processes.append(proc)
        return proc

    slots = [launch(i) for i in range(4)]
    killed: dict[str, float] = {}
    ends = time.monotonic() + CHURN_SECONDS
    while time.monotonic() < ends:
        time.sleep(rng.uniform(1.5, 4.0))  # the churn's pace, not a synchronisation
        slot = rng.randrange(len(slots))
        victim = slots[slot]
        if rng.random() < 0.7:
            killed[victim.name] = time.time()
            victim.kill()
        else:
            victim.stop()
        slots[slot] = launch(slot)
    produced = producer.stop()
    wait_until(lambda: not ProcessAudit(processes).lost(produced), 60, "every record delivered")
    for proc in slots:
        proc.stop()

    audit = ProcessAudit(processes)
    assert not audit.lost(produced)
    assert not audit.shard_order_violations()
    duplicates = audit.duplicates()
    print(f"{generation} client processes, {len(killed)} killed; {len(produced)} records, {len(duplicates)} duplicated")
    for rid, ds in duplicates.items():  # only records a killed client had delivered
        assert ds[0].client in killed, (rid, ds)
