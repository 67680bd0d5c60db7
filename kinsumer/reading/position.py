"""Where reading a shard starts. Pure, no I/O.

A :class:`StartPosition` becomes the arguments of GetShardIterator (or, for enhanced fan-out,
of SubscribeToShard). A position inside a KPL aggregate (a checkpoint taken after some of its
user records) starts *at* the aggregate's sequence number; the reader then drops the user
records that were already processed (:meth:`StartPosition.is_done`).
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any, Literal

import attrs

__all__ = ["IteratorType", "Position", "StartPosition", "position_order"]

IteratorType = Literal["AFTER_SEQUENCE_NUMBER", "AT_SEQUENCE_NUMBER", "TRIM_HORIZON", "LATEST", "AT_TIMESTAMP"]

#: How far a shard is processed: the sequence number of a Kinesis record and, inside a KPL
#: aggregate, the index of the last user record processed (None: the whole Kinesis record).
Position = tuple[str, int | None]


def position_order(position: Position) -> tuple[int, float]:
    """A sort key: by sequence number (as an integer), then by sub-sequence; a whole record last."""
    sequence_number, sub_sequence = position
    return int(sequence_number), math.inf if sub_sequence is None else sub_sequence


@attrs.frozen
class StartPosition:
    """Where to start reading a shard. Build it with the named constructors."""

    kind: IteratorType
    sequence_number: str | None = None
    #: With AT_SEQUENCE_NUMBER: the user records of that aggregate up to this index are done.
    sub_sequence: int | None = None
    timestamp: dt.datetime | None = None

    @classmethod
    def after(cls, sequence_number: str, sub_sequence: int | None = None) -> StartPosition:
        """After a checkpoint: the record ``sequence_number``, or its user records up to ``sub_sequence``."""
        if sub_sequence is None:
            return cls("AFTER_SEQUENCE_NUMBER", sequence_number=sequence_number)
        return cls("AT_SEQUENCE_NUMBER", sequence_number=sequence_number, sub_sequence=sub_sequence)

    @classmethod
    def after_position(cls, position: Position) -> StartPosition:
        """After a checkpoint position (see :data:`Position`)."""
        return cls.after(*position)

    @classmethod
    def at_timestamp(cls, timestamp: dt.datetime) -> StartPosition:
        return cls("AT_TIMESTAMP", timestamp=timestamp)

    @classmethod
    def trim_horizon(cls) -> StartPosition:
        return cls("TRIM_HORIZON")

    @classmethod
    def latest(cls) -> StartPosition:
        return cls("LATEST")

    @classmethod
    def initial(cls, kind: str, timestamp: dt.datetime | None = None) -> StartPosition:
        """A configured initial position: TRIM_HORIZON, LATEST, or AT_TIMESTAMP with ``timestamp``."""
        if kind == "AT_TIMESTAMP" and timestamp is not None:
            return cls.at_timestamp(timestamp)
        if kind == "LATEST":
            return cls.latest()
        return cls.trim_horizon()

    def iterator_args(self) -> dict[str, Any]:
        """The position's arguments of GetShardIterator (without stream and shard)."""
        return self._args("ShardIteratorType", "StartingSequenceNumber")

    def starting_position(self) -> dict[str, Any]:
        """The position as SubscribeToShard's ``StartingPosition``."""
        return self._args("Type", "SequenceNumber")

    def _args(self, kind: str, sequence_number: str) -> dict[str, Any]:
        args: dict[str, Any] = {kind: self.kind}
        if self.sequence_number is not None:
            args[sequence_number] = self.sequence_number
        if self.timestamp is not None:
            args["Timestamp"] = self.timestamp
        return args

    def is_done(self, sequence_number: str, sub_sequence: int | None) -> bool:
        """True for a record that a position inside an aggregate already covers.

        Only AT_SEQUENCE_NUMBER positions cover anything they return: the user records of
        that sequence number up to ``self.sub_sequence``. A record that was not aggregated
        counts as user record 0 of its own.
        """
        if self.sub_sequence is None or sequence_number != self.sequence_number:
            return False
        return (sub_sequence or 0) <= self.sub_sequence
