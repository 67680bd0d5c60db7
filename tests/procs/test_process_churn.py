"""Clean rebalances under ``process()`` with concurrency (issue 35): a client joins and leaves while records flow.

Each handoff must end clean (every record handed out before it finished and acknowledged, or given
back at once), so no record is handled twice; none is lost, and each shard's records are handled
in order.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from demo.servers import LocalServer
from tests.helpers import Producer, wait_until
from tests.procs.harness import ClientProcess, Deployment, ProcessAudit

pytestmark = pytest.mark.server

SHARDS = 8


def owned(proc: ClientProcess) -> int:
    """Shards the client holds now, by its gained and lost events."""
    return len(proc.events("gained")) - len(proc.events("lost"))


def test_a_client_joining_and_leaving_under_process_hands_every_shard_off_cleanly(
    deploy: Callable[..., Deployment], moto_server: LocalServer, processes: list[ClientProcess]
) -> None:
    deployment = deploy(SHARDS)
    producer = Producer(moto_server.client("kinesis"), deployment.stream, total=None, batch=20, pause=0.05)
    producer.start()
    a = ClientProcess(deployment, "a", process={"concurrency": 4}).start()
    processes.append(a)
    wait_until(lambda: owned(a) == SHARDS, 30, "a to own every shard")
    for generation in range(2):
        b = ClientProcess(deployment, f"b{generation}", process={"concurrency": 2}).start()
        processes.append(b)
        wait_until(lambda: owned(b) == SHARDS // 2, 30, "b to own its half")  # noqa: B023
        handled_by_b = len(b.deliveries())
        wait_until(lambda: len(b.deliveries()) > handled_by_b + 50, 30, "b to handle records")  # noqa: B023
        b.stop()  # clean: its shards are handed back to a
        wait_until(lambda: owned(a) == SHARDS, 30, "a to own every shard again")
    produced = producer.stop()
    wait_until(lambda: not ProcessAudit(processes).lost(produced), 60, "every record handled")
    a.stop()

    audit = ProcessAudit(processes)
    handoffs = [(e.client, e.fields) for proc in processes for e in proc.events("handoff")]
    assert len(handoffs) >= 2 * SHARDS  # a gave b half of the shards twice, and b gave them back
    assert [h for h in handoffs if h[1][-1] != "1"] == []  # none timed out
    assert not audit.lost(produced)
    assert audit.duplicates() == {}  # only clean stops and rebalances: nothing is handled twice
    assert not audit.shard_order_violations()
