"""A KCL lease table, read: its items as values, and where kinsumer goes on with each shard. Pure, no I/O.

``kinsumer import-kcl`` (:mod:`.kcl_import`) moves an application from the Kinesis Client Library (KCL 1.x,
2.x, 3.x; kclpy runs KCL's MultiLangDaemon) to kinsumer in place. The formats below were read in KCL's own
source, `awslabs/amazon-kinesis-client <https://github.com/awslabs/amazon-kinesis-client>`_: 1.x at tag
v1.15.3 under ``src/main/java/com/amazonaws/services/kinesis/`` (``v1/`` below), 2.x at v2.7.3 and 3.x at
v3.5.1 under ``amazon-kinesis-client/src/main/java/software/amazon/kinesis/`` (``v3/``).

**A lease item.** Hash key ``leaseKey`` (S), the same in every version (``v1/leases/impl/LeaseSerializer.java``,
``v3/leases/dynamodb/DynamoDBLeaseSerializer.java``): ``leaseOwner`` (S, absent when no worker holds it),
``leaseCounter`` (N), ``checkpoint`` (S: a sequence number or a sentinel), ``checkpointSubSequenceNumber``
(N), ``ownerSwitchesSinceCheckpoint`` (N), ``parentShardId`` and ``childShardIds`` (SS, absent when empty:
``v1/leases/util/DynamoUtils.java``, ``v3/leases/DynamoUtils.java``), ``pendingCheckpoint`` (S) and
``pendingCheckpointSubSequenceNumber`` (N), ``startingHashKey`` and ``endingHashKey`` (S, decimal: the
shard's range, ``HashKeyRangeForLease``) (1.x: ``v1/leases/impl/KinesisClientLeaseSerializer.java``). 2.x
adds ``pendingCheckpointState`` (B); 3.x ``throughputKBps`` (N, for its load-based assignment),
``checkpointOwner`` (S) and, from 3.5, ``entityType`` (S): the lease table may then also hold KCL's
coordinator state and worker metrics (``v3/leases/EntityType.java``), items whose ``entityType`` is not
``LEASE``; an item without one is a lease (``DynamoDBLeaseSerializer.fromDynamoRecord``).

**Multi-stream leases** (2.3+): ``leaseKey`` is ``<streamIdentifier>:<shardId>``
(``v3/leases/MultiStreamLease.java``, ``getLeaseKey``), and the item also holds ``streamName`` (S, the
serialized stream identifier, "for legacy reasons") and ``shardId`` (S)
(``v3/leases/dynamodb/DynamoDBMultiStreamLeaseSerializer.java``). A stream identifier is
``<accountId>:<streamName>:<creationEpoch>``, all three required, account and epoch digits, epoch > 0
(``v3/common/StreamIdentifier.java``, ``serialize`` and ``STREAM_IDENTIFIER_PATTERN``). KCL never checks
the epoch against the stream: the application chooses it (KCL's own tests use the creation time in ms,
AWS's examples in seconds).

**A checkpoint** is an ``ExtendedSequenceNumber`` (``v1/clientlibrary/types/ExtendedSequenceNumber.java``,
``v3/retrieval/kpl/ExtendedSequenceNumber.java``): a sequence number and a sub-sequence number, 0 when
absent; or a sentinel (``SentinelCheckpoint.java``): ``TRIM_HORIZON``, ``LATEST``, ``AT_TIMESTAMP`` (the
position a lease was made at) and ``SHARD_END`` (the shard is closed and fully processed).

**Where KCL resumes.** A worker starts a shard at its lease's ``checkpoint`` (``v3/lifecycle/InitializeTask.java``;
``pendingCheckpoint`` is only handed to the record processor's ``initialize()``). A sequence number gets an
``AT_SEQUENCE_NUMBER`` iterator, a sentinel the iterator of its name, ``AT_TIMESTAMP`` with the timestamp of
KCL's configuration (``initialPositionInStream``), not of the lease, and ``SHARD_END`` none
(``v1/clientlibrary/lib/worker/KinesisDataFetcher.java``, ``advanceIteratorTo``;
``v3/retrieval/IteratorBuilder.java``). The records are deaggregated, user record *i* of a KPL aggregate
getting sub-sequence *i* and a plain record passed on with 0 (``v3/retrieval/AggregatorUtil.java``,
``deaggregate``; ``v1/clientlibrary/types/UserRecord.java``), and
every record whose (sequence, sub-sequence) is at or before the checkpoint is dropped
(``v1/.../worker/ProcessTask.java`` and ``v3/lifecycle/ProcessTask.java``,
``filterAndGetMaxExtendedSequenceNumber``). kinsumer's row means the same: ``SequenceNumber`` and
``SubSequenceNumber`` start an ``AT_SEQUENCE_NUMBER`` read that drops the user records up to that index, a
plain record counting as user record 0 (:meth:`kinsumer.reading.position.StartPosition.is_done`). So a
checkpoint maps to itself, the sub-sequence always written.

**Shards without a lease.** A child waits for its parents' leases to reach ``SHARD_END``, and a parent with no
lease does not hold it back (``v3/lifecycle/BlockOnParentShardTask.java``): KCL deletes the lease of a parent
at ``SHARD_END`` once every child's checkpoint is past ``TRIM_HORIZON`` (``v3/leases/LeaseCleanupManager.java``).
KCL makes the lease of a child at its parent's end, at ``TRIM_HORIZON`` (``v3/leases/HierarchicalShardSyncer.java``,
``newKCLLeaseForChildShard``), and that of an open shard with no leased ancestor at its configured initial
position (``determineNewLeasesToCreate``). So a shard with a leased descendant is done, one with a leased
ancestor starts at its trim horizon, and any other is left to kinsumer's ``initial_position``.

**A live lease.** Its owner increments ``leaseCounter`` at each renewal; another worker counts a lease as
expired when its counter has not moved for ``failoverTimeMillis`` (default 10000:
``v1/.../worker/KinesisClientLibConfiguration.java``, ``v3/leases/LeaseManagementConfig.java``), timed
between its own scans, and a lease first seen owned as just renewed (``v3/leases/dynamodb/DynamoDBLeaseTaker.java``,
``updateAllLeases``). ``checkpointOwner`` (3.x) is set during a graceful handoff: ``leaseOwner`` is already
the next worker and the previous one may still checkpoint until it lets go (``v3/leases/Lease.java``,
``v3/leases/dynamodb/DynamoDBLeaseRefresher.java``, ``initiateGracefulLeaseHandoff``).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import attrs

from ..errors import KinsumerError
from ..reading.position import Position
from .checkpoints_table import CheckpointRow

__all__ = [
    "AT_TIMESTAMP", "LATEST", "SHARD_END", "SENTINELS", "TRIM_HORIZON",
    "ImportedPosition", "KclCheckpoint", "KclLease", "KclStreamIdentifier", "LeaseSelection", "MalformedLease",
    "checkpoint_item", "imported_position", "is_lease_item", "positions_without_lease", "renewed_leases",
    "select_leases", "time_text",
]  # fmt: skip

TRIM_HORIZON, LATEST, AT_TIMESTAMP, SHARD_END = "TRIM_HORIZON", "LATEST", "AT_TIMESTAMP", "SHARD_END"
#: KCL's ``SentinelCheckpoint`` values: a checkpoint that is not a sequence number.
SENTINELS = frozenset({TRIM_HORIZON, LATEST, AT_TIMESTAMP, SHARD_END})
#: The ``entityType`` of a lease (KCL 3.5+); an item without one is a lease too.
LEASE_ENTITY = "LEASE"

_DIGITS = re.compile(r"[0-9]+")
_STREAM_IDENTIFIER = re.compile(r"(?P<account>[0-9]+):(?P<name>[^:]+):(?P<epoch>[0-9]+)")
_MULTI_STREAM_KEY = re.compile(r"(?P<stream>[0-9]+:[^:]+:[0-9]+):(?P<shard>.+)")


class MalformedLease(KinsumerError):
    """An item of the lease table that is not a lease as KCL writes it."""

    def __init__(self, lease_key: str, problem: str) -> None:
        self.lease_key = lease_key
        super().__init__(
            f"the KCL lease {lease_key!r} {problem}: is this a KCL lease table? Fix or delete the item, "
            "or name the right table"
        )


def _sequence_or_sentinel(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if value not in SENTINELS and not _DIGITS.fullmatch(value):
        raise ValueError(f"{attribute.name} must be digits or one of {sorted(SENTINELS)}; got {value!r}")


@attrs.frozen
class KclCheckpoint:
    """KCL's ``ExtendedSequenceNumber``: a Kinesis record's sequence number and the index of a user record
    inside its KPL aggregate (0 for a plain record), or a sentinel."""

    sequence_number: str = attrs.field(validator=_sequence_or_sentinel)
    sub_sequence_number: int = attrs.field(default=0, validator=attrs.validators.ge(0))

    @property
    def sentinel(self) -> str | None:
        return self.sequence_number if self.sequence_number in SENTINELS else None

    def __str__(self) -> str:
        return self.sentinel or f"{self.sequence_number}:{self.sub_sequence_number}"


@attrs.frozen
class KclStreamIdentifier:
    """A multi-stream lease's stream: ``<accountId>:<streamName>:<creationEpoch>``."""

    account_id: str = attrs.field(validator=attrs.validators.matches_re(_DIGITS))
    stream_name: str = attrs.field(validator=attrs.validators.matches_re(r"[^:]+"))
    creation_epoch: int = attrs.field(validator=attrs.validators.gt(0))

    @classmethod
    def parse(cls, text: str) -> KclStreamIdentifier | None:
        """The identifier ``text`` serializes; None if it is not one."""
        match = _STREAM_IDENTIFIER.fullmatch(text)
        if match is None or int(match["epoch"]) <= 0:
            return None
        return cls(match["account"], match["name"], int(match["epoch"]))

    def created_as(self, created_ms: int) -> bool:
        """Whether the epoch is the stream's creation time ``created_ms``, in milliseconds or seconds."""
        return self.creation_epoch in (created_ms, created_ms // 1000)

    def __str__(self) -> str:
        return f"{self.account_id}:{self.stream_name}:{self.creation_epoch}"


def _strings(value: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    return tuple(sorted(value))


@attrs.frozen
class KclLease:
    """One lease of the table (see the module's docstring for each attribute's source)."""

    lease_key: str
    shard_id: str = attrs.field(validator=attrs.validators.min_len(1))
    checkpoint: KclCheckpoint
    lease_counter: int = 0
    owner: str | None = None
    #: A multi-stream lease's stream; None for a single-stream lease (keyed by the shard ID).
    stream: KclStreamIdentifier | None = None
    parent_shard_ids: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    child_shard_ids: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    pending_checkpoint: KclCheckpoint | None = None
    checkpoint_owner: str | None = None
    hash_key_range: tuple[int, int] | None = None

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> KclLease:
        """The lease of a DynamoDB item (in the low-level client's shape) of which :func:`is_lease_item` holds."""
        key = item.get("leaseKey", {}).get("S")
        if not key:
            raise MalformedLease(str(item.get("leaseKey")), "has no leaseKey string")
        stream, shard_id = _stream_and_shard(key, item)
        try:
            return cls(
                lease_key=key,
                shard_id=shard_id,
                checkpoint=_checkpoint(item, "checkpoint", "checkpointSubSequenceNumber", key),
                lease_counter=_number(item, "leaseCounter", key) or 0,
                owner=_string(item, "leaseOwner", key),
                stream=stream,
                parent_shard_ids=_string_set(item, "parentShardId", key),
                child_shard_ids=_string_set(item, "childShardIds", key),
                pending_checkpoint=(
                    _checkpoint(item, "pendingCheckpoint", "pendingCheckpointSubSequenceNumber", key)
                    if _string(item, "pendingCheckpoint", key) else None
                ),
                checkpoint_owner=_string(item, "checkpointOwner", key),
                hash_key_range=_hash_key_range(item, key),
            )  # fmt: skip
        except ValueError as exc:  # a validator's
            raise MalformedLease(key, f"has a value KCL never writes ({exc})") from exc


def is_lease_item(item: Mapping[str, Any]) -> bool:
    """Whether an item of the lease table is a lease (KCL 3.5+ keeps other entities there too)."""
    entity = item.get("entityType", {}).get("S")
    return entity is None or entity == LEASE_ENTITY


def _string(item: Mapping[str, Any], name: str, key: str) -> str | None:
    if name not in item:
        return None
    if "S" not in item[name]:
        raise MalformedLease(key, f"has {name} of type {_type(item[name])}, not S")
    return str(item[name]["S"])


def _number(item: Mapping[str, Any], name: str, key: str) -> int | None:
    if name not in item:
        return None
    if "N" not in item[name] or not re.fullmatch(r"-?[0-9]+", item[name]["N"]):
        raise MalformedLease(key, f"has {name} {item[name]!r}, not an integer N")
    return int(item[name]["N"])


def _string_set(item: Mapping[str, Any], name: str, key: str) -> tuple[str, ...]:
    value = item.get(name)
    if value is None:
        return ()
    if "SS" in value:
        return tuple(value["SS"])
    if "L" in value and all("S" in v for v in value["L"]):  # a copy by a tool that writes lists
        return tuple(v["S"] for v in value["L"])
    raise MalformedLease(key, f"has {name} of type {_type(value)}, not SS")


def _checkpoint(item: Mapping[str, Any], name: str, sub_name: str, key: str) -> KclCheckpoint:
    sequence_number = _string(item, name, key)
    if not sequence_number:
        raise MalformedLease(key, f"has no {name}")
    return KclCheckpoint(sequence_number, _number(item, sub_name, key) or 0)


def _hash_key_range(item: Mapping[str, Any], key: str) -> tuple[int, int] | None:
    low, high = _string(item, "startingHashKey", key), _string(item, "endingHashKey", key)
    if not low or not high:
        return None
    if not _DIGITS.fullmatch(low) or not _DIGITS.fullmatch(high):
        raise MalformedLease(key, f"has a hash key range {low!r}..{high!r} that is not decimal")
    return int(low), int(high)


def _stream_and_shard(key: str, item: Mapping[str, Any]) -> tuple[KclStreamIdentifier | None, str]:
    """A multi-stream lease's stream and shard (from its attributes, else its key), or a single-stream one's shard."""
    named, shard_id = _string(item, "streamName", key), _string(item, "shardId", key)
    match = _MULTI_STREAM_KEY.fullmatch(key)
    if named is None and match is not None:
        named, shard_id = match["stream"], match["shard"]
    if named is None:
        return None, key
    stream = KclStreamIdentifier.parse(named)
    if stream is None or not shard_id:
        raise MalformedLease(key, f"has a stream identifier {named!r} that is not <account>:<stream>:<epoch>")
    if key != f"{stream}:{shard_id}":
        raise MalformedLease(key, f"is keyed otherwise than its streamName {named!r} and shardId {shard_id!r}")
    return stream, shard_id


def _type(value: Mapping[str, Any]) -> str:
    return next(iter(value), "none")


@attrs.frozen
class LeaseSelection:
    """The leases of one stream among a table's; ``problem``: why they cannot be told apart, if so."""

    leases: tuple[KclLease, ...] = ()
    #: A multi-stream table's identifier of the stream; None for single-stream leases.
    identifier: KclStreamIdentifier | None = None
    #: The other streams of a multi-stream table (not imported).
    others: tuple[str, ...] = ()
    problem: str | None = None


def select_leases(
    leases: Iterable[KclLease], *, stream_name: str, account_id: str | None, created_ms: int, chosen: str | None = None
) -> LeaseSelection:
    """The leases of the stream ``stream_name`` (of ``account_id``, created at ``created_ms``): every lease of a
    single-stream table; in a multi-stream one, those of its identifier (``chosen``, else the only one of that
    name and account, else the one whose epoch is its creation time)."""
    leases = list(leases)
    single = tuple(lease for lease in leases if lease.stream is None)
    multi = [lease for lease in leases if lease.stream is not None]
    if single and multi:
        keys = ", ".join(lease.lease_key for lease in single[:3])
        return LeaseSelection(problem=f"the table holds single-stream leases ({keys}) beside multi-stream ones")
    if not multi:
        return LeaseSelection(single)
    identifiers = sorted({str(lease.stream) for lease in multi})
    listed = ", ".join(identifiers)
    if chosen is not None:
        parsed = KclStreamIdentifier.parse(chosen)
        if chosen not in identifiers or parsed is None or parsed.stream_name != stream_name:
            problem = f"no lease of KCL stream {chosen} (of {stream_name}); the table has leases of {listed}"
            return LeaseSelection(others=tuple(identifiers), problem=problem)
        named = [chosen]
    else:
        named = [i for i in identifiers if _names(i, stream_name, account_id)]
        if not named:
            where = f" of account {account_id}" if account_id else ""
            problem = f"no lease of stream {stream_name}{where}; the table has leases of {listed}"
            return LeaseSelection(others=tuple(identifiers), problem=problem)
        if len(named) > 1:
            current = [i for i in named if _created(i, created_ms)]
            if len(current) != 1:
                problem = (
                    f"leases of several incarnations of {stream_name}: {', '.join(named)}; pass "
                    "--kcl-stream-identifier with the one to import"
                )
                return LeaseSelection(others=tuple(identifiers), problem=problem)
            named = current
    picked = [lease for lease in multi if str(lease.stream) == named[0]]
    return LeaseSelection(tuple(picked), picked[0].stream, tuple(i for i in identifiers if i != named[0]))


def _names(identifier: str, stream_name: str, account_id: str | None) -> bool:
    parsed = KclStreamIdentifier.parse(identifier)
    return parsed is not None and parsed.stream_name == stream_name and account_id in (None, parsed.account_id)


def _created(identifier: str, created_ms: int) -> bool:
    parsed = KclStreamIdentifier.parse(identifier)
    return parsed is not None and parsed.created_as(created_ms)


def _one_of(instance: ImportedPosition, attribute: attrs.Attribute[bool], finished: bool) -> None:
    given = [instance.checkpoint is not None, instance.start_at is not None, finished]
    if given.count(True) != 1:
        raise ValueError("a position is exactly one of: a checkpoint, a start time, finished")


@attrs.frozen
class ImportedPosition:
    """Where kinsumer goes on with a shard: after ``checkpoint``, at ``start_at`` (epoch ms of arrival; 0: the
    trim horizon) for a shard with no checkpoint, or nowhere (``finished``)."""

    checkpoint: Position | None = None
    start_at: int | None = attrs.field(default=None, validator=attrs.validators.optional(attrs.validators.ge(0)))
    finished: bool = attrs.field(default=False, validator=_one_of)

    def agrees_with(self, row: CheckpointRow) -> bool:
        """Whether ``row`` says exactly this (as :func:`checkpoint_item` writes it)."""
        return (row.checkpoint, row.start_at, row.finished) == (self.checkpoint, self.start_at, self.finished)

    def __str__(self) -> str:
        if self.finished:
            return "finished"
        if self.checkpoint is not None:
            sequence_number, sub_sequence = self.checkpoint
            return f"after {sequence_number}" + ("" if sub_sequence is None else f":{sub_sequence}")
        return f"start at {time_text(self.start_at or 0)}"


def time_text(epoch_ms: int) -> str:
    """A start time as the plan shows it (0: the trim horizon)."""
    if epoch_ms == 0:
        return TRIM_HORIZON
    return dt.datetime.fromtimestamp(epoch_ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


def imported_position(
    checkpoint: KclCheckpoint, *, imported_at: int, at_timestamp: int | None
) -> ImportedPosition | None:
    """Where kinsumer goes on with a shard whose lease says ``checkpoint``, so that it reads exactly what KCL would.

    A sequence number: after it, the sub-sequence kept (user records up to it are done, a plain record is user
    record 0). ``TRIM_HORIZON``: the trim horizon. ``LATEST``: ``imported_at`` (epoch ms), the import's time. KCL
    starts such a shard at its newest record whenever a worker starts it again: the import fixes that moment at
    the latest time that loses nothing, its own, so kinsumer's first client also reads what was written between
    the import and its start. ``AT_TIMESTAMP``: ``at_timestamp`` (KCL's configured timestamp; None if it was not
    given: the caller refuses). ``SHARD_END``: finished.
    """
    sentinel = checkpoint.sentinel
    if sentinel is None:
        return ImportedPosition(checkpoint=(checkpoint.sequence_number, checkpoint.sub_sequence_number))
    if sentinel == SHARD_END:
        return ImportedPosition(finished=True)
    if sentinel == TRIM_HORIZON:
        return ImportedPosition(start_at=0)
    if sentinel == LATEST:
        return ImportedPosition(start_at=imported_at)
    return None if at_timestamp is None else ImportedPosition(start_at=at_timestamp)


def positions_without_lease(
    parents: Mapping[str, tuple[str, ...]], leased: Collection[str]
) -> dict[str, tuple[ImportedPosition, str]]:
    """The shards of a listing (``parents``: each shard's parents) that have no lease but that KCL would treat as
    something, with why: those with a leased descendant are done (KCL deleted their leases after their end);
    those with a leased ancestor (and none below) start at their trim horizon, as KCL makes a child's lease.
    Others are left out: KCL would start them at its initial position, kinsumer at its ``initial_position``."""
    children: dict[str, list[str]] = {}
    for shard_id, shard_parents in parents.items():
        for parent in shard_parents:
            children.setdefault(parent, []).append(shard_id)
    above = _reachable(leased, lambda s: parents.get(s, ()))
    below = _reachable(leased, lambda s: children.get(s, ()))
    found: dict[str, tuple[ImportedPosition, str]] = {}
    for shard_id in parents:
        if shard_id in leased:
            continue
        if shard_id in above:
            found[shard_id] = (ImportedPosition(finished=True), "no lease, a leased shard descends from it: done")
        elif shard_id in below:
            found[shard_id] = (ImportedPosition(start_at=0), "no lease yet, descends from a leased shard")
    return found


def _reachable(start: Iterable[str], step: Any) -> set[str]:
    """The shards reached from ``start`` by ``step`` (shard -> next shards), ``start`` left out."""
    seen: set[str] = set()
    todo = [nxt for shard in start for nxt in step(shard)]
    while todo:
        shard = todo.pop()
        if shard not in seen:
            seen.add(shard)
            todo.extend(step(shard))
    return seen


def renewed_leases(before: Mapping[str, KclLease], after: Mapping[str, KclLease]) -> list[KclLease]:
    """The leases of ``after`` that a worker renewed since ``before`` (scans one failover time apart), as KCL's
    lease taker tells: an owned lease whose counter moved, or that is new."""
    renewed = []
    for key, lease in sorted(after.items()):
        earlier = before.get(key)
        if lease.owner is not None and (earlier is None or earlier.lease_counter != lease.lease_counter):
            renewed.append(lease)
    return renewed


def checkpoint_item(
    key: str,
    position: ImportedPosition,
    *,
    stream: str,
    parents: tuple[str, ...],
    last_update_ns: int,
    finished_at: int,
) -> dict[str, Any]:
    """The checkpoints-table row (low-level item) of an imported shard: free, of the stream incarnation
    ``stream``, saying ``position`` (``finished_at``: the ``Finished`` time, epoch ms)."""
    item: dict[str, Any] = {
        "Shard": {"S": key}, "Stream": {"S": stream}, "LastUpdate": {"N": str(last_update_ns)},
    }  # fmt: skip
    if parents:
        item["ParentShardIds"] = {"L": [{"S": parent} for parent in parents]}
    if position.checkpoint is not None:
        sequence_number, sub_sequence = position.checkpoint
        item["SequenceNumber"] = {"S": sequence_number}
        if sub_sequence is not None:
            item["SubSequenceNumber"] = {"N": str(sub_sequence)}
    if position.start_at is not None:
        item["StartAt"] = {"N": str(position.start_at)}
    if position.finished:
        item["Finished"] = {"N": str(finished_at)}
    return item
