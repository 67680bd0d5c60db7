"""Test your handler without AWS: tables in memory that a real :class:`~kinsumer.Kinsumer` runs against unchanged.

- :class:`LocalDynamoDB`: DynamoDB in memory with DynamoDB's rules (conditional writes, expressions, limits).
"""

from ._tables import LocalDynamoDB

__all__ = ["LocalDynamoDB"]
