"""A capture's objects end with it: after 200 handoffs of a shard, a client holds those of its live capture only.

Run on the simulator (tests/sim): kinsumer's own coordination and shard workers on virtual time, so 200
handoffs take seconds. Each capture makes a worker, a lease, a delivery bookkeeping (ShardProgress) and a
crash-loop guard; a map kept the guard of every capture ever made, and with it the capture's worker and
everything it held (issue 54: a consumer under churn grew by about 35 MB an hour).
"""

from __future__ import annotations

import gc

from kinsumer.coordination.lease import ShardLease
from kinsumer.coordination.shard_worker import ShardWorker
from kinsumer.delivery.progress import ShardProgress
from kinsumer.handling.guard import ShardGuard
from tests.sim.cluster import Cluster

HANDOFFS = 200


def alive(kind: type) -> int:
    return sum(1 for o in gc.get_objects() if type(o) is kind)


def test_two_hundred_handoffs_of_a_shard_leave_no_capture_alive() -> None:
    with Cluster(1, seed=7) as cluster:
        cluster.join("z-stays")  # sorts last: the shard goes to the other client while there is one
        assert cluster.run(30, cluster.settled)
        for i in range(HANDOFFS // 2):
            visitor = cluster.join(f"a-visits-{i:03d}")  # takes the shard (a handoff) ...
            assert cluster.run(30, cluster.settled)
            assert cluster.owners() == {cluster.shards[0]: visitor.id}
            cluster.leave(visitor.id)  # ... and gives it back (another)
            assert cluster.run(30, cluster.settled)
            cluster.gone.clear()  # the cluster keeps the clients that left, for inspection: not here
        assert cluster.owners() == {cluster.shards[0]: "z-stays"}
        del visitor
        gc.collect()
        counts = {kind.__name__: alive(kind) for kind in (ShardWorker, ShardLease, ShardProgress, ShardGuard)}
    assert counts == {"ShardWorker": 1, "ShardLease": 1, "ShardProgress": 1, "ShardGuard": 1}, counts
