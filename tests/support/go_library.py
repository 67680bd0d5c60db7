"""The Go kinsumer (twitchscience/kinsumer at 9a48088) emulated in Python, exactly where DynamoDB and Kinesis see it.

kinsumer keeps the Go library's tables, so an application moves from Go to kinsumer in place, and the two
may run side by side during the move. The tests must prove that kinsumer reads the Go library's rows as
they are and behaves beside a live Go client, without building the Go library (its source is not
available in CI). This module is that Go client, written from reading the library's source (not copied
from it: the library is under the Amazon Software License):

- **Its writes**, request for request: the same operation, ``ConsistentRead``, item attributes of the same
  DynamoDB types as aws-sdk-go's ``dynamodbattribute.MarshalMap`` makes them (a nil pointer, an empty
  string, a nil or empty slice as ``{"NULL": true}``; ``int64`` as N; ``[]string`` as a list of S), the same
  condition and update expressions, ``LastUpdate`` in ``time.Now().UnixNano()`` and the ``*RFC`` attributes
  as RFC1123Z strings of the same instant. Module functions write single rows (:func:`register_client`,
  :func:`capture`, :func:`commit`, :func:`release`, :func:`register_leadership`, :func:`set_cached_shard_ids`,
  ...), each taking ``now_ns`` so a test can write a row as Go would have at any time.
- **Its reads**: ``dynamodbattribute.UnmarshalMap`` into its structs ``checkpointRecord``, ``clientRecord``
  and ``shardCacheRecord`` (:func:`read_checkpoint`, :func:`read_client`, :func:`read_shard_cache`), which
  raise :class:`GoUnmarshalError` wherever Go returns an error (a ``Finished`` of type BOOL where Go wants
  ``*int64``, say), so a test shows that kinsumer's rows are readable by Go.
- **Its decisions and its goroutines**: :class:`GoClient` runs Go's ``Run()`` with a thread where Go has a
  goroutine (the main loop, the leader loop, one consumer per shard) and Go's channels and ``select``
  between them (buffered ``records`` of ``bufferSize``, the unbuffered ``output`` to ``Next()``, ``errors``
  and ``shardErrors`` of 10, tickers that drop ticks, a random choice among ready cases).

Each function's docstring names the Go file and function it follows. What is left out: statistics and
logging (no DynamoDB or Kinesis effect); Go's error *texts* (errors keep Go's prefixes, not aws-sdk-go's
rendering); the SDK's own retries (those of the boto3 clients given apply); ``Next()`` waiting forever
(:meth:`GoClient.next` takes a timeout). A panic of Go's (a nil shard cache in ``performLeaderActions``
when the metadata table is missing) ends the emulated process as :meth:`GoClient.kill` does.

Checked against the real library (tests/unit/test_go_library_rows.py, tests/support/go_rows.json): the same
items in the three tables and the same requests through a fresh start, a clean stop, a SIGKILL and a split
shard read to its end; the same result or error as aws-sdk-go's UnmarshalMap for every type of attribute.
"""

from __future__ import annotations

import collections
import datetime as dt
import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

import attrs
import botocore.exceptions

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kinesis import KinesisClient

__all__ = [
    "CLIENT_REAP_AGE_NS",
    "GET_RECORDS_LIMIT",
    "GO_COMMIT",
    "LEADER_KEY",
    "SHARD_CACHE_KEY",
    "CheckpointRecord",
    "Checkpointer",
    "ClientRecord",
    "GoClient",
    "GoConfig",
    "GoError",
    "GoKilled",
    "GoPanic",
    "GoTables",
    "GoUnmarshalError",
    "ShardCacheRecord",
    "capture",
    "commit",
    "create_required_tables",
    "delete_tables",
    "deregister_client",
    "deregister_leadership",
    "diff_shard_ids",
    "get_checkpoint",
    "get_clients",
    "get_records",
    "get_shard_iterator",
    "go_int64",
    "go_string",
    "go_string_slice",
    "load_checkpoints",
    "load_shard_cache",
    "load_shard_ids_from_dynamo",
    "load_shard_ids_from_kinesis",
    "read_checkpoint",
    "read_client",
    "read_shard_cache",
    "reap_clients",
    "scan_pages",
    "register_client",
    "register_leadership",
    "release",
    "rfc1123z",
    "set_cached_shard_ids",
]

#: The commit of twitchscience/kinsumer this module follows.
GO_COMMIT = "9a48088"
#: leader.go ``leaderKey`` and ``shardCacheKey``: the ``Key`` of the two metadata items.
LEADER_KEY = "Leader"
SHARD_CACHE_KEY = "ShardCache"
#: clients.go ``clientReapAge``: the leader deletes client rows older than 48 h.
CLIENT_REAP_AGE_NS = 48 * 3600 * 10**9
#: shard_consumer.go ``getRecordsLimit``, ``maxErrorRetries``, ``errorSleepDuration``.
GET_RECORDS_LIMIT = 10000
_MAX_ERROR_RETRIES = 3
_ERROR_SLEEP = 1.0
#: kinsumer.go ``NewWithInterfaces``: ``errors`` and ``shardErrors`` are channels of 10.
_ERRORS_BUFFER = 10
#: The ``attribute_type`` operand of capture's condition (checkpoints.go ``capture``, ``:nullType``).
_NULL_TYPE_NAME = "NULL"

Item = dict[str, Any]  # one DynamoDB item as boto3's low-level client has it: {name: {"S": ...}}


# ---------------------------------------------------------------------------------------------------------
# Time: time.Now().UnixNano() and now.UTC().Format(time.RFC1123Z)

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _now_ns() -> int:
    """Go's ``time.Now().UnixNano()``."""
    return time.time_ns()


def rfc1123z(now_ns: int) -> str:
    """Go's ``time.Unix(0, now_ns).UTC().Format(time.RFC1123Z)``: ``Mon, 02 Jan 2006 15:04:05 +0000``
    (English names whatever the locale, the seconds truncated)."""
    t = dt.datetime.fromtimestamp(now_ns // 10**9, dt.UTC)
    return f"{_DAYS[t.weekday()]}, {t.day:02d} {_MONTHS[t.month - 1]} {t.year:04d} {t:%H:%M:%S} +0000"


def _ns(seconds: float) -> int:
    """A duration in seconds as Go's ``time.Duration`` (nanoseconds)."""
    return round(seconds * 1e9)


# ---------------------------------------------------------------------------------------------------------
# Marshalling: aws-sdk-go's dynamodbattribute.MarshalMap (encode.go), default Encoder (NullEmptyString,
# no EnableEmptyCollections), of the field types the library uses

_NULL: Mapping[str, Any] = {"NULL": True}


def go_string(value: str | None) -> dict[str, Any]:
    """A Go ``string`` or ``*string`` as MarshalMap writes it: S, or NULL for a nil pointer and for ""
    (``encodeString``, NullEmptyString; a pointer is dereferenced first by ``valueElem``)."""
    return dict(_NULL) if not value else {"S": value}


def go_int64(value: int | None) -> dict[str, Any]:
    """A Go ``int64`` or ``*int64``: N in decimal, or NULL for a nil pointer (``encodeNumber``)."""
    return dict(_NULL) if value is None else {"N": str(value)}


def go_string_slice(values: Sequence[str] | None) -> dict[str, Any]:
    """A Go ``[]string``: a list (L) of its elements each as :func:`go_string` (an empty element is NULL),
    or NULL when nil or empty (``encodeSlice``: no EnableEmptyCollections)."""
    return dict(_NULL) if not values else {"L": [go_string(v) for v in values]}


# ---------------------------------------------------------------------------------------------------------
# Unmarshalling: dynamodbattribute.UnmarshalMap (decode.go) into a fresh Go struct


class GoUnmarshalError(Exception):
    """What ``dynamodbattribute.UnmarshalMap`` returns for an item Go cannot read into its struct: an
    ``UnmarshalTypeError`` ("cannot unmarshal bool into Go value of type int64") or strconv's error for a
    number that is no int64. Go's caller returns it as its own error."""


_GO_STRING, _GO_INT64, _GO_STRING_SLICE = "string", "int64", "[]string"
#: decode.go ``decode``: the first non-nil member of an AttributeValue, in this order, says its type.
_MEMBERS = ("B", "BOOL", "BS", "L", "M", "N", "NS", "S", "SS")
#: How decode.go's UnmarshalTypeError names each type of value.
_VALUE_NAMES = {
    "B": "binary", "BOOL": "bool", "BS": "binary set", "L": "list", "M": "map", "N": "number",
    "NS": "number set", "S": "string", "SS": "string set",
}  # fmt: skip
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_PARSE_INT = re.compile(r"[+-]?[0-9]+")  # strconv.ParseInt(s, 10, 64): a sign, decimal digits, nothing else


def _member(value: Mapping[str, Any]) -> str | None:
    """The type of an AttributeValue as Go's decoder sees it: "NULL" if NULL is set, else the first member
    of :data:`_MEMBERS` present; None for an empty AttributeValue (Go decodes it as nothing)."""
    if "NULL" in value:
        return "NULL"
    return next((m for m in _MEMBERS if m in value), None)


def _type_error(member: str, go_type: str) -> GoUnmarshalError:
    return GoUnmarshalError(
        f"UnmarshalTypeError: cannot unmarshal {_VALUE_NAMES[member]} into Go value of type {go_type}"
    )


def _decode_string(value: Mapping[str, Any]) -> str:
    """An AttributeValue into a Go ``string`` (``decodeString``, ``decodeNumber``: an N's digits are taken
    as the string; NULL is the zero value)."""
    member = _member(value)
    if member in (None, "NULL"):
        return ""
    if member in ("S", "N"):
        return str(value[member])
    raise _type_error(member, _GO_STRING)


def _decode_int64(value: Mapping[str, Any]) -> int:
    """An AttributeValue into a Go ``int64`` (``decodeNumber``: strconv.ParseInt(n, 10, 64))."""
    member = _member(value)
    if member in (None, "NULL"):
        return 0
    if member != "N":
        raise _type_error(member, _GO_INT64)
    digits = str(value["N"])
    if not _PARSE_INT.fullmatch(digits):
        raise GoUnmarshalError(f'strconv.ParseInt: parsing "{digits}": invalid syntax')
    number = int(digits)
    if not _INT64_MIN <= number <= _INT64_MAX:
        raise GoUnmarshalError(f'strconv.ParseInt: parsing "{digits}": value out of range')
    return number


def _decode_string_slice(value: Mapping[str, Any]) -> list[str] | None:
    """An AttributeValue into a Go ``[]string`` (None for nil): a list's, string set's or number set's
    elements each as a string (``decodeList``, ``decodeStringSet``, ``decodeNumberSet``); an S leaves the
    slice nil without an error (``decodeString`` ignores a slice that is not ``[]byte``); a binary set's
    elements fail as binary into string."""
    member = _member(value)
    if member in (None, "NULL", "S"):
        return None
    if member == "L":
        return [_decode_string(element) for element in value["L"]]
    if member in ("SS", "NS"):
        return [str(element) for element in value[member]]
    if member == "BS":
        if value["BS"]:
            raise _type_error("B", _GO_STRING)
        return []
    raise _type_error(member, _GO_STRING_SLICE)


_DECODERS: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    _GO_STRING: _decode_string,
    _GO_INT64: _decode_int64,
    _GO_STRING_SLICE: _decode_string_slice,
}


