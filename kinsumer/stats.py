"""Observability hooks: the :class:`StatReceiver` protocol.

A StatReceiver is called from several threads at once; implementations must be
thread-safe and fast (they run on the reading and delivering paths). Every method of this
base class does nothing, so a receiver overrides only what it needs and ``StatReceiver()``
is the no-op default.
"""

from __future__ import annotations

__all__ = ["StatReceiver"]


class StatReceiver:
    """Receives counters and timings from a running Kinsumer. Methods default to no-ops."""

    def records_fetched(self, shard_id: str, count: int, millis_behind_latest: int | None) -> None:
        """A GetRecords call on ``shard_id`` returned ``count`` records."""

    def record_delivered(self, shard_id: str, latency_seconds: float) -> None:
        """``next*()`` handed a record over; latency is now minus its arrival in Kinesis."""

    def checkpoint_written(self, shard_id: str) -> None:
        """A checkpoint (sequence number) of ``shard_id`` was stored in DynamoDB."""

    def shard_gained(self, shard_id: str) -> None:
        """This client captured ``shard_id``."""

    def shard_lost(self, shard_id: str) -> None:
        """This client gave up ``shard_id`` (rebalance, stop, or fencing)."""

    def handoff(self, shard_id: str, seconds: float, clean: bool) -> None:
        """A handoff of ``shard_id`` ended; ``clean`` is False when it timed out."""

    def error_retried(self, operation: str, error: str) -> None:
        """A transient error (throttling, 5xx, connection, expired iterator) was retried."""
