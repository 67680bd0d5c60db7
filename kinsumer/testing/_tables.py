"""LocalDynamoDB: the public face of the in-memory DynamoDB (:mod:`._dynamodb`), on the wall clock by default."""

from __future__ import annotations

import time
from collections.abc import Callable

from ._dynamodb import SimDynamoDB

__all__ = ["LocalDynamoDB"]


class LocalDynamoDB(SimDynamoDB):
    """DynamoDB in memory, acting as a boto3 DynamoDB client for every call kinsumer makes (CreateTable,
    DescribeTable, DeleteTable, PutItem, GetItem, BatchGetItem, UpdateItem, DeleteItem, Scan and its paginator),
    with DynamoDB's rules: conditional writes, expressions and their placeholders, the 400 KB item limit,
    capacity units and throttling. Thread-safe: each request is handled whole, under a lock.

    ``clock``: epoch seconds, the wall clock by default. ``staleness``: how old (seconds) an eventually
    consistent read may be (0: every read sees the latest write; with more, a read sees an older version with
    ``stale_probability``, drawn from ``seed``). Not modeled: sort keys, indexes, Query, transactions, TTL.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        staleness: float = 0.0,
        stale_probability: float = 0.5,
        seed: int = 0,
        region: str = "us-east-1",
        account: str = "123456789012",
    ) -> None:
        if staleness < 0:
            raise ValueError(f"staleness: seconds, at least 0, not {staleness!r}")
        if not 0 <= stale_probability <= 1:
            raise ValueError(f"stale_probability: within 0..1, not {stale_probability!r}")
        super().__init__(
            clock, staleness=staleness, stale_probability=stale_probability, seed=seed, region=region, account=account
        )
