"""A handler that hangs on one record in every process: process(timeout=...) sends it to the sink.

Three worker processes run ``process(handler, timeout=1, max_attempts=3, dead_letter=...)``; the handler
never returns on one record (wherever it is tried). That record reaches the sink once, as ``timeout``
after 3 attempts; every other record is handled once, in shard order; no process dies or is stuck.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from demo.servers import client
from tests.helpers import Producer, wait_until
from tests.procs.harness import FAST, ClientProcess, Deployment, ProcessAudit

pytestmark = pytest.mark.server

HUNG = 120


def test_a_record_whose_handler_hangs_everywhere_reaches_the_sink_once_as_timeout(
    deploy: Callable[..., Deployment], processes: list[ClientProcess]
) -> None:
    deployment = deploy(2)
    producer = Producer(client(deployment.kinesis, "kinesis"), deployment.stream, total=None, keys=12)
    spec = {"process": {"max_attempts": 3, "hang": [HUNG], "timeout": 1.0}}
    workers = [ClientProcess(deployment, f"worker-{i}", FAST, **spec).start() for i in range(3)]
    processes.extend(workers)
    wait_until(lambda: all(w.events("running") for w in workers), 60, "every worker running")
    producer.write_batch(300)

    def settled() -> bool:
        for worker in workers:
            if worker.exit_code is not None:
                raise AssertionError(f"{worker.name} exited: {worker.error() or worker.stderr()[-2000:]}")
        dead = {entry[0] for w in workers for entry in w.dead_letters()}
        return HUNG in dead and ProcessAudit(workers).ids() >= set(producer.produced) - {HUNG}

    wait_until(settled, 120, "the hung record in the sink and every other record handled", poll=0.2)
    for worker in workers:
        worker.stop()
    letters = [entry for w in workers for entry in w.dead_letters()]
    assert [(rid, reason, attempts) for rid, reason, attempts, _ in letters] == [(HUNG, "timeout", 3)]
    # one call per attempt; a handoff while it is retried starts its count again where it goes (the
    # attempts are not stored), so more calls than 3 are possible, never fewer
    hangs = [e for w in workers for e in w.events("hanging")]
    assert len(hangs) >= 3
    audit = ProcessAudit(workers)
    assert HUNG not in audit.ids() and not audit.duplicates()
    assert not audit.lost([i for i in producer.produced if i != HUNG])
    assert not audit.shard_order_violations()
