"""Records written by the Kinesis Producer Library: one Kinesis record carrying many user records.

An aggregated record is the magic ``f3 89 9a c2``, a protobuf ``AggregatedRecord`` and the MD5
of that protobuf. Its user records share the Kinesis record's sequence number and arrival
time; each has its index in the aggregate (the sub-sequence number), its own partition key
from the aggregate's key table, and maybe an explicit hash key. A record that starts with the
magic but is not a valid aggregate (a wrong MD5, a body that does not parse, an empty
aggregate) is handed on unchanged, as one record: never dropped, never an error.

After a split or a merge, an aggregate can hold user records whose hash keys (the explicit hash
key, else the MD5 of the partition key, as a 128-bit number) are outside the hash key range of
the shard that stored it: the KPL built it for the shard its own map predicted, and sends those
user records again to the right shard (a "Wrong Shard" retry). :func:`outside_range` finds them;
the readers count them, and deliver or drop them as configured (``Config.kpl_outside_shard``).

The protobuf is parsed by the ``protobuf`` package (its upb core), with the KPL's message
definitions built here into a private descriptor pool, so that no generated module, protoc
version or ``sys.path`` entry is involved and another copy of the same messages (awslabs'
``aws_kinesis_agg``, say) in the same process does not clash with it.
"""

from __future__ import annotations

import hashlib
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

__all__ = ["MAGIC", "HashRange", "deaggregate", "hash_key", "hash_of", "outside_range"]

MAGIC = b"\xf3\x89\x9a\xc2"
_DIGEST_SIZE = 16  # MD5
_PACKAGE = "kinsumer.kpl"

#: A shard's hash key range: its starting and ending hash key, both included.
HashRange = tuple[int, int]


def _aggregated_record_class() -> Any:
    """The KPL's ``AggregatedRecord`` message (messages.proto of amazon-kinesis-producer), proto2."""
    field = descriptor_pb2.FieldDescriptorProto
    required, optional, repeated = field.LABEL_REQUIRED, field.LABEL_OPTIONAL, field.LABEL_REPEATED
    file = descriptor_pb2.FileDescriptorProto(name="kinsumer/kpl.proto", package=_PACKAGE, syntax="proto2")

    def message(name: str, *fields: tuple[str, int, int, int, str]) -> None:
        proto = file.message_type.add(name=name)
        for field_name, number, label, kind, type_name in fields:
            added = proto.field.add(name=field_name, number=number, label=label, type=kind)
            if type_name:
                added.type_name = type_name

    message(
        "Tag",
        ("key", 1, required, field.TYPE_STRING, ""),
        ("value", 2, optional, field.TYPE_STRING, ""),
    )
    message(
        "Record",
        ("partition_key_index", 1, required, field.TYPE_UINT64, ""),
        ("explicit_hash_key_index", 2, optional, field.TYPE_UINT64, ""),
        ("data", 3, required, field.TYPE_BYTES, ""),
        ("tags", 4, repeated, field.TYPE_MESSAGE, f".{_PACKAGE}.Tag"),
    )
    message(
        "AggregatedRecord",
        ("partition_key_table", 1, repeated, field.TYPE_STRING, ""),
        ("explicit_hash_key_table", 2, repeated, field.TYPE_STRING, ""),
        ("records", 3, repeated, field.TYPE_MESSAGE, f".{_PACKAGE}.Record"),
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.AggregatedRecord"))


_AggregatedRecord = _aggregated_record_class()


def deaggregate(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The user records of a GetRecords page, and how many records looked aggregated but were not.

    Records in botocore's shape go in; user records come out in the same shape with
    ``SubSequenceNumber`` and ``ExplicitHashKey`` added (plain records are passed through as
    they are). A page without aggregates is returned as it is, uncopied.
    """
    out: list[dict[str, Any]] | None = None
    malformed = 0
    for i, record in enumerate(records):
        if not record["Data"].startswith(MAGIC):
            if out is not None:
                out.append(record)
            continue
        if out is None:
            out = records[:i]
        users = _user_records(record)
        if users is None:
            malformed += 1
            out.append(record)
        else:
            out.extend(users)
    return (records if out is None else out), malformed


def _user_records(record: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The user records of one aggregated record; None if it is not a valid, non-empty aggregate."""
    data: bytes = record["Data"]
    if len(data) < len(MAGIC) + _DIGEST_SIZE:
        return None
    body = data[len(MAGIC) : -_DIGEST_SIZE]
    if hashlib.md5(body).digest() != data[-_DIGEST_SIZE:]:
        return None
    aggregate = _AggregatedRecord()
    try:
        aggregate.ParseFromString(body)
    except DecodeError:
        return None
    keys, hash_keys = list(aggregate.partition_key_table), list(aggregate.explicit_hash_key_table)
    sequence_number, arrival = record["SequenceNumber"], record["ApproximateArrivalTimestamp"]
    users = []
    try:
        for sub, user in enumerate(aggregate.records):
            hash_key = None
            if hash_keys and user.HasField("explicit_hash_key_index"):  # most aggregates carry no hash keys
                hash_key = hash_keys[user.explicit_hash_key_index]
            users.append(
                {
                    "Data": user.data,
                    "PartitionKey": keys[user.partition_key_index],
                    "SequenceNumber": sequence_number,
                    "ApproximateArrivalTimestamp": arrival,
                    "SubSequenceNumber": sub,
                    "ExplicitHashKey": hash_key,
                }
            )
    except IndexError:  # a key index outside its table
        return None
    return users or None


def hash_of(partition_key: str, explicit_hash_key: str | None = None) -> int:
    """The 128-bit hash key Kinesis routes a record by: the explicit one, else the MD5 of the partition key.
    (The one rule, for reading and writing: :mod:`kinsumer.writing.aggregation` routes aggregates by it.)"""
    if explicit_hash_key is not None:
        return int(explicit_hash_key)
    return int.from_bytes(hashlib.md5(partition_key.encode()).digest(), "big")


def hash_key(record: dict[str, Any]) -> int:
    """The hash key of a record in botocore's shape (see :func:`hash_of`)."""
    return hash_of(record["PartitionKey"], record.get("ExplicitHashKey") or None)


def outside_range(records: list[dict[str, Any]], hash_range: HashRange) -> list[int]:
    """The indexes of the user records of aggregates (those with a ``SubSequenceNumber``) whose hash key is
    outside ``hash_range``. A plain record is never outside: Kinesis stored it by its own key."""
    low, high = hash_range
    keys: dict[str, int] = {}  # an aggregate's records share a few partition keys: one MD5 each
    found = []
    for i, record in enumerate(records):
        if record.get("SubSequenceNumber") is None:
            continue
        explicit = record.get("ExplicitHashKey")
        if explicit:
            key = int(explicit)
        else:
            partition_key = record["PartitionKey"]
            key = keys.get(partition_key, -1)
            if key < 0:
                key = keys[partition_key] = hash_of(partition_key)
        if not low <= key <= high:
            found.append(i)
    return found
