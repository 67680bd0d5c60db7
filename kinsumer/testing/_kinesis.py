"""LocalKinesis: an in-memory Kinesis that acts as a boto3 Kinesis client, for every call a polling Kinsumer makes.

The client's surface (boto3's names and parameters): CreateStream, DeleteStream, DescribeStreamSummary,
ListShards (pages, ``NextToken``, ``ExclusiveStartShardId``), GetShardIterator (``TRIM_HORIZON``, ``LATEST``,
``AT_SEQUENCE_NUMBER``, ``AFTER_SEQUENCE_NUMBER``, ``AT_TIMESTAMP``), GetRecords (``NextShardIterator`` absent at
the end of a closed shard, with its ``ChildShards``; ``MillisBehindLatest``; iterators expire after 5 minutes of
the clock), PutRecord, PutRecords, SplitShard, MergeShards. Streams are named by ``StreamName`` or
``StreamARN``. Errors are botocore's ``ClientError`` subclasses, with the service's codes
(``ResourceNotFoundException``, ``InvalidArgumentException``, ``ExpiredIteratorException``...). The model of a
stream (routing, sequence numbers, resharding) is :mod:`._stream`'s.

kinsumer reads it through boto3's ``get_records`` call: its own HTTP path for GetRecords
(:mod:`kinsumer.aws.lean_get_records`) is taken only for a botocore client that signs its requests, which this
is not.
"""

from __future__ import annotations

import base64
import datetime as dt
import email.utils
import time
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from ..reading.kpl import hash_of
from ._client import ServiceClient
from ._errors import SimError
from ._stream import HASH_SPACE, Shard, StoredRecord, Stream, invalid

__all__ = ["ITERATOR_LIFETIME", "LocalKinesis", "Put"]

#: How long a shard iterator lasts (seconds of the clock), as on Kinesis.
ITERATOR_LIFETIME = 300.0
_MAX_LIMIT = 10_000
_MAX_PUT_RECORDS = 500
_MAX_RECORD_BYTES = 1024 * 1024
_LIST_PAGE = 1000
_STREAM = {"StreamName", "StreamARN"}
_SUPPORTED: dict[str, set[str]] = {
    "CreateStream": {"StreamName", "ShardCount", "StreamModeDetails", "Tags"},
    "DeleteStream": {*_STREAM, "EnforceConsumerDeletion"},
    "DescribeStreamSummary": _STREAM,
    "ListShards": {*_STREAM, "NextToken", "MaxResults", "ExclusiveStartShardId"},
    "GetShardIterator": {*_STREAM, "ShardId", "ShardIteratorType", "StartingSequenceNumber", "Timestamp"},
    "GetRecords": {"ShardIterator", "Limit", "StreamARN"},
    "PutRecord": {*_STREAM, "Data", "PartitionKey", "ExplicitHashKey", "SequenceNumberForOrdering"},
    "PutRecords": {*_STREAM, "Records"},
    "SplitShard": {*_STREAM, "ShardToSplit", "NewStartingHashKey"},
    "MergeShards": {*_STREAM, "ShardToMerge", "AdjacentShardToMerge"},
}


@attrs.frozen
class Put:
    """Where a record went: its shard and its sequence number."""

    shard_id: str
    sequence_number: str