def _unmarshal(item: Mapping[str, Any] | None, fields: Mapping[str, tuple[str, bool]]) -> dict[str, Any]:
    """``UnmarshalMap`` of ``item`` into a fresh struct whose ``fields`` are {Go name: (Go type, pointer)}.

    Returns {Go name: value}: the zero value (None for a pointer or a nil slice) where the item has no
    attribute or a NULL one. An attribute names a field by its exact name, else by a case-insensitive match
    (``cachedFields.FieldByName``: strings.EqualFold, here str.casefold); others are ignored. Go walks the
    item in map order; here it is the item's order (which one of two attributes naming one field wins, and
    which error of several is raised, may differ)."""
    decoded = {name: None if pointer else _DECODERS[kind]({}) for name, (kind, pointer) in fields.items()}
    folded = {name.casefold(): name for name in reversed(list(fields))}  # the first field of a fold wins
    for attribute, value in (item or {}).items():
        name = attribute if attribute in fields else folded.get(attribute.casefold())
        if name is None:
            continue
        kind, pointer = fields[name]
        # a pointer is left nil by NULL, else allocated and its target decoded (decode.go ``indirect``)
        decoded[name] = None if pointer and _member(value) == "NULL" else _DECODERS[kind](value)
    return decoded


# ---------------------------------------------------------------------------------------------------------
# The library's structs


_CHECKPOINT_FIELDS = {  # checkpoints.go checkpointRecord, in field order
    "Shard": (_GO_STRING, False), "SequenceNumber": (_GO_STRING, True), "LastUpdate": (_GO_INT64, False),
    "OwnerName": (_GO_STRING, True), "Finished": (_GO_INT64, True), "OwnerID": (_GO_STRING, True),
    "LastUpdateRFC": (_GO_STRING, False), "FinishedRFC": (_GO_STRING, True),
}  # fmt: skip
_CLIENT_FIELDS = {  # clients.go clientRecord
    "ID": (_GO_STRING, False), "LastUpdate": (_GO_INT64, False), "Name": (_GO_STRING, False),
    "LastUpdateRFC": (_GO_STRING, False),
}  # fmt: skip
_SHARD_CACHE_FIELDS = {  # leader.go shardCacheRecord
    "Key": (_GO_STRING, False), "ShardIDs": (_GO_STRING_SLICE, False), "LastUpdate": (_GO_INT64, False),
    "LastUpdateRFC": (_GO_STRING, False),
}  # fmt: skip


@attrs.frozen
class CheckpointRecord:
    """checkpoints.go ``checkpointRecord``: one row of ``<app>_checkpoints``. None is a nil pointer."""

    shard: str = ""
    sequence_number: str | None = None  # last sequence number read; nil if the shard was never read
    last_update: int = 0  # UnixNano of the last commit or change of owner
    owner_name: str | None = None
    finished: int | None = None  # UnixNano of when the shard was read to its end and that was committed
    owner_id: str | None = None  # the owning client's ID; nil when unowned
    last_update_rfc: str = ""
    finished_rfc: str | None = None

    def item(self) -> Item:
        """The item ``MarshalMap(record)`` makes: every field, nil pointers as NULL."""
        return {
            "Shard": go_string(self.shard),
            "SequenceNumber": go_string(self.sequence_number),
            "LastUpdate": go_int64(self.last_update),
            "OwnerName": go_string(self.owner_name),
            "Finished": go_int64(self.finished),
            "OwnerID": go_string(self.owner_id),
            "LastUpdateRFC": go_string(self.last_update_rfc),
            "FinishedRFC": go_string(self.finished_rfc),
        }


@attrs.frozen
class ClientRecord:
    """clients.go ``clientRecord``: one row of ``<app>_clients``."""

    id: str = ""
    last_update: int = 0  # UnixNano of the client's last registration
    name: str = ""
    last_update_rfc: str = ""

    def item(self) -> Item:
        return {
            "ID": go_string(self.id),
            "LastUpdate": go_int64(self.last_update),
            "Name": go_string(self.name),
            "LastUpdateRFC": go_string(self.last_update_rfc),
        }


@attrs.frozen
class ShardCacheRecord:
    """leader.go ``shardCacheRecord``: the ``ShardCache`` item of ``<app>_metadata``; the zero record when
    the item does not exist (Go's GetItem gives an empty item, unmarshalled into a zero struct)."""

    key: str = ""
    shard_ids: tuple[str, ...] | None = None  # nil: no cache
    last_update: int = 0
    last_update_rfc: str = ""

    def item(self) -> Item:
        return {
            "Key": go_string(self.key),
            "ShardIDs": go_string_slice(self.shard_ids),
            "LastUpdate": go_int64(self.last_update),
            "LastUpdateRFC": go_string(self.last_update_rfc),
        }


def read_checkpoint(item: Mapping[str, Any] | None) -> CheckpointRecord:
    """A checkpoint row as Go reads it (``UnmarshalMap`` into ``checkpointRecord``, in checkpoints.go
    ``capture`` and ``loadCheckpoints``); raises :class:`GoUnmarshalError` where Go fails."""
    f = _unmarshal(item, _CHECKPOINT_FIELDS)
    return CheckpointRecord(
        f["Shard"], f["SequenceNumber"], f["LastUpdate"], f["OwnerName"], f["Finished"], f["OwnerID"],
        f["LastUpdateRFC"], f["FinishedRFC"],
    )  # fmt: skip


def read_client(item: Mapping[str, Any] | None) -> ClientRecord:
    """A client row as Go reads it (clients.go ``getClients``, ``reapClients``)."""
    f = _unmarshal(item, _CLIENT_FIELDS)
    return ClientRecord(f["ID"], f["LastUpdate"], f["Name"], f["LastUpdateRFC"])


