"""Simulating kinsumer's coordination on virtual time (issue 40).

- :class:`SimDynamoDB` acts as a botocore DynamoDB client for the operations and parameters kinsumer uses,
  keeping DynamoDB's rules: see :mod:`kinsumer.testing._dynamodb` (the testing kit
  ships it) for the model and its approximations;
- :class:`~tests.sim.kinesis.SimKinesis`: the coordination's Kinesis calls (DescribeStreamSummary, ListShards),
  splits; :mod:`tests.sim.reader`: the shard readers of an idle stream, paced as production's;
- :class:`~tests.sim.cluster.Cluster`: N clients (kinsumer's own Runtime, Coordinator, Heartbeat, Leader,
  ShardPool, ShardWorkers with their leases, and commit clock) driven without threads on a virtual clock
  installed as :mod:`kinsumer.clock`'s, the workers' coroutines on a virtual-time event loop
  (:mod:`tests.sim.shard_loop`); the figures of :mod:`tests.sim.figures`; ``scripts/simulate.py`` prints them.

:mod:`~tests.sim.agreement` runs the scenario that ``tests/server/test_sim_agreement.py`` also runs with real
clients on moto's server (calls a minute per client, join time in rounds), and adds what virtual time lacks: the
time a call takes.

By default no record is written or read (an idle stream), so no checkpoint moves: commits happen only to confirm
a lease; the readers are the simulation's (:mod:`.reader`). With ``Cluster(records="next" | "process")`` records
flow (:mod:`.flow`): the testing kit's LocalKinesis on virtual time, kinsumer's polling readers, its delivery, and
each client's caller (:mod:`.consumer`: ``next()``'s hand-over, or ``process()``'s one worker), checked by the
kit's ledger; :mod:`.churn` runs an hour of joins, leaves, crashes, pauses and splits so, in seconds. A handler
that fails is retried, its backoff passing as virtual time (as a throttled call's: the whole simulation waits).
Not simulated: HTTP (the clients call the in-memory services directly), ``process()`` with several workers,
batches, ``timeout`` and lifecycle hooks (each runs on threads of its own).
"""

from kinsumer.testing._dynamodb import Limits, SimDynamoDB

__all__ = ["Limits", "SimDynamoDB"]
