"""One in-memory Kinesis stream: its shards, their records, resharding. No botocore: :mod:`._kinesis` is the client.

Kept of Kinesis:

- shards own contiguous ranges of the 128-bit hash key space; a record goes to the open shard whose range holds
  its hash key (the MD5 of its partition key, or its explicit hash key: :func:`kinsumer.reading.kpl.hash_of`);
- sequence numbers are 56-digit decimal strings that increase with every record written to the stream (so within
  each shard, and from parents to children); a shard's ``StartingSequenceNumber`` is the next number when it was
  made, a closed shard's ``EndingSequenceNumber`` the last number given out before it closed;
- a split closes its parent and makes two children with ``ParentShardId``; a merge closes two adjacent shards and
  makes one child with ``ParentShardId`` and ``AdjacentParentShardId``; a closed shard keeps its records.

Not modeled: retention (records are kept for good), a stream's CREATING/UPDATING states (a change takes effect
at once), throughput limits.
"""

from __future__ import annotations

import bisect
import datetime as dt
from typing import Any

import attrs

from ._errors import SimError

__all__ = ["HASH_SPACE", "Shard", "Stream", "StoredRecord", "invalid"]

HASH_SPACE = 2**128
#: The first sequence number of a stream (the digits Kinesis's numbers start with, 56 in all).
_SEQUENCE_BASE = 49 * 10**54


def invalid(message: str) -> SimError:
    return SimError("InvalidArgumentException", message)


@attrs.frozen
class StoredRecord:
    """A record as a shard stores it."""

    shard_id: str
    sequence_number: str
    data: bytes
    partition_key: str
    #: When it arrived: epoch seconds on the stream's clock, in milliseconds as Kinesis keeps it.
    arrival: float
    explicit_hash_key: str | None = None

    def to_api(self) -> dict[str, Any]:
        """The record as GetRecords answers it, in botocore's shape."""
        return {
            "SequenceNumber": self.sequence_number,
            "ApproximateArrivalTimestamp": dt.datetime.fromtimestamp(self.arrival, dt.UTC),
            "Data": self.data,
            "PartitionKey": self.partition_key,
        }


@attrs.define(eq=False)
class Shard:
    shard_id: str
    start_hash: int
    end_hash: int
    starting_sequence: int
    parent: str | None = None
    adjacent_parent: str | None = None
    ending_sequence: int | None = None  # None while open
    records: list[StoredRecord] = attrs.field(factory=list)
    numbers: list[int] = attrs.field(factory=list)  # the records' sequence numbers as integers, for bisect

    @property
    def is_open(self) -> bool:
        return self.ending_sequence is None

    @property
    def parents(self) -> tuple[str, ...]:
        return tuple(p for p in (self.parent, self.adjacent_parent) if p)

    def hash_range(self) -> dict[str, str]:
        return {"StartingHashKey": str(self.start_hash), "EndingHashKey": str(self.end_hash)}

    def to_api(self) -> dict[str, Any]:
        """The shard as ListShards describes it."""
        numbers = {"StartingSequenceNumber": str(self.starting_sequence)}
        if self.ending_sequence is not None:
            numbers["EndingSequenceNumber"] = str(self.ending_sequence)
        shard: dict[str, Any] = {"ShardId": self.shard_id, "HashKeyRange": self.hash_range(),
                                 "SequenceNumberRange": numbers}  # fmt: skip
        if self.parent:
            shard["ParentShardId"] = self.parent
        if self.adjacent_parent:
            shard["AdjacentParentShardId"] = self.adjacent_parent
        return shard

    def index_at(self, sequence_number: int, after: bool) -> int:
        """The index of the first record at (``after``: after) ``sequence_number``."""
        if after:
            return bisect.bisect_right(self.numbers, sequence_number)
        return bisect.bisect_left(self.numbers, sequence_number)

    def index_at_time(self, when: float) -> int:
        """The index of the first record that arrived at or after ``when`` (epoch seconds)."""
        return next((i for i, r in enumerate(self.records) if r.arrival >= when), len(self.records))