def read_shard_cache(item: Mapping[str, Any] | None) -> ShardCacheRecord:
    """The ShardCache item as Go reads it (leader.go ``loadShardCacheFromDynamo``)."""
    f = _unmarshal(item, _SHARD_CACHE_FIELDS)
    ids = f["ShardIDs"]
    return ShardCacheRecord(f["Key"], None if ids is None else tuple(ids), f["LastUpdate"], f["LastUpdateRFC"])


# ---------------------------------------------------------------------------------------------------------
# Names, configuration, errors


@attrs.frozen
class GoTables:
    """The application's table names (kinsumer.go ``NewWithInterfaces``)."""

    clients: str
    checkpoints: str
    metadata: str

    @classmethod
    def for_application(cls, application: str) -> GoTables:
        return cls(f"{application}_clients", f"{application}_checkpoints", f"{application}_metadata")


class GoError(Exception):
    """An error the Go client returns: from ``Run()``, from ``Next()`` (what its goroutines put on the
    ``errors`` channel, with Go's prefixes: "shard error (<shard>) in <action>: ...", "error refreshing
    shards: ..."), or one of errors.go's. ``cause`` (also ``__cause__``) is the exception it wraps."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause
        self.__cause__ = cause

    @property
    def root_cause(self) -> BaseException | None:
        """The innermost cause (a :class:`GoUnmarshalError`, a botocore error, ...) under Go's wrapping."""
        cause = self.cause
        while isinstance(cause, GoError) and cause.cause is not None:
            cause = cause.cause
        return cause


class GoKilled(Exception):
    """The client was killed (:meth:`GoClient.kill`) or crashed: its process is gone."""


class GoPanic(GoKilled):
    """The emulated Go process panicked (a nil pointer dereference of Go's), which ends it as a kill does."""


# errors.go
_ERR_RUN_TWICE = "run() can only ever be run once"
_ERR_NOT_IN_DYNAMO = "unable to find this client in the client list"
_ERR_NO_SHARDS_ASSIGNED = "we found shards, but got assigned none"
_ERR_STREAM_BUSY = "stream is busy"
_ERR_NO_SUCH_STREAM = "no such stream"


@attrs.frozen
class GoConfig:
    """config.go ``Config`` with ``NewConfig()``'s defaults; durations in seconds (Go: time.Duration)."""

    throttle_delay: float = 0.25  # between GetRecords calls of a shard, and between capture attempts
    commit_frequency: float = 1.0  # between a consumer's commits (written only if dirty or finished)
    shard_check_frequency: float = 60.0  # between the main loop's refreshShards
    leader_action_frequency: float = 60.0  # between the leader's registerLeadership and leader actions
    buffer_size: int = 100  # the records channel between the consumers and the main loop
    dynamo_read_capacity: int = 10  # of the tables CreateRequiredTables creates
    dynamo_write_capacity: int = 10
    dynamo_waiter_delay: float = 3.0  # between DescribeTable polls after CreateTable/DeleteTable
    use_list_shards_for_stream_ready: bool = False  # Run's stream check: ListShards instead of DescribeStream

    @property
    def max_age_for_client_record_ns(self) -> int:
        """kinsumer.go ``maxAgeForClientRecord = shardCheckFrequency * 5``: older client rows are not counted
        as members, older checkpoint owners may be taken over."""
        return _ns(self.shard_check_frequency) * 5

    @property
    def max_age_for_leader_record_ns(self) -> int:
        """kinsumer.go ``maxAgeForLeaderRecord = leaderActionFrequency * 5``: an older Leader item is free."""
        return _ns(self.leader_action_frequency) * 5

    def validate(self) -> None:
        """config.go ``validateConfig``: raises :class:`GoError` with errors.go's message."""
        problems = [
            (self.throttle_delay < 0.2, "throttleDelay config value must be at least 200ms (preferably 250ms)"),
            (_ns(self.commit_frequency) == 0, "commitFrequency config value is mandatory"),
            (_ns(self.shard_check_frequency) == 0, "shardCheckFrequency config value is mandatory"),
            (
                _ns(self.leader_action_frequency) == 0 or self.shard_check_frequency > self.leader_action_frequency,
                "leaderActionFrequency config value is mandatory and must be at least as long as "
                "ShardCheckFrequency",
            ),
            (self.buffer_size == 0, "bufferSize config value is mandatory"),
            (0 in (self.dynamo_read_capacity, self.dynamo_write_capacity), "dynamo read/write capacity cannot be 0"),
        ]  # fmt: skip
        for bad, message in problems:
            if bad:
                raise GoError(message)


