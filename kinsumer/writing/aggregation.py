"""KPL aggregation: many user records in one Kinesis record. Pure, no I/O.

The inverse of :func:`kinsumer.reading.kpl.deaggregate`, in the Kinesis Producer Library's
format: the magic ``f3 89 9a c2``, a protobuf ``AggregatedRecord`` (a table of partition keys,
a table of explicit hash keys, the user records with their indexes into them), and the MD5 of
that protobuf. The protobuf is written here by hand (it is three small messages), so the size
of an aggregate is known exactly as records are added and never passes a limit.

An aggregate is routed as one record: its partition key is its first user record's, and its
explicit hash key that record's hash, so it lands in the shard that record belongs to.
Whoever fills an aggregate puts in it only records of one shard (see :mod:`.writer`).
"""

from __future__ import annotations

import hashlib

import attrs

from ..reading.kpl import MAGIC, hash_of

__all__ = ["MAX_KEY_CHARS", "MAX_RECORD_BYTES", "AggregateBuilder", "Entry", "hash_of"]

#: A Kinesis record at most: its data and its partition key together.
MAX_RECORD_BYTES = 1024 * 1024
#: A partition key holds 1 to 256 characters.
MAX_KEY_CHARS = 256
_DIGEST_SIZE = 16


@attrs.frozen
class Entry:
    """One record of a PutRecords call."""

    data: bytes
    partition_key: str
    explicit_hash_key: str | None = None
    user_records: int = 1  # how many user records it carries (an aggregate: more than one)

    @property
    def size(self) -> int:
        """What counts against Kinesis's limits: the data and the partition key (UTF-8)."""
        return len(self.data) + len(self.partition_key.encode())

    def to_api(self) -> dict[str, object]:
        entry: dict[str, object] = {"Data": self.data, "PartitionKey": self.partition_key}
        if self.explicit_hash_key is not None:
            entry["ExplicitHashKey"] = self.explicit_hash_key
        return entry


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _varint_size(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def _field_size(payload: int) -> int:
    """A length-delimited field with a one-byte tag."""
    return 1 + _varint_size(payload) + payload


class AggregateBuilder:
    """Collects user records of one shard into one KPL aggregate, up to ``max_bytes`` (data and key) and,
    if given, ``max_records`` user records (the KPL's AggregationMaxCount)."""

    def __init__(self, max_bytes: int = MAX_RECORD_BYTES, max_records: int | None = None) -> None:
        if max_records is not None and max_records < 1:
            raise ValueError(f"an aggregate holds at least 1 user record, not max_records={max_records}")
        self._max_bytes = min(max_bytes, MAX_RECORD_BYTES)
        self._max_records = max_records
        self._keys: dict[str, int] = {}
        self._hash_keys: dict[str, int] = {}
        self._records: list[bytes] = []  # each user record's encoded Record message
        self._body_size = 0
        self._first: tuple[str, str] | None = None  # the first record's partition key and hash key
        self._first_data: bytes | None = None
        self._first_hash_key: str | None = None

    def __len__(self) -> int:
        return len(self._records)

    def add(self, partition_key: str, data: bytes, explicit_hash_key: str | None = None) -> bool:
        """Add a user record; False (and nothing added) if the aggregate would pass its size or its count."""
        if self._max_records is not None and len(self._records) >= self._max_records:
            return False
        key_bytes = partition_key.encode()
        grown = 0
        key_index = self._keys.get(partition_key)
        if key_index is None:
            key_index = len(self._keys)
            grown += _field_size(len(key_bytes))
        hash_index = None
        if explicit_hash_key is not None:
            hash_index = self._hash_keys.get(explicit_hash_key)
            if hash_index is None:
                hash_index = len(self._hash_keys)
                grown += _field_size(len(explicit_hash_key))
        record = bytearray(b"\x08" + _varint(key_index))
        if hash_index is not None:
            record += b"\x10" + _varint(hash_index)
        record += b"\x1a" + _varint(len(data)) + data
        grown += _field_size(len(record))
        first_key = partition_key if self._first is None else self._first[0]
        size = len(first_key.encode()) + len(MAGIC) + self._body_size + grown + _DIGEST_SIZE
        if self._records and size > self._max_bytes:
            return False
        self._keys.setdefault(partition_key, key_index)
        if explicit_hash_key is not None:
            self._hash_keys.setdefault(explicit_hash_key, len(self._hash_keys))
        if self._first is None:
            self._first = (partition_key, str(hash_of(partition_key, explicit_hash_key)))
            self._first_data, self._first_hash_key = data, explicit_hash_key
        self._records.append(bytes(record))
        self._body_size += grown
        return True

    def build(self) -> Entry:
        """The aggregate as one PutRecords entry.

        A single user record goes as the plain record it is, unless its data starts with the KPL
        magic: a reader would take it for an aggregate (and, finding none, count it malformed), so
        it goes as an aggregate of one, if that fits in a Kinesis record.
        """
        if self._first is None or self._first_data is None:
            raise ValueError("an empty aggregate")
        key, routing = self._first
        if len(self._records) == 1:
            plain = Entry(self._first_data, key, self._first_hash_key)
            if not self._first_data.startswith(MAGIC):
                return plain
            wrapped = self._aggregate(key, routing)
            return wrapped if wrapped.size <= MAX_RECORD_BYTES else plain
        return self._aggregate(key, routing)

    def _aggregate(self, key: str, routing: str) -> Entry:
        body = bytearray()
        for table_key in self._keys:
            encoded = table_key.encode()
            body += b"\x0a" + _varint(len(encoded)) + encoded
        for table_hash_key in self._hash_keys:
            encoded = table_hash_key.encode()
            body += b"\x12" + _varint(len(encoded)) + encoded
        for record in self._records:
            body += b"\x1a" + _varint(len(record)) + record
        data = MAGIC + bytes(body) + hashlib.md5(body).digest()
        return Entry(data, key, routing, user_records=len(self._records))