class LocalKinesis(ServiceClient):
    """Kinesis in memory (see the module's description). Thread-safe: each call is handled whole, under a lock.

    ``clock``: epoch seconds (arrival timestamps, ``LATEST``, ``AT_TIMESTAMP``, iterator expiry); the wall clock
    by default. Besides boto3's calls, a few of its own for tests: :meth:`add_stream`, :meth:`put`,
    :meth:`put_aggregated`, :meth:`split`, :meth:`merge`, :meth:`open_shards`, :meth:`shard_of`, :meth:`records`.
    """

    SERVICE = "kinesis"
    SUPPORTED = _SUPPORTED

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        region: str = "us-east-1",
        account: str = "123456789012",
        validate: bool = True,
    ) -> None:
        super().__init__(region=region, account=account, validate=validate)
        self._clock = clock
        self._streams: dict[str, Stream] = {}

    # ----------------------------------------------------------------- boto3's calls

    def create_stream(self, **params: Any) -> dict[str, Any]:
        return self._call("CreateStream", params, self._create_stream)

    def delete_stream(self, **params: Any) -> dict[str, Any]:
        return self._call("DeleteStream", params, self._delete_stream)

    def describe_stream_summary(self, **params: Any) -> dict[str, Any]:
        return self._call("DescribeStreamSummary", params, self._describe_stream_summary)

    def list_shards(self, **params: Any) -> dict[str, Any]:
        return self._call("ListShards", params, self._list_shards)

    def get_shard_iterator(self, **params: Any) -> dict[str, Any]:
        return self._call("GetShardIterator", params, self._get_shard_iterator)

    def get_records(self, **params: Any) -> dict[str, Any]:
        return self._call("GetRecords", params, self._get_records)

    def put_record(self, **params: Any) -> dict[str, Any]:
        return self._call("PutRecord", params, self._put_record)

    def put_records(self, **params: Any) -> dict[str, Any]:
        return self._call("PutRecords", params, self._put_records)

    def split_shard(self, **params: Any) -> dict[str, Any]:
        return self._call("SplitShard", params, self._split_shard)

    def merge_shards(self, **params: Any) -> dict[str, Any]:
        return self._call("MergeShards", params, self._merge_shards)

    # ----------------------------------------------------------------- the kit's own calls

    def add_stream(self, name: str, shards: int = 1) -> str:
        """Create stream ``name`` of ``shards`` shards (each an equal part of the hash key space); its ARN."""
        if not isinstance(shards, int) or shards < 1:
            raise ValueError(f"shards: a stream has at least 1 shard, not {shards!r}")
        self.create_stream(StreamName=name, ShardCount=shards)
        return self._arn(name)

    def put(self, stream: str, data: bytes | str, partition_key: str, explicit_hash_key: str | None = None) -> Put:
        """PutRecord: ``data`` (str: its UTF-8) with ``partition_key``; where it went."""
        extra = {} if explicit_hash_key is None else {"ExplicitHashKey": explicit_hash_key}
        answer = self.put_record(StreamName=stream, Data=_bytes(data), PartitionKey=partition_key, **extra)
        return Put(answer["ShardId"], answer["SequenceNumber"])

    def put_aggregated(
        self, stream: str, records: Iterable[tuple[bytes | str, str]], max_records: int | None = None
    ) -> int:
        """Write (data, partition key) user records as KPL aggregates, as the KPL does: each user record in an
        aggregate of its shard (:class:`kinsumer.writing.writer.RecordWriter`), ``max_records`` user records an
        aggregate at most (None: as many as 50 KB holds). The number of Kinesis records written."""
        from ..writing.writer import RecordWriter  # noqa: PLC0415 - the writer is needed only here

        writer = RecordWriter(self, stream, aggregate=True, aggregate_records=max_records)  # type: ignore[arg-type]
        writer.put_all((_bytes(data), key, None) for data, key in records)
        writer.flush()
        return writer.entries

    def split(self, stream: str, shard_id: str, at: int | None = None) -> tuple[str, str]:
        """SplitShard at hash key ``at`` (None: the middle of the shard's range); the two children (low, high)."""
        with self._lock:
            shard = self._stream({"StreamName": stream}).shard(shard_id, self._account)
            at = (shard.start_hash + shard.end_hash + 1) // 2 if at is None else at
            self.split_shard(StreamName=stream, ShardToSplit=shard_id, NewStartingHashKey=str(at))
            low, high = (s.shard_id for s in self._streams[stream].children(shard))  # made in this order
        return low, high

    def merge(self, stream: str, shard_id: str, adjacent_shard_id: str) -> str:
        """MergeShards of two adjacent open shards; the child."""
        with self._lock:
            self.merge_shards(StreamName=stream, ShardToMerge=shard_id, AdjacentShardToMerge=adjacent_shard_id)
            state = self._streams[stream]
            return next(s.shard_id for s in state.shards.values() if s.parent == shard_id)

    def open_shards(self, stream: str) -> list[str]:
        """The IDs of the stream's open shards, by hash key range."""
        with self._lock:
            return [s.shard_id for s in self._stream({"StreamName": stream}).open_shards()]

    def shard_of(self, stream: str, partition_key: str, explicit_hash_key: str | None = None) -> str:
        """The open shard a record with this key goes to now."""
        with self._lock:
            return self._stream({"StreamName": stream}).shard_for(hash_of(partition_key, explicit_hash_key)).shard_id

    def records(self, stream: str, shard_id: str | None = None) -> list[StoredRecord]:
        """The records stored in ``shard_id`` (None: every shard, shard after shard, in the order they were made)."""
        with self._lock:
            state = self._stream({"StreamName": stream})
            shards = [state.shard(shard_id, self._account)] if shard_id else list(state.shards.values())
            return [r for s in shards for r in s.records]

    # ----------------------------------------------------------------- streams

    def _arn(self, name: str) -> str:
        return f"arn:aws:kinesis:{self._region}:{self._account}:stream/{name}"

    def _stream(self, params: dict[str, Any]) -> Stream:
        if "StreamARN" in params and "StreamName" in params:
            raise invalid("StreamName and StreamARN cannot both be given")
        arn = params.get("StreamARN")
        name = params.get("StreamName") or (str(arn).rpartition("/")[2] if arn else None)
        if name is None:
            raise invalid("Either StreamName or StreamARN must be given")
        stream = self._streams.get(name)
        if stream is None or (arn is not None and arn != stream.arn):
            raise SimError("ResourceNotFoundException",
                           f"Stream {name} under account {self._account} not found.")  # fmt: skip
        return stream

    def _create_stream(self, params: dict[str, Any]) -> dict[str, Any]:
        name, count = params["StreamName"], params.get("ShardCount")
        mode = params.get("StreamModeDetails", {}).get("StreamMode", "PROVISIONED")
        if count is None:
            if mode != "ON_DEMAND":
                raise invalid("ShardCount is required for a PROVISIONED stream")
            count = 4  # an on-demand stream starts with 4 shards
        if count < 1:
            raise invalid(f"ShardCount must be at least 1, not {count}")
        if name in self._streams:
            raise SimError("ResourceInUseException", f"Stream {name} under account {self._account} already exists.")
        self._streams[name] = Stream(name, self._arn(name), count, self._clock())
        return {}

    def _delete_stream(self, params: dict[str, Any]) -> dict[str, Any]:
        del self._streams[self._stream(params).name]
        return {}

    def _describe_stream_summary(self, params: dict[str, Any]) -> dict[str, Any]:
        stream = self._stream(params)
        return {
            "StreamDescriptionSummary": {
                "StreamName": stream.name, "StreamARN": stream.arn, "StreamStatus": "ACTIVE",
                "StreamModeDetails": {"StreamMode": "PROVISIONED"}, "RetentionPeriodHours": 24,
                "StreamCreationTimestamp": stream.created, "EnhancedMonitoring": [{"ShardLevelMetrics": []}],
                "EncryptionType": "NONE", "OpenShardCount": len(stream.open_shards()), "ConsumerCount": 0,
            }
        }  # fmt: skip

    def _list_shards(self, params: dict[str, Any]) -> dict[str, Any]:
        token = params.get("NextToken")
        if token is not None:
            if set(params) & _STREAM:
                raise invalid("NextToken and StreamName cannot be provided together.")
            name, _, start_text = _decode(token, "NextToken").rpartition("|")
            stream, start = self._stream({"StreamName": name}), int(start_text)
        else:
            stream, start = self._stream(params), 0
        shards = list(stream.shards.values())
        if "ExclusiveStartShardId" in params:
            ids = [s.shard_id for s in shards]
            after = params["ExclusiveStartShardId"]
            start = next((i + 1 for i, shard_id in enumerate(ids) if shard_id == after), len(ids))
        size = min(int(params.get("MaxResults", _LIST_PAGE)), _LIST_PAGE)
        answer: dict[str, Any] = {"Shards": [s.to_api() for s in shards[start : start + size]]}
        if start + size < len(shards):
            answer["NextToken"] = _encode(f"{stream.name}|{start + size}")
        return answer

    # ----------------------------------------------------------------- reading

    def _get_shard_iterator(self, params: dict[str, Any]) -> dict[str, Any]:
        stream = self._stream(params)
        shard = stream.shard(params["ShardId"], self._account)
        kind = params["ShardIteratorType"]
        number = params.get("StartingSequenceNumber")
        if kind in ("AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER"):
            if number is None:
                raise invalid(f"StartingSequenceNumber is required for ShardIteratorType {kind}")
            number = self._sequence_number(number, shard, stream)
            index = shard.index_at(number, after=kind == "AFTER_SEQUENCE_NUMBER")
        elif kind == "AT_TIMESTAMP":
            if "Timestamp" not in params:
                raise invalid("Timestamp is required for ShardIteratorType AT_TIMESTAMP")
            index = shard.index_at_time(_epoch(params["Timestamp"]))
        elif kind == "TRIM_HORIZON":
            index = 0
        elif kind == "LATEST":
            index = len(shard.records)
        else:
            raise SimError("ValidationException", f"Value '{kind}' at 'shardIteratorType' failed to satisfy "
                           "constraint: Member must satisfy enum value set: [AFTER_SEQUENCE_NUMBER, "
                           "AT_SEQUENCE_NUMBER, AT_TIMESTAMP, TRIM_HORIZON, LATEST]")  # fmt: skip
        now = self._clock()
        return {"ShardIterator": self._iterator(stream, shard, index, now),
                "ResponseMetadata": {"HTTPHeaders": {"date": email.utils.formatdate(now, usegmt=True)}}}  # fmt: skip

    def _sequence_number(self, text: str, shard: Shard, stream: Stream) -> int:
        if not text.isdigit():
            raise invalid(f"StartingSequenceNumber {text} is not a sequence number")
        number = int(text)
        if number < shard.starting_sequence or (shard.ending_sequence is not None and number > shard.ending_sequence):
            raise invalid(f"StartingSequenceNumber {text} used in GetShardIterator on shard {shard.shard_id} in "
                          f"stream {stream.name} under account {self._account} is invalid because it did not come "
                          "from this stream.")  # fmt: skip
        return number

    def _iterator(self, stream: Stream, shard: Shard, index: int, now: float) -> str:
        return _encode(f"{stream.name}|{shard.shard_id}|{index}|{now!r}")

    def _get_records(self, params: dict[str, Any]) -> dict[str, Any]:
        text = _decode(params["ShardIterator"], "ShardIterator")
        try:
            name, shard_id, index_text, issued_text = text.split("|")
            index, issued = int(index_text), float(issued_text)
        except ValueError:
            raise invalid(f"Invalid ShardIterator: {params['ShardIterator']}") from None
        limit = params.get("Limit", _MAX_LIMIT)
        if not 1 <= limit <= _MAX_LIMIT:
            raise invalid(f"Limit must be within 1..{_MAX_LIMIT}, not {limit}")
        stream = self._stream({"StreamName": name})
        shard = stream.shard(shard_id, self._account)
        now = self._clock()
        if now - issued > ITERATOR_LIFETIME:
            raise SimError("ExpiredIteratorException", f"Iterator expired. The iterator was created at time "
                           f"{_iso(issued)} while right now it is {_iso(now)} which is further in the future than "
                           f"the tolerated delay of {int(ITERATOR_LIFETIME * 1000)} milliseconds.")  # fmt: skip
        page = shard.records[index : index + limit]
        end = index + len(page)
        behind = 0 if end >= len(shard.records) else max(0, int((now - page[-1].arrival) * 1000))
        answer: dict[str, Any] = {"Records": [r.to_api() for r in page], "MillisBehindLatest": behind}
        if not shard.is_open and end >= len(shard.records):
            answer["ChildShards"] = [
                {"ShardId": c.shard_id, "ParentShards": list(c.parents), "HashKeyRange": c.hash_range()}
                for c in stream.children(shard)
            ]
        else:
            answer["NextShardIterator"] = self._iterator(stream, shard, end, now)
        return answer

    # ----------------------------------------------------------------- writing

    def _entry(self, stream: Stream, entry: dict[str, Any]) -> tuple[bytes, str, str | None, Shard]:
        data, key, explicit = _bytes(entry["Data"]), entry["PartitionKey"], entry.get("ExplicitHashKey")
        if not 1 <= len(key) <= 256:
            raise SimError("ValidationException", "1 validation error detected: Value at 'partitionKey' failed to "
                           "satisfy constraint: Member must have length between 1 and 256")  # fmt: skip
        if len(data) + len(key.encode()) > _MAX_RECORD_BYTES:
            raise SimError("ValidationException", "1 validation error detected: Value at 'data' failed to satisfy "
                           "constraint: the data and the partition key must hold at most "
                           f"{_MAX_RECORD_BYTES} bytes")  # fmt: skip
        if explicit is not None and not (explicit.isdigit() and int(explicit) < HASH_SPACE):
            raise invalid(f"ExplicitHashKey {explicit} must be an integer within 0..2^128-1")
        return data, key, explicit, stream.shard_for(hash_of(key, explicit))

    def _put_record(self, params: dict[str, Any]) -> dict[str, Any]:
        stream = self._stream(params)
        data, key, explicit, shard = self._entry(stream, params)
        record = stream.append(shard, data, key, explicit, self._clock())
        return {"ShardId": shard.shard_id, "SequenceNumber": record.sequence_number, "EncryptionType": "NONE"}

    def _put_records(self, params: dict[str, Any]) -> dict[str, Any]:
        stream = self._stream(params)
        entries = params["Records"]
        if not 1 <= len(entries) <= _MAX_PUT_RECORDS:
            raise SimError("ValidationException", "1 validation error detected: Value at 'records' failed to satisfy "
                           f"constraint: Member must have length between 1 and {_MAX_PUT_RECORDS}")  # fmt: skip
        checked = [self._entry(stream, entry) for entry in entries]  # all checked before any is stored
        now, results = self._clock(), []
        for data, key, explicit, shard in checked:
            record = stream.append(shard, data, key, explicit, now)
            results.append({"SequenceNumber": record.sequence_number, "ShardId": shard.shard_id})
        return {"FailedRecordCount": 0, "Records": results, "EncryptionType": "NONE"}

    # ----------------------------------------------------------------- resharding

    def _split_shard(self, params: dict[str, Any]) -> dict[str, Any]:
        stream = self._stream(params)
        text = params["NewStartingHashKey"]
        if not text.isdigit():
            raise invalid(f"NewStartingHashKey {text} must be an integer")
        stream.split(stream.shard(params["ShardToSplit"], self._account), int(text))
        return {}

    def _merge_shards(self, params: dict[str, Any]) -> dict[str, Any]:
        stream = self._stream(params)
        shard = stream.shard(params["ShardToMerge"], self._account)
        stream.merge(shard, stream.shard(params["AdjacentShardToMerge"], self._account))
        return {}


def _bytes(data: bytes | bytearray | str) -> bytes:
    return data.encode() if isinstance(data, str) else bytes(data)


def _encode(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


def _decode(token: str, field: str) -> str:
    try:
        return base64.urlsafe_b64decode(token.encode()).decode()
    except (ValueError, UnicodeDecodeError):
        raise invalid(f"Invalid {field}: {token}") from None


def _epoch(value: Any) -> float:
    if isinstance(value, dt.datetime):
        return (value if value.tzinfo else value.replace(tzinfo=dt.UTC)).timestamp()
    if isinstance(value, int | float):
        return float(value)
    return dt.datetime.fromisoformat(str(value)).timestamp()


def _iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat()
