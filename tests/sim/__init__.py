"""Simulating kinsumer's coordination on virtual time (issue 40).

- :class:`SimDynamoDB` acts as a botocore DynamoDB client for the operations and parameters kinsumer uses,
  keeping DynamoDB's rules: see :mod:`tests.sim.dynamodb` for the model and its approximations;
- :class:`~tests.sim.kinesis.SimKinesis`: the coordination's Kinesis calls (DescribeStreamSummary, ListShards);
- :class:`~tests.sim.cluster.Cluster`: N clients (kinsumer's own Runtime, Coordinator, Heartbeat and Leader)
  driven without threads on a virtual clock installed as :mod:`kinsumer.clock`'s; the figures of
  :mod:`tests.sim.figures`; ``scripts/simulate.py`` prints them.

:mod:`~tests.sim.agreement` runs the scenario that ``tests/server/test_sim_agreement.py`` also runs with real
clients on moto's server (calls a minute per client, join time in rounds), and adds what virtual time lacks: the
time a call takes.

The boundary: each client's shard pool is :class:`~tests.sim.client.RecordingPool`, which records what the
rounds assign and starts no shard worker. Lease captures, handoffs and commits (ShardWorker, Committer) are
not simulated yet: the next step of issue 40.
"""

from tests.sim.capacity import Limits
from tests.sim.dynamodb import SimDynamoDB

__all__ = ["Limits", "SimDynamoDB"]
