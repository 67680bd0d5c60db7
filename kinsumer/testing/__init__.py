"""Test your handler without AWS: a stream and tables in memory that a real :class:`~kinsumer.Kinsumer` runs
against unchanged.

- :class:`LocalKinesis`: Kinesis in memory, a boto3 Kinesis client for every call a polling Kinsumer makes,
  with streams of N shards, records routed by their hash key, KPL aggregates, splits and merges;
- :class:`LocalDynamoDB`: DynamoDB in memory with DynamoDB's rules (conditional writes, expressions, limits);
- :class:`LocalAWS`: both, on one clock, and Kinsumers made on them; :class:`LocalStream`: one stream of it;
- :class:`Fleet`: N clients of one application running your handler with ``process()`` (or a loop over their
  records, checkpointing by hand with ``call="next_with_checkpointer"``), which join, leave cleanly, crash, pause
  or see their calls throttled or failing, on :data:`FAST_CONFIG` (a second or two per event); its
  :class:`Ledger` reports records lost, handled twice (and why that is allowed, :data:`Reason`, or not), order
  per shard and per key, the lifecycle hooks' order, and records never checkpointed (:class:`Report`).

With pytest, the fixtures ``kinsumer_stream`` (a :class:`LocalStream`) and ``kinsumer_fleet`` (makes a
:class:`Fleet` on it) are there in every test: :mod:`kinsumer.testing.pytest_plugin`, loaded by pytest.

Nothing here needs moto, a server or a network. Example::

    from kinsumer.testing import LocalAWS

    aws = LocalAWS()
    aws.kinesis.add_stream("clicks", shards=2)
    aws.kinesis.put("clicks", b"hello", partition_key="user-1")
    k = aws.kinsumer("clicks", "billing-app")
    k.create_required_tables()
    with k:
        assert k.next() == b"hello"
"""

from ._capture import Reason, RecordKey
from ._fleet import FAST_CONFIG, Fleet
from ._handlers import PerClient
from ._kinesis import ITERATOR_LIFETIME, LocalKinesis, Put
from ._ledger import Ledger
from ._local import LocalAWS, LocalStream
from ._report import Duplicate, HookViolation, Report
from ._stream import StoredRecord
from ._tables import LocalDynamoDB

__all__ = [
    "FAST_CONFIG", "ITERATOR_LIFETIME", "Duplicate", "Fleet", "HookViolation", "Ledger", "LocalAWS", "LocalDynamoDB",
    "LocalKinesis", "LocalStream", "PerClient", "Put", "Reason", "RecordKey", "Report", "StoredRecord",
]  # fmt: skip