def _error_code(exc: BaseException) -> str | None:
    """The code of an error as aws-sdk-go's ``awserr.Error`` would carry it: a service error's code; a
    connection or HTTP failure is the SDK's "RequestError"; None for anything that is not an awserr."""
    if isinstance(exc, botocore.exceptions.ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    if isinstance(exc, botocore.exceptions.HTTPClientError | botocore.exceptions.ConnectionError):
        return "RequestError"
    return None


#: aws/request/retryer.go: retryableCodes, credsExpiredCodes and throttleCodes, as shard_consumer.go
#: ``consume`` asks (request.IsErrorRetryable(err) || request.IsErrorThrottle(err)).
_RETRIED_CODES = frozenset({
    "RequestError", "RequestTimeout", "ResponseTimeout", "RequestTimeoutException",
    "ExpiredToken", "ExpiredTokenException", "RequestExpired",
    "ProvisionedThroughputExceededException", "ThrottledException", "Throttling", "ThrottlingException",
    "RequestLimitExceeded", "RequestThrottled", "RequestThrottledException", "TooManyRequestsException",
    "PriorRequestNotComplete", "TransactionInProgressException", "EC2ThrottledException",
})  # fmt: skip


def _conditional_failed(exc: BaseException) -> bool:
    return _error_code(exc) == "ConditionalCheckFailedException"


# ---------------------------------------------------------------------------------------------------------
# Single requests, each as the Go function named in its docstring makes it


def scan_pages(db: DynamoDBClient, params: dict[str, Any]) -> Iterator[Item]:
    """aws-sdk-go's ``ScanPages``: Scan, then again from each page's LastEvaluatedKey until there is none."""
    while True:
        page = db.scan(**params)
        yield from page.get("Items", [])
        last = page.get("LastEvaluatedKey")
        if not last:
            return
        params = {**params, "ExclusiveStartKey": last}


def register_client(db: DynamoDBClient, table: str, client_id: str, name: str, *, now_ns: int | None = None) -> None:
    """clients.go ``registerWithClientsTable``: PutItem of the client's row, unconditionally, LastUpdate now."""
    now = _now_ns() if now_ns is None else now_ns
    db.put_item(TableName=table, Item=ClientRecord(client_id, now, name, rfc1123z(now)).item())


def deregister_client(db: DynamoDBClient, table: str, client_id: str) -> None:
    """clients.go ``deregisterFromClientsTable``: DeleteItem of the client's row, unconditionally."""
    db.delete_item(TableName=table, Key={"ID": go_string(client_id)})


def get_clients(db: DynamoDBClient, table: str, max_age_ns: int, *, now_ns: int | None = None) -> list[ClientRecord]:
    """clients.go ``getClients``: a consistent Scan of the rows with ``LastUpdate > now - max_age``
    (nanoseconds), read as ``clientRecord``, sorted by ID."""
    cutoff = (_now_ns() if now_ns is None else now_ns) - max_age_ns
    params: dict[str, Any] = {
        "TableName": table, "ConsistentRead": True, "FilterExpression": "LastUpdate > :cutoff",
        "ExpressionAttributeValues": {":cutoff": {"N": str(cutoff)}},
    }  # fmt: skip
    clients = [read_client(item) for item in scan_pages(db, params)]
    return sorted(clients, key=lambda c: c.id.encode())  # Go compares strings bytewise


def reap_clients(db: DynamoDBClient, table: str, *, now_ns: int | None = None) -> None:
    """clients.go ``reapClients``: a consistent Scan of the rows older than 48 h, then a DeleteItem of each
    on the same condition (a failed condition is an error, as in Go)."""
    cutoff = {":cutoff": {"N": str((_now_ns() if now_ns is None else now_ns) - CLIENT_REAP_AGE_NS)}}
    params: dict[str, Any] = {
        "TableName": table, "ConsistentRead": True, "FilterExpression": "LastUpdate < :cutoff",
        "ExpressionAttributeValues": cutoff,
    }  # fmt: skip
    old = [read_client(item) for item in scan_pages(db, params)]
    for client in old:
        db.delete_item(
            TableName=table, Key={"ID": go_string(client.id)}, ConditionExpression="LastUpdate < :cutoff",
            ExpressionAttributeValues=cutoff,
        )  # fmt: skip


def get_checkpoint(db: DynamoDBClient, table: str, shard_id: str) -> CheckpointRecord:
    """The GetItem of checkpoints.go ``capture``: a consistent read of the shard's row as ``checkpointRecord``
    (the zero record if there is none)."""
    got = db.get_item(TableName=table, ConsistentRead=True, Key={"Shard": {"S": shard_id}})
    return read_checkpoint(got.get("Item"))


def capture(
    db: DynamoDBClient, table: str, shard_id: str, owner_name: str, owner_id: str, max_age_ns: int,
    *, now_ns: int | None = None,
) -> Checkpointer | None:  # fmt: skip
    """checkpoints.go ``capture``: GetItem of the shard's row; None if it has an OwnerID and a LastUpdate
    newer than ``now - max_age``; else a conditional PutItem of the row *as read back* (every field of
    ``checkpointRecord`` re-marshalled, so attributes Go does not know are dropped and a Finished is kept)
    with this owner and LastUpdate now, on ``attribute_not_exists(OwnerID) OR attribute_type(OwnerID,
    :nullType) OR LastUpdate <= :cutoff``; None if that condition fails. Raises :class:`GoUnmarshalError`
    for a row Go cannot read."""
    cutoff = (_now_ns() if now_ns is None else now_ns) - max_age_ns
    record = get_checkpoint(db, table, shard_id)
    if record.owner_id is not None and record.last_update > cutoff:
        return None
    now = _now_ns() if now_ns is None else now_ns
    mine = attrs.evolve(
        record, shard=shard_id, owner_id=owner_id, owner_name=owner_name, last_update=now, last_update_rfc=rfc1123z(now)
    )
    try:
        db.put_item(
            TableName=table,
            Item=mine.item(),
            ConditionExpression=(
                "attribute_not_exists(OwnerID) OR attribute_type(OwnerID, :nullType) OR LastUpdate <= :cutoff"
            ),
            ExpressionAttributeValues={":cutoff": go_int64(cutoff), ":nullType": go_string(_NULL_TYPE_NAME)},
        )
    except botocore.exceptions.ClientError as exc:
        if _conditional_failed(exc):
            return None
        raise
    return Checkpointer(db, table, shard_id, owner_id, owner_name, record.sequence_number or "")


def commit(
    db: DynamoDBClient, table: str, shard_id: str, owner_id: str, owner_name: str, sequence_number: str,
    *, finished: bool = False, now_ns: int | None = None,
) -> None:  # fmt: skip
    """The PutItem of checkpoints.go ``checkpointer.commit``: the whole row (SequenceNumber NULL if "",
    Finished/FinishedRFC now if ``finished`` else NULL), LastUpdate now, on ``OwnerID = :ownerID``.
    Raises botocore's ClientError (ConditionalCheckFailedException) if the row is not ``owner_id``'s."""
    now = _now_ns() if now_ns is None else now_ns
    record = CheckpointRecord(
        shard=shard_id, sequence_number=sequence_number or None, last_update=now, owner_name=owner_name,
        finished=now if finished else None, owner_id=owner_id, last_update_rfc=rfc1123z(now),
        finished_rfc=rfc1123z(now) if finished else None,
    )  # fmt: skip
    db.put_item(
        TableName=table, Item=record.item(), ConditionExpression="OwnerID = :ownerID",
        ExpressionAttributeValues={":ownerID": go_string(owner_id)},
    )  # fmt: skip


def release(
    db: DynamoDBClient, table: str, shard_id: str, owner_id: str, sequence_number: str, *, now_ns: int | None = None
) -> None:
    """checkpoints.go ``checkpointer.release``: UpdateItem ``REMOVE OwnerID, OwnerName SET LastUpdate,
    LastUpdateRFC, SequenceNumber`` (NULL if "") on ``OwnerID = :ownerID``."""
    now = _now_ns() if now_ns is None else now_ns
    db.update_item(
        TableName=table,
        Key={"Shard": {"S": shard_id}},
        UpdateExpression=(
            "REMOVE OwnerID, OwnerName SET LastUpdate = :lastUpdate, LastUpdateRFC = :lastUpdateRFC, "
            "SequenceNumber = :sequenceNumber"
        ),
        ConditionExpression="OwnerID = :ownerID",
        ExpressionAttributeValues={
            ":ownerID": go_string(owner_id), ":sequenceNumber": go_string(sequence_number),
            ":lastUpdate": go_int64(now), ":lastUpdateRFC": go_string(rfc1123z(now)),
        },
    )  # fmt: skip


class Checkpointer:
    """checkpoints.go ``checkpointer``: a captured shard's position, written by :meth:`commit` only when
    dirty (moved since the last commit) or finished. Its lock is held across commit's PutItem, as Go's
    mutex is (``update`` from the main loop waits for it)."""

    def __init__(
        self, db: DynamoDBClient, table: str, shard_id: str, owner_id: str, owner_name: str, sequence_number: str
    ) -> None:
        self.db = db
        self.table = table
        self.shard_id = shard_id
        self.owner_id = owner_id
        self.owner_name = owner_name
        self.sequence_number = sequence_number
        self.dirty = False
        self.finished = False
        self.final_sequence_number = ""
        self.captured = True
        self._lock = threading.Lock()

    def update(self, sequence_number: str) -> None:
        """checkpoints.go ``update``: the record with this number was handed to the user."""
        with self._lock:
            self.dirty = self.dirty or self.sequence_number != sequence_number
            self.sequence_number = sequence_number

    def finish(self, sequence_number: str) -> None:
        """checkpoints.go ``finish``: the shard ended; ``sequence_number`` is the last one read ("" if none)."""
        with self._lock:
            self.final_sequence_number = sequence_number
            self.finished = True

    def commit(self, *, now_ns: int | None = None) -> bool:
        """checkpoints.go ``commit``: nothing unless dirty or finished; else :func:`commit`, with Finished if
        the shard ended and the user has had its last record (or none was read). True if Finished was
        written: the consumer then stops and releases."""
        with self._lock:
            if not self.dirty and not self.finished:
                return False
            done = self.finished and self.final_sequence_number in (self.sequence_number, "")
            commit(
                self.db, self.table, self.shard_id, self.owner_id, self.owner_name, self.sequence_number,
                finished=done, now_ns=now_ns,
            )  # fmt: skip
            self.dirty = False
            return done

    def release(self, *, now_ns: int | None = None) -> None:
        """checkpoints.go ``release`` (:func:`release`); Go takes no lock here."""
        release(self.db, self.table, self.shard_id, self.owner_id, self.sequence_number, now_ns=now_ns)
        self.captured = False


def load_checkpoints(db: DynamoDBClient, table: str) -> dict[str, CheckpointRecord]:
    """checkpoints.go ``loadCheckpoints``: a consistent Scan of every row, read as ``checkpointRecord``, by Shard."""
    records = [read_checkpoint(item) for item in scan_pages(db, {"TableName": table, "ConsistentRead": True})]
    return {record.shard: record for record in records}


def register_leadership(
    db: DynamoDBClient, table: str, client_id: str, name: str, max_age_ns: int, *, now_ns: int | None = None
) -> bool:
    """leader.go ``registerLeadership``: PutItem of the Leader item (Key, ID, Name, LastUpdate,
    LastUpdateRFC) on ``ID = :ID OR attribute_not_exists(ID) OR LastUpdate <= :cutoff``; False if another
    client holds it (the condition failed)."""
    now = _now_ns() if now_ns is None else now_ns
    item = {
        "Key": go_string(LEADER_KEY), "ID": go_string(client_id), "Name": go_string(name),
        "LastUpdate": go_int64(now), "LastUpdateRFC": go_string(rfc1123z(now)),
    }  # fmt: skip
    try:
        db.put_item(
            TableName=table,
            Item=item,
            ConditionExpression="ID = :ID OR attribute_not_exists(ID) OR LastUpdate <= :cutoff",
            ExpressionAttributeValues={":ID": go_string(client_id), ":cutoff": go_int64(now - max_age_ns)},
        )
    except botocore.exceptions.ClientError as exc:
        if _conditional_failed(exc):
            return False
        raise
    return True


def deregister_leadership(db: DynamoDBClient, table: str, client_id: str, *, now_ns: int | None = None) -> None:
    """leader.go ``deregisterLeadership``: UpdateItem ``REMOVE ID SET LastUpdate, LastUpdateRFC`` of the
    Leader item on ``ID = :ID`` (a failed condition is no error: we never were the leader)."""
    now = _now_ns() if now_ns is None else now_ns
    try:
        db.update_item(
            TableName=table,
            Key={"Key": {"S": LEADER_KEY}},
            ConditionExpression="ID = :ID",
            UpdateExpression="REMOVE ID SET LastUpdate = :lastUpdate, LastUpdateRFC = :lastUpdateRFC",
            ExpressionAttributeValues={
                ":ID": go_string(client_id), ":lastUpdate": go_int64(now), ":lastUpdateRFC": go_string(rfc1123z(now)),
            },
        )  # fmt: skip
    except botocore.exceptions.ClientError as exc:
        if not _conditional_failed(exc):
            raise


def set_cached_shard_ids(
    db: DynamoDBClient, table: str, shard_ids: Sequence[str], *, now_ns: int | None = None
) -> None:
    """leader.go ``setCachedShardIDs``: PutItem of the ShardCache item, unconditionally; nothing for no shards."""
    if not shard_ids:
        return
    now = _now_ns() if now_ns is None else now_ns
    db.put_item(TableName=table, Item=ShardCacheRecord(SHARD_CACHE_KEY, tuple(shard_ids), now, rfc1123z(now)).item())


def load_shard_cache(db: DynamoDBClient, table: str) -> ShardCacheRecord | None:
    """leader.go ``loadShardCacheFromDynamo``: a consistent GetItem of the ShardCache item as
    ``shardCacheRecord``, the zero record if there is none; None if the *table* does not exist."""
    try:
        got = db.get_item(TableName=table, ConsistentRead=True, Key={"Key": {"S": SHARD_CACHE_KEY}})
    except botocore.exceptions.ClientError as exc:
        if _error_code(exc) == "ResourceNotFoundException":
            return None
        raise
    return read_shard_cache(got.get("Item"))


def load_shard_ids_from_dynamo(db: DynamoDBClient, table: str) -> list[str]:
    """leader.go ``loadShardIDsFromDynamo``: the cached shard IDs as stored (not re-sorted); [] for none."""
    record = load_shard_cache(db, table)
    return [] if record is None or record.shard_ids is None else list(record.shard_ids)


def load_shard_ids_from_kinesis(kinesis: KinesisClient, stream: str) -> list[str]:
    """leader.go ``loadShardIDsFromKinesis``: ListShards by StreamName, then by NextToken alone, every shard
    (closed ones too), sorted. ResourceInUseException and ResourceNotFoundException become errors.go's
    ErrStreamBusy and ErrNoSuchStream."""
    shard_ids: list[str] = []
    params: dict[str, Any] = {"StreamName": stream}
    while True:
        try:
            page = kinesis.list_shards(**params)
        except botocore.exceptions.ClientError as exc:
            code = _error_code(exc)
            if code == "ResourceInUseException":
                raise GoError(_ERR_STREAM_BUSY, exc) from exc
            if code == "ResourceNotFoundException":
                raise GoError(_ERR_NO_SUCH_STREAM, exc) from exc
            raise
        shard_ids.extend(shard["ShardId"] for shard in page.get("Shards", []))
        token = page.get("NextToken")
        if token is None:
            return sorted(shard_ids)
        params = {"NextToken": token}


def diff_shard_ids(
    current: Sequence[str], cached: Sequence[str] | None, checkpoints: Mapping[str, CheckpointRecord]
) -> tuple[list[str], bool]:
    """leader.go ``diffShardIDs``: the new cache, sorted, and whether it changed. A cached shard stays while
    ListShards returns it and its checkpoint has no Finished; a listed shard not cached is added unless
    Finished."""
    remaining = set(current)
    updated: list[str] = []
    changed = False
    for shard in cached or ():
        if shard in remaining:
            remaining.discard(shard)
            checkpoint = checkpoints.get(shard)
            if checkpoint is not None and checkpoint.finished is not None:
                changed = True
            else:
                updated.append(shard)
        else:
            changed = True
    for shard in remaining:
        checkpoint = checkpoints.get(shard)
        if checkpoint is None or checkpoint.finished is None:
            updated.append(shard)
            changed = True
    return sorted(updated, key=str.encode), changed


def get_shard_iterator(kinesis: KinesisClient, stream: str, shard_id: str, sequence_number: str) -> str:
    """shard_consumer.go ``getShardIterator``: AFTER_SEQUENCE_NUMBER of the checkpoint, TRIM_HORIZON when
    there is none (""), LATEST for the special value "LATEST"."""
    params: dict[str, Any] = {"ShardId": shard_id, "StreamName": stream}
    if sequence_number == "":
        params["ShardIteratorType"] = "TRIM_HORIZON"
    elif sequence_number == "LATEST":
        params["ShardIteratorType"] = "LATEST"
    else:
        params["ShardIteratorType"] = "AFTER_SEQUENCE_NUMBER"
        params["StartingSequenceNumber"] = sequence_number
    return str(kinesis.get_shard_iterator(**params).get("ShardIterator") or "")


def get_records(kinesis: KinesisClient, iterator: str) -> tuple[list[Mapping[str, Any]], str]:
    """shard_consumer.go ``getRecords``: GetRecords with Limit 10000; the records and the next iterator
    ("" when Kinesis gives none: the shard ended)."""
    got = kinesis.get_records(ShardIterator=iterator, Limit=GET_RECORDS_LIMIT)
    return list(got.get("Records", [])), str(got.get("NextShardIterator") or "")


def _table_exists(db: DynamoDBClient, name: str) -> bool:
    """kinsumer.go ``dynamoTableExists``: DescribeTable succeeds (any error counts as "no table")."""
    try:
        db.describe_table(TableName=name)
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError):
        return False
    return True


