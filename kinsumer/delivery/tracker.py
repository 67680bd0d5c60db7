"""The contiguous-prefix checkpoint tracker of one shard. Pure, no I/O, not thread-safe.

Records are registered in delivery order (which is shard order: by sequence number, and by
sub-sequence inside a KPL aggregate), one at a time or a run at a time; each registered record
gets a token, counting up. Each may be acknowledged in any order, alone or with a range of
tokens; the checkpoint is the last record of the longest acknowledged prefix, so a stored
checkpoint never skips an unprocessed record. A registered record that was never handed over
(its shard is being given up) is *retracted*: it no longer counts as outstanding and, never
acknowledged, it ends the prefix for good.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Generic, TypeVar

__all__ = ["CheckpointTracker"]

T = TypeVar("T")


class CheckpointTracker(Generic[T]):
    """Tracks delivered records (any values standing for their positions) of one shard."""

    __slots__ = ("_acked", "_base", "_checkpoint", "_pending", "_retracted")

    def __init__(self, checkpoint: T | None = None) -> None:
        self._checkpoint = checkpoint
        self._pending: deque[T] = deque()  # delivered records after the checkpoint
        self._acked: set[int] = set()  # tokens acknowledged out of order
        self._retracted: set[int] = set()  # tokens that will never be acknowledged
        self._base = 0  # token of self._pending[0]

    @property
    def checkpoint(self) -> T | None:
        """The record up to which every delivered record is acknowledged (or the initial value)."""
        return self._checkpoint

    @property
    def prefix_end(self) -> int:
        """The token of the first record not acknowledged in order: every token below it is acknowledged."""
        return self._base

    @property
    def outstanding(self) -> int:
        """Delivered records neither acknowledged nor retracted."""
        return len(self._pending) - len(self._acked) - len(self._retracted)

    @property
    def retracted(self) -> int:
        """Registered records retracted (never to be acknowledged): the prefix ends at the first of them."""
        return len(self._retracted)

    def deliver(self, record: T) -> int:
        """Register the next delivered record; returns its token for :meth:`ack`."""
        self._pending.append(record)
        return self._base + len(self._pending) - 1

    def deliver_many(self, records: Iterable[T]) -> int:
        """Register records in order; the token of the first (the others follow it)."""
        first = self._base + len(self._pending)
        self._pending.extend(records)
        return first

    def ack(self, token: int) -> bool:
        """Acknowledge a delivered record. Idempotent. Returns True if the checkpoint moved."""
        return self.ack_range(token, token)

    def ack_range(self, first: int, last: int) -> bool:
        """Acknowledge the records of tokens ``first`` to ``last`` (both included). Idempotent.

        Returns True if the checkpoint moved. Tokens outside what is outstanding are ignored.
        """
        base, pending = self._base, self._pending
        first, last = max(first, base), min(last, base + len(pending) - 1)
        if first > last:
            return False
        acked, retracted = self._acked, self._retracted
        if first == base and not acked and not retracted:  # the usual case: the next records, in order
            for _ in range(last - first):
                pending.popleft()
            self._checkpoint = pending.popleft()
            self._base = last + 1
            return True
        acked.update(t for t in range(first, last + 1) if t not in retracted)
        moved = False
        while self._base in acked:
            acked.discard(self._base)
            self._checkpoint = pending.popleft()
            self._base += 1
            moved = True
        return moved

    def retract(self, first: int, last: int) -> None:
        """Tokens ``first`` to ``last`` were registered but will never be acknowledged."""
        base, end = self._base, self._base + len(self._pending)
        self._retracted.update(t for t in range(max(first, base), min(last + 1, end)) if t not in self._acked)