class Stream:
    """One stream's shards and records (the caller holds the client's lock)."""

    def __init__(self, name: str, arn: str, shards: int, created: float) -> None:
        self.name, self.arn = name, arn
        self.created = dt.datetime.fromtimestamp(created, dt.UTC)
        self.shards: dict[str, Shard] = {}
        self._next_sequence = _SEQUENCE_BASE
        width = HASH_SPACE // shards
        for i in range(shards):
            self._add(i * width, HASH_SPACE - 1 if i == shards - 1 else (i + 1) * width - 1)

    def _add(self, start: int, end: int, parent: str | None = None, adjacent: str | None = None) -> Shard:
        shard_id = f"shardId-{len(self.shards):012d}"
        shard = Shard(shard_id, start, end, self._next_sequence, parent, adjacent)
        self.shards[shard_id] = shard
        return shard

    def shard(self, shard_id: str, account: str) -> Shard:
        shard = self.shards.get(shard_id)
        if shard is None:
            message = f"Shard {shard_id} in stream {self.name} under account {account} does not exist"
            raise SimError("ResourceNotFoundException", message)
        return shard

    def open_shards(self) -> list[Shard]:
        """The open shards, by hash key range."""
        return sorted((s for s in self.shards.values() if s.is_open), key=lambda s: s.start_hash)

    def shard_for(self, hash_key: int) -> Shard:
        """The open shard whose range holds ``hash_key``."""
        for shard in self.open_shards():
            if shard.start_hash <= hash_key <= shard.end_hash:
                return shard
        raise AssertionError(f"no open shard holds hash key {hash_key}")  # the open ranges cover the space

    def append(self, shard: Shard, data: bytes, partition_key: str, explicit: str | None, now: float) -> StoredRecord:
        number = self._next_sequence
        self._next_sequence += 1
        record = StoredRecord(shard.shard_id, str(number), data, partition_key, round(now, 3), explicit)
        shard.records.append(record)
        shard.numbers.append(number)
        return record

    def _close(self, *shards: Shard) -> None:
        for shard in shards:
            shard.ending_sequence = self._next_sequence
        self._next_sequence += 1

    def split(self, shard: Shard, new_starting_hash_key: int) -> tuple[Shard, Shard]:
        if not shard.is_open:
            raise invalid(f"Shard {shard.shard_id} in stream {self.name} is not open: only an open shard can be "
                          "split")  # fmt: skip
        if not shard.start_hash < new_starting_hash_key <= shard.end_hash:
            raise invalid(f"NewStartingHashKey {new_starting_hash_key} must be within shard {shard.shard_id}'s hash "
                          f"key range, above its start: {shard.start_hash + 1}..{shard.end_hash}")  # fmt: skip
        self._close(shard)
        low = self._add(shard.start_hash, new_starting_hash_key - 1, shard.shard_id)
        high = self._add(new_starting_hash_key, shard.end_hash, shard.shard_id)
        return low, high

    def merge(self, shard: Shard, adjacent: Shard) -> Shard:
        for s in (shard, adjacent):
            if not s.is_open:
                raise invalid(f"Shard {s.shard_id} in stream {self.name} is not open: only open shards can be merged")
        if shard.end_hash + 1 != adjacent.start_hash and adjacent.end_hash + 1 != shard.start_hash:
            raise invalid(f"Shards {shard.shard_id} and {adjacent.shard_id} in stream {self.name} are not adjacent: "
                          "their hash key ranges must meet")  # fmt: skip
        self._close(shard, adjacent)
        start, end = min(shard.start_hash, adjacent.start_hash), max(shard.end_hash, adjacent.end_hash)
        return self._add(start, end, shard.shard_id, adjacent.shard_id)

    def children(self, shard: Shard) -> list[Shard]:
        return [s for s in self.shards.values() if shard.shard_id in s.parents]