def _wait_for_table(db: DynamoDBClient, name: str, delay: float, *, exists: bool) -> None:
    """aws-sdk-go's ``WaitUntilTableExists``/``WaitUntilTableNotExists`` with a constant delay: DescribeTable
    at once and after each delay, at most 25 times, until ACTIVE (or until ResourceNotFoundException)."""
    for attempt in range(25):
        try:
            status = db.describe_table(TableName=name)["Table"].get("TableStatus")
            if exists and status == "ACTIVE":
                return
        except botocore.exceptions.ClientError as exc:
            if _error_code(exc) != "ResourceNotFoundException":
                raise
            if not exists:
                return
        if attempt < 24:
            time.sleep(delay)
    raise GoError(f"ResourceNotReady: exceeded wait attempts for table {name}")


def _in_goroutines(calls: Sequence[Callable[[], None]]) -> None:
    """golang.org/x/sync/errgroup: each call on a thread of its own; the first error is raised."""
    failures: list[BaseException] = []

    def run(call: Callable[[], None]) -> None:
        try:
            call()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(call,), daemon=True) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def create_required_tables(db: DynamoDBClient, application: str, config: GoConfig = GoConfig()) -> None:
    """kinsumer.go ``CreateRequiredTables``: for each table, concurrently, DescribeTable, and if that fails
    CreateTable (string hash key ID, Shard or Key; provisioned capacity) and wait for it."""
    tables = GoTables.for_application(application)

    def create(name: str, key: str) -> None:
        if _table_exists(db, name):
            return
        db.create_table(
            AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"}],
            KeySchema=[{"AttributeName": key, "KeyType": "HASH"}],
            ProvisionedThroughput={
                "ReadCapacityUnits": config.dynamo_read_capacity, "WriteCapacityUnits": config.dynamo_write_capacity,
            },
            TableName=name,
        )  # fmt: skip
        _wait_for_table(db, name, config.dynamo_waiter_delay, exists=True)

    _in_goroutines([
        lambda: create(tables.clients, "ID"), lambda: create(tables.checkpoints, "Shard"),
        lambda: create(tables.metadata, "Key"),
    ])  # fmt: skip


def delete_tables(db: DynamoDBClient, application: str, config: GoConfig = GoConfig()) -> None:
    """kinsumer.go ``DeleteTables``: for each existing table, concurrently, DeleteTable and wait until gone."""
    tables = GoTables.for_application(application)

    def delete(name: str) -> None:
        if not _table_exists(db, name):
            return
        db.delete_table(TableName=name)
        _wait_for_table(db, name, config.dynamo_waiter_delay, exists=False)

    _in_goroutines(
        [lambda: delete(tables.clients), lambda: delete(tables.checkpoints), lambda: delete(tables.metadata)]
    )


# ---------------------------------------------------------------------------------------------------------
# Go's channels and select, for one client: every channel of a client shares one lock (a select is atomic)

_T = TypeVar("_T")


class _Killed(BaseException):
    """Raised in a client's threads once it is killed: the thread unwinds doing nothing more (no deferred
    Go code runs, no request is sent)."""


class _Panicked(Exception):
    """A Go runtime panic: ends the whole emulated process (:meth:`GoClient.kill`)."""


