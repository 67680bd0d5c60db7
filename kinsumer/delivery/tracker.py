"""The contiguous-prefix checkpoint tracker of one shard. Pure, no I/O, not thread-safe.

Records are registered in delivery order (which is shard order: by sequence number, and by
sub-sequence inside a KPL aggregate). Each may be acknowledged in any order; the checkpoint is
the position of the last record of the longest acknowledged prefix, so a stored checkpoint
never skips an unprocessed record.
"""

from __future__ import annotations

from collections import deque

from ..reading.position import Position

__all__ = ["CheckpointTracker"]


class CheckpointTracker:
    """Tracks delivered records of one shard and the checkpoint they allow."""

    __slots__ = ("_acked", "_base", "_checkpoint", "_pending")

    def __init__(self, checkpoint: Position | None = None) -> None:
        self._checkpoint = checkpoint
        self._pending: deque[Position] = deque()  # positions of delivered, unreleased records
        self._acked: set[int] = set()  # tokens acknowledged out of order
        self._base = 0  # token of self._pending[0]

    @property
    def checkpoint(self) -> Position | None:
        """Position up to which every delivered record is acknowledged."""
        return self._checkpoint

    @property
    def outstanding(self) -> int:
        """Delivered records not yet covered by the checkpoint."""
        return len(self._pending)

    def deliver(self, position: Position) -> int:
        """Register the next delivered record; returns its token for :meth:`ack`."""
        self._pending.append(position)
        return self._base + len(self._pending) - 1

    def ack(self, token: int) -> bool:
        """Acknowledge a delivered record. Idempotent. Returns True if the checkpoint moved."""
        if token < self._base or token >= self._base + len(self._pending):
            return False  # already covered, or not a token of this tracker
        if token != self._base:
            self._acked.add(token)
            return False
        pending, acked = self._pending, self._acked
        self._checkpoint = pending.popleft()
        self._base += 1
        while acked and self._base in acked:
            acked.discard(self._base)
            self._checkpoint = pending.popleft()
            self._base += 1
        return True