class _Hub:
    """A client's lock and condition, shared by its channels and timers; ``killed`` ends every wait."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.killed = False

    def check(self) -> None:
        if self.killed:
            raise _Killed


class _Chan(Generic[_T]):
    """A Go channel of ``capacity`` (0: unbuffered: a send completes only to a receiver waiting in a select)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.items: collections.deque[_T] = collections.deque()
        self.closed = False
        self.waiting = 0  # receivers blocked in a select on this (unbuffered) channel

    def can_send(self) -> bool:
        return len(self.items) < (self.capacity or self.waiting)


class _Ticker:
    """time.NewTicker: fires at start + k·period; a tick not taken in time waits (one), later ones are dropped."""

    def __init__(self, period: float) -> None:
        self.period = period
        self.start = time.monotonic()
        self.next = self.start + period
        self.stopped = False

    def wake_at(self) -> float | None:
        return None if self.stopped else self.next

    def take(self, now: float) -> None:
        self.next = self.start + (int((now - self.start) / self.period) + 1) * self.period


class _After:
    """time.After: fires once, ``delay`` from now."""

    def __init__(self, delay: float) -> None:
        self.at: float | None = time.monotonic() + delay

    def wake_at(self) -> float | None:
        return self.at

    def take(self, now: float) -> None:
        self.at = None


class _Recv:
    def __init__(self, chan: _Chan[Any]) -> None:
        self.chan = chan
        self.value: Any = None
        self.ok = False


class _Send:
    def __init__(self, chan: _Chan[Any], value: Any) -> None:
        self.chan = chan
        self.value = value


_Case = _Recv | _Send | _Ticker | _After


def _ready(case: _Case, now: float) -> bool:
    if isinstance(case, _Recv):
        return bool(case.chan.items) or case.chan.closed
    if isinstance(case, _Send):
        return case.chan.can_send()
    at = case.wake_at()
    return at is not None and now >= at


def _fire(case: _Case, now: float) -> None:
    if isinstance(case, _Recv):
        if case.chan.items:
            case.value, case.ok = case.chan.items.popleft(), True
        else:
            case.value, case.ok = None, False
    elif isinstance(case, _Send):
        case.chan.items.append(case.value)
    else:
        case.take(now)


def _select(hub: _Hub, cases: Sequence[_Case], deadline: float | None = None) -> _Case | None:
    """Go's ``select`` over ``cases``: the one that fired (chosen at random among the ready ones; a value
    handed to us on an unbuffered channel while we waited is taken first), or None at ``deadline``
    (monotonic). Raises :class:`_Killed` once the client is killed."""
    unbuffered = [c for c in cases if isinstance(c, _Recv) and c.chan.capacity == 0]
    with hub.cond:
        for case in unbuffered:
            case.chan.waiting += 1
        try:
            while True:
                hub.check()
                now = time.monotonic()
                ready: list[_Case] = [c for c in unbuffered if c.chan.items]  # handed to us while we waited
                ready = ready or [c for c in cases if _ready(c, now)]
                if ready:
                    chosen = random.choice(ready)
                    _fire(chosen, now)
                    hub.cond.notify_all()
                    return chosen
                wakes = [at for c in cases if isinstance(c, _Ticker | _After) and (at := c.wake_at()) is not None]
                if deadline is not None:
                    if now >= deadline:
                        return None
                    wakes.append(deadline)
                hub.cond.wait(max(0.0, min(wakes) - now) if wakes else None)
        finally:
            for case in unbuffered:
                case.chan.waiting -= 1


def _send(hub: _Hub, chan: _Chan[_T], value: _T) -> None:
    """A plain Go send ``chan <- value`` (blocks while the channel is full)."""
    _select(hub, [_Send(chan, value)])


def _close(hub: _Hub, chan: _Chan[Any]) -> None:
    with hub.cond:
        chan.closed = True
        hub.cond.notify_all()


def _sleep(hub: _Hub, seconds: float) -> None:
    """time.Sleep (only a kill cuts it short)."""
    _select(hub, [_After(seconds)])


class _Gated:
    """A boto3 client whose every call first checks that the client was not killed: after kill() no request
    of any kind leaves (one already sent when kill() began is answered, as a request on the wire at SIGKILL)."""

    def __init__(self, client: Any, hub: _Hub) -> None:
        self._client = client
        self._hub = hub

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)

        def call(**params: Any) -> Any:
            self._hub.check()
            return method(**params)

        return call


@attrs.frozen
class _Consumed:
    """kinsumer.go ``consumedRecord``: a record on its way to ``Next()``, with its shard's checkpointer."""

    record: Mapping[str, Any]
    checkpointer: Checkpointer


@attrs.frozen
class _ShardError:
    """kinsumer.go ``shardConsumerError``."""

    shard_id: str
    action: str
    error: BaseException


# ---------------------------------------------------------------------------------------------------------
# The client


class GoClient:
    """One Go kinsumer client (kinsumer.go ``Kinsumer``) on ``stream`` for ``application``, named ``name``.

    :meth:`run` is Go's ``Run()``, :meth:`next` its ``Next()``, :meth:`stop` its ``Stop()``, :meth:`kill`
    a SIGKILL of its process. ``client_id`` is its ID (Go's ``uuid.New().String()``), the key of its row
    in the clients table. The boto3 clients given are used from several threads at once (boto3 clients
    are thread-safe)."""

    def __init__(
        self,
        stream: str,
        application: str,
        name: str,
        *,
        kinesis: KinesisClient,
        dynamodb: DynamoDBClient,
        config: GoConfig = GoConfig(),
    ) -> None:
        if not stream:
            raise GoError("need a kinesis stream name")
        if not application:
            raise GoError("need an application name for the dynamo table names")
        config.validate()
        self.stream = stream
        self.application = application
        self.name = name
        self.config = config
        self.tables = GoTables.for_application(application)
        self.client_id = str(uuid.uuid4())
        self._hub = _Hub()
        self._db = cast("DynamoDBClient", _Gated(dynamodb, self._hub))
        self._kinesis = cast("KinesisClient", _Gated(kinesis, self._hub))
        self._records: _Chan[_Consumed] = _Chan(config.buffer_size)
        self._output: _Chan[_Consumed] = _Chan(0)
        self._errors: _Chan[GoError] = _Chan(_ERRORS_BUFFER)
        self._shard_errors: _Chan[_ShardError] = _Chan(_ERRORS_BUFFER)
        self._stop_request: _Chan[bool] = _Chan(0)
        self._stop: _Chan[None] = _Chan(0)  # closed to stop the consumers (k.stop)
        self._leader_lost: _Chan[None] | None = None
        self._consumers: list[threading.Thread] = []
        self._leader: threading.Thread | None = None
        self._main: threading.Thread | None = None
        self._threads: list[threading.Thread] = []
        self._runs = 0
        self._panic: str | None = None
        self.shard_ids: list[str] = []  # k.shardIDs: the shard list of the last change
        self.total_clients = 0  # k.totalClients
        self.this_client = 0  # k.thisClient: this client's index among the clients sorted by ID
        self.is_leader = False
        self.failures: list[BaseException] = []  # what ended a thread unexpectedly (a bug of the emulation)

    # -- the application's calls ------------------------------------------------------------------------

    def create_required_tables(self) -> None:
        """kinsumer.go ``CreateRequiredTables`` (:func:`create_required_tables`)."""
        create_required_tables(self._db, self.application, self.config)

    def delete_tables(self) -> None:
        """kinsumer.go ``DeleteTables`` (:func:`delete_tables`)."""
        delete_tables(self._db, self.application, self.config)

    def run(self) -> None:
        """kinsumer.go ``Run``: the checkpoints and clients tables ACTIVE or UPDATING, the stream ready, a
        first ``refreshShards`` (on failure: the client row deleted, :class:`GoError`), then the main loop on
        a thread of its own. Returns at once."""
        for table in (self.tables.checkpoints, self.tables.clients):
            try:
                status = self._db.describe_table(TableName=table)["Table"].get("TableStatus")
            except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
                raise GoError(f"error describing table {table}: {exc}", exc) from exc
            if status not in ("ACTIVE", "UPDATING"):
                raise GoError(f"table {table} exists but state '{status}' is not 'ACTIVE' or 'UPDATING'")
        self._stream_ready()
        if self._runs:
            raise GoError(_ERR_RUN_TWICE)
        self._runs = 1
        try:
            self._refresh_shards()
        except _Killed:
            raise GoKilled("killed") from None
        except Exception as exc:
            try:
                deregister_client(self._db, self.tables.clients, self.client_id)
            except Exception as dereg:
                raise GoError(
                    f"error in kinsumer Run initial refreshShards: ({exc}); error deregistering from clients "
                    f"table: ({dereg})", exc,
                ) from exc  # fmt: skip
            raise GoError(f"error in kinsumer Run initial refreshShards: {exc}", exc) from exc
        self._main = self._go("main", self._main_loop)

    def next(self, timeout: float) -> bytes | None:
        """kinsumer.go ``Next``: the next record's data (its checkpointer was updated with its sequence
        number when the main loop handed it over); None once the client has stopped (Go's nil, nil).
        Raises :class:`GoError` for an error of the client's (Go's non-nil err), TimeoutError if neither
        comes within ``timeout`` seconds, :class:`GoKilled` once killed."""
        errors, output = _Recv(self._errors), _Recv(self._output)
        try:
            fired = _select(self._hub, [errors, output], deadline=time.monotonic() + timeout)
        except _Killed:
            raise self._gone() from None
        if fired is None:
            raise TimeoutError(f"no record nor error from the Go client within {timeout:g} s")
        if fired is errors:
            raise cast("GoError", errors.value)
        if not output.ok:
            return None
        return bytes(cast("_Consumed", output.value).record["Data"])

    def stop(self, timeout: float | None = None) -> None:
        """kinsumer.go ``Stop``: the main loop is asked to stop (an unbuffered send) and waited for: the
        consumers stop and release their shards, ``Next`` returns None, the client row is deleted, the
        leadership (if any) is deregistered. Raises TimeoutError after ``timeout`` (the client is then
        still stopping: :meth:`kill` it), RuntimeError if it is not running (Go would block forever)."""
        main = self._main
        if main is None or not main.is_alive():
            if self._hub.killed:
                raise self._gone()
            raise RuntimeError("the Go client is not running")
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            if _select(self._hub, [_Send(self._stop_request, True)], deadline=deadline) is None:
                raise TimeoutError(f"the Go client's main loop did not take the stop request within {timeout:g} s")
        except _Killed:
            raise self._gone() from None
        main.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if main.is_alive():
            raise TimeoutError(f"the Go client did not stop within {timeout:g} s")
        if self._panic is not None:
            raise self._gone()

    def kill(self, timeout: float = 30.0) -> None:
        """As SIGKILL to the Go process: every thread stops where it is, with no deferred code (no release,
        no deregistration) and no further request; returns once all have ended."""
        with self._hub.cond:
            self._hub.killed = True
            self._hub.cond.notify_all()
        end = time.monotonic() + timeout
        for thread in list(self._threads):
            if thread is not threading.current_thread():
                thread.join(max(0.0, end - time.monotonic()))
        alive = [t.name for t in self._threads if t.is_alive() and t is not threading.current_thread()]
        if alive:
            raise TimeoutError(f"threads of the killed Go client still running: {alive}")

    @property
    def killed(self) -> bool:
        return self._hub.killed

    @property
    def panic(self) -> str | None:
        """Why the emulated process panicked (then it is killed), or None."""
        return self._panic

    @property
    def running_threads(self) -> list[str]:
        """The names of the client's threads still running (main, leader, consume-<shard>)."""
        return [t.name for t in self._threads if t.is_alive()]

    # -- threads ------------------------------------------------------------------------------------------

    def _go(self, name: str, target: Callable[..., None], *args: Any) -> threading.Thread:
        """``go target(args)``: a daemon thread; a kill ends it quietly, a panic kills the whole client."""

        def body() -> None:
            try:
                target(*args)
            except _Killed:
                pass
            except _Panicked as exc:
                self._crash(f"panic: {exc}")
            except BaseException as exc:
                self.failures.append(exc)
                self._crash(f"unexpected {type(exc).__name__} in {name}: {exc}")

        thread = threading.Thread(target=body, name=f"go-kinsumer-{self.client_id[:8]}-{name}", daemon=True)
        self._threads.append(thread)
        thread.start()
        return thread

    def _crash(self, why: str) -> None:
        """An unrecovered panic: the process dies at once."""
        with self._hub.cond:
            if self._panic is None:
                self._panic = why
            self._hub.killed = True
            self._hub.cond.notify_all()

    def _gone(self) -> GoKilled:
        return GoPanic(self._panic) if self._panic is not None else GoKilled("the Go client was killed")

    def _error(self, message: str, cause: BaseException | None = None) -> None:
        """``k.errors <- fmt.Errorf(...)``: blocks while 10 errors wait for ``Next``."""
        _send(self._hub, self._errors, GoError(message, cause))

    def _stream_ready(self) -> None:
        """kinsumer.go ``kinesisStreamReady``: DescribeStream is ACTIVE or UPDATING (or ListShards succeeds,
        with ``use_list_shards_for_stream_ready``)."""
        try:
            if self.config.use_list_shards_for_stream_ready:
                self._kinesis.list_shards(StreamName=self.stream)
                return
            status = self._kinesis.describe_stream(StreamName=self.stream)["StreamDescription"]["StreamStatus"]
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            what = "listing shards for" if self.config.use_list_shards_for_stream_ready else "describing"
            raise GoError(f"error {what} stream {self.stream}: {exc}", exc) from exc
        if status not in ("ACTIVE", "UPDATING"):
            raise GoError(f"stream {self.stream} exists but state '{status}' is not 'ACTIVE' or 'UPDATING'")

    # -- kinsumer.go: the main loop --------------------------------------------------------------------------

    def _refresh_shards(self) -> bool:
        """kinsumer.go ``refreshShards``: register, read the live clients (sorted by ID), become or stop being
        the leader (index 0), the shard list from the cache (from ListShards, and cached, if empty);
        whether the shards or this client's place changed."""
        register_client(self._db, self.tables.clients, self.client_id, self.name)
        clients = get_clients(self._db, self.tables.clients, self.config.max_age_for_client_record_ns)
        index = next((i for i, c in enumerate(clients) if c.id == self.client_id), None)
        if index is None:
            raise GoError(_ERR_NOT_IN_DYNAMO)
        if index == 0 and not self.is_leader:
            self._become_leader()
        elif index != 0 and self.is_leader:
            self._unbecome_leader()
        shard_ids = load_shard_ids_from_dynamo(self._db, self.tables.metadata)
        if not shard_ids:
            shard_ids = load_shard_ids_from_kinesis(self._kinesis, self.stream)
            self._set_cached_shard_ids(shard_ids)
        changed = len(clients) != self.total_clients or index != self.this_client or shard_ids != self.shard_ids
        if changed:
            self.shard_ids = shard_ids
        self.this_client = index
        self.total_clients = len(clients)
        return changed

    def _set_cached_shard_ids(self, shard_ids: Sequence[str]) -> None:
        try:
            set_cached_shard_ids(self._db, self.tables.metadata, shard_ids)
        except Exception as exc:
            raise GoError(f"error updating shard cache: {exc}", exc) from exc

    def _start_consumers(self) -> None:
        """kinsumer.go ``startConsumers``: a new stop channel; a consumer thread for each shard ``i`` of the
        list with ``i % totalClients == thisClient``."""
        self._stop = _Chan(0)
        self._consumers = []
        if self.this_client >= len(self.shard_ids):
            return
        for i, shard_id in enumerate(self.shard_ids):
            if i % self.total_clients == self.this_client:
                self._consumers.append(self._go(f"consume-{shard_id}", self._consume, shard_id, self._stop))
        if self.shard_ids and not self._consumers:
            raise GoError(_ERR_NO_SHARDS_ASSIGNED)

    def _stop_consumers(self) -> None:
        """kinsumer.go ``stopConsumers``: close the stop channel, wait for every consumer (each releases its
        shard), drop the records left in the channel."""
        _close(self._hub, self._stop)
        for consumer in self._consumers:
            consumer.join()
        self._hub.check()
        with self._hub.cond:
            self._records.items.clear()
            self._hub.cond.notify_all()

    def _main_loop(self) -> None:
        """The goroutine of kinsumer.go ``Run``: one record at a time from the consumers to ``Next`` (the
        checkpointer updated when it is handed over), shard errors to ``errors``, ``refreshShards`` every
        shardCheckFrequency (consumers restarted on a change, the record held dropped); on the stop request,
        its deferred calls in Go's order."""
        ticker = _Ticker(self.config.shard_check_frequency)
        record: _Consumed | None = None
        try:
            self._start_consumers()
        except GoError as exc:
            self._error(f"error starting consumers: {exc}", exc)
        while True:
            stop, shard_error = _Recv(self._stop_request), _Recv(self._shard_errors)
            handoff: _Recv | _Send = _Send(self._output, record) if record is not None else _Recv(self._records)
            fired = _select(self._hub, [stop, handoff, shard_error, ticker])
            if fired is stop:
                break
            if fired is handoff:
                if isinstance(handoff, _Recv):
                    record = cast("_Consumed", handoff.value)
                else:
                    assert record is not None
                    record.checkpointer.update(str(record.record["SequenceNumber"]))
                    record = None
            elif fired is shard_error:
                se = cast("_ShardError", shard_error.value)
                self._error(f"shard error ({se.shard_id}) in {se.action}: {se.error}", se.error)
            else:
                try:
                    changed = self._refresh_shards()
                except Exception as exc:
                    self._error(f"error refreshing shards: {exc}", exc)
                    continue
                if changed:
                    ticker.stopped = True
                    self._stop_consumers()
                    record = None
                    try:
                        self._start_consumers()
                    except GoError as exc:
                        self._error(f"error restarting consumers: {exc}", exc)
                    ticker = _Ticker(self.config.shard_check_frequency)
        # Run's deferred calls, last registered first
        self._stop_consumers()
        ticker.stopped = True
        _close(self._hub, self._output)
        try:
            deregister_client(self._db, self.tables.clients, self.client_id)
        except Exception as exc:
            self._error(f"error deregistering client: {exc}", exc)
        self._unbecome_leader()
        if self._leader is not None:
            self._leader.join()
            self._hub.check()

    # -- leader.go --------------------------------------------------------------------------------------------

    def _become_leader(self) -> None:
        """leader.go ``becomeLeader``: the leader thread, stopped by closing ``leaderLost``."""
        if self.is_leader:
            return
        self._leader_lost = _Chan(0)
        self._leader = self._go("leader", self._leader_loop, self._leader_lost)
        self.is_leader = True

    def _unbecome_leader(self) -> None:
        """leader.go ``unbecomeLeader``: close ``leaderLost`` and wait for the leader thread (which then
        deregisters the leadership)."""
        if not self.is_leader:
            return
        if self._leader_lost is not None:
            _close(self._hub, self._leader_lost)
            if self._leader is not None:
                self._leader.join()
                self._hub.check()
            self._leader_lost = None
        self.is_leader = False

    def _register_leadership(self) -> bool:
        return register_leadership(
            self._db, self.tables.metadata, self.client_id, self.name, self.config.max_age_for_leader_record_ns
        )

    def _leader_loop(self, lost: _Chan[None]) -> None:
        """The goroutine of leader.go ``becomeLeader``: register the leadership and, if held, perform the
        leader actions, at once and every leaderActionFrequency; deregister when leadership is lost."""
        ticker = _Ticker(self.config.leader_action_frequency)
        try:
            held = self._register_leadership()
        except Exception as exc:
            held = False
            self._error(f"error registering initial leadership: {exc}", exc)
        if held:
            try:
                self._perform_leader_actions()
            except GoError as exc:
                self._error(f"error performing initial leader actions: {exc}", exc)
        while True:
            done = _Recv(lost)
            if _select(self._hub, [ticker, done]) is done:
                break
            try:
                held = self._register_leadership()
            except Exception as exc:
                held = False
                self._error(f"error registering leadership: {exc}", exc)
            if not held:
                continue
            try:
                self._perform_leader_actions()
            except GoError as exc:
                self._error(f"error performing repeated leader actions: {exc}", exc)
        ticker.stopped = True
        try:
            deregister_leadership(self._db, self.tables.metadata, self.client_id)
        except Exception as exc:
            self._error(f"error deregistering leadership: {exc}", exc)

    def _perform_leader_actions(self) -> None:
        """leader.go ``performLeaderActions``: unless the shard cache is younger than leaderActionFrequency,
        ListShards, a Scan of the checkpoints, the cache rewritten if :func:`diff_shard_ids` changed it, and
        the clients older than 48 h reaped. Raises :class:`GoError` with Go's messages."""
        try:
            cache = load_shard_cache(self._db, self.tables.metadata)
        except Exception as exc:
            raise GoError(f"error loading shard cache from dynamo: {exc}", exc) from exc
        if cache is None:  # Go dereferences the nil record: a runtime panic
            raise _Panicked("runtime error: invalid memory address or nil pointer dereference")
        if _now_ns() - cache.last_update < _ns(self.config.leader_action_frequency):
            return
        try:
            current = load_shard_ids_from_kinesis(self._kinesis, self.stream)
        except Exception as exc:
            raise GoError(f"error loading shard IDs from kinesis: {exc}", exc) from exc
        try:
            checkpoints = load_checkpoints(self._db, self.tables.checkpoints)
        except Exception as exc:
            raise GoError(f"error loading shard IDs from dynamo: {exc}", exc) from exc
        updated, changed = diff_shard_ids(current, cache.shard_ids, checkpoints)
        if changed:
            try:
                self._set_cached_shard_ids(updated)
            except GoError as exc:
                raise GoError(f"error caching shard IDs to dynamo: {exc}", exc) from exc
        try:
            reap_clients(self._db, self.tables.clients)
        except Exception as exc:
            raise GoError(f"error reaping old clients: {exc}", exc) from exc

    # -- shard_consumer.go --------------------------------------------------------------------------------

    def _capture_shard(self, shard_id: str, stop: _Chan[None]) -> Checkpointer | None:
        """shard_consumer.go ``captureShard``: :func:`capture` until it succeeds, throttleDelay apart; None
        if stopped meanwhile."""
        while True:
            checkpointer = capture(
                self._db, self.tables.checkpoints, shard_id, self.name, self.client_id,
                self.config.max_age_for_client_record_ns,
            )  # fmt: skip
            if checkpointer is not None:
                return checkpointer
            stopped = _Recv(stop)
            if _select(self._hub, [stopped, _After(self.config.throttle_delay)]) is stopped:
                return None

    def _consume(self, shard_id: str, stop: _Chan[None]) -> None:
        """shard_consumer.go ``consume``: capture the shard, read it (:meth:`_read`), then release it."""
        commit_ticker = _Ticker(self.config.commit_frequency)
        try:
            checkpointer = self._capture_shard(shard_id, stop)
        except Exception as exc:
            _send(self._hub, self._shard_errors, _ShardError(shard_id, "captureShard", exc))
            return
        if checkpointer is None:
            return
        self._read(shard_id, checkpointer, stop, commit_ticker)
        try:  # Go's deferred release
            checkpointer.release()
        except Exception as exc:
            _send(self._hub, self._shard_errors, _ShardError(shard_id, "checkpointer.release", exc))
        commit_ticker.stopped = True

    def _commit(self, shard_id: str, checkpointer: Checkpointer) -> bool:
        """A tick of the commit ticker: True if the consumer must return (Finished written, or an error)."""
        try:
            return checkpointer.commit()
        except Exception as exc:
            _send(self._hub, self._shard_errors, _ShardError(shard_id, "checkpointer.commit", exc))
            return True

    def _read(self, shard_id: str, checkpointer: Checkpointer, stop: _Chan[None], commit_ticker: _Ticker) -> None:
        """The body of shard_consumer.go ``consume`` after the capture: GetRecords throttleDelay apart (the
        first at once), each record onto the records channel, a commit every commitFrequency; at the shard's
        end (no next iterator) ``finish`` with the last sequence number read, then only commits until
        Finished is written."""
        try:
            iterator = get_shard_iterator(self._kinesis, self.stream, shard_id, checkpointer.sequence_number)
        except Exception as exc:
            _send(self._hub, self._shard_errors, _ShardError(shard_id, "getShardIterator", exc))
            return
        throttle = _After(0)
        retries = 0
        last_sequence_number = ""
        finished = False
        while True:
            if iterator == "" and not finished:
                checkpointer.finish(last_sequence_number)
                finished = True
            stopped = _Recv(stop)
            fired = _select(self._hub, [stopped, commit_ticker, throttle])
            if fired is stopped:
                return
            if fired is commit_ticker:
                if self._commit(shard_id, checkpointer):
                    return
                continue
            throttle = _After(self.config.throttle_delay)
            if finished:
                continue
            try:
                records, following = get_records(self._kinesis, iterator)
            except Exception as exc:
                code = _error_code(exc)
                if code is not None and code in _RETRIED_CODES and retries < _MAX_ERROR_RETRIES:
                    retries += 1
                    _sleep(self._hub, _ERROR_SLEEP * retries)
                    continue
                _send(self._hub, self._shard_errors, _ShardError(shard_id, "getRecords", exc))
                return
            retries = 0
            for record in records:
                while True:
                    stopped = _Recv(stop)
                    offer = _Send(self._records, _Consumed(record, checkpointer))
                    fired = _select(self._hub, [commit_ticker, stopped, offer])
                    if fired is offer:
                        break
                    if fired is stopped or self._commit(shard_id, checkpointer):
                        return
            if records:
                last_sequence_number = str(records[-1]["SequenceNumber"])
            iterator = following
