"""Dead-letter sinks for ``Kinsumer.process()``: an SQS queue, a Kinesis stream, an S3 bucket. Any callable
taking a :class:`~kinsumer.Failure` is a sink too.

Each writes one JSON envelope per failed record (:func:`envelope`)::

    {"version": 1, "application": "billing-app", "client_id": "...", "stream": "clicks",
     "shard_id": "shardId-000000000003", "sequence_number": "4959...", "sub_sequence_number": null,
     "partition_key": "user-17", "explicit_hash_key": null,
     "approximate_arrival_timestamp": "2026-11-25T08:00:00.123000+00:00",
     "data": "<the record's data, base64>", "attempts": 3, "reason": "raised",
     "error": "ValueError: bad payload", "failed_at": "2026-11-25T08:00:04.500000+00:00",
     "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7"}

``version``: the envelope's format, 1. ``trace_id`` and ``span_id``: the OpenTelemetry span of the
last failed handler call, when one was made (:attr:`Failure.trace_id`); null otherwise.

:class:`S3Bucket` puts each envelope in an object of its own, at a key that names the application, the
stream, the shard and the hour it failed (see :mod:`kinsumer.dead_letters.s3`).

A failed record whose envelope is too large for the sink (an SQS message of more than the
queue's ``MaximumMessageSize``, a Kinesis record of more than the stream's maximum record size: 1 MiB
unless raised, up to 10 MiB, read from its description once a failure's envelope is over 1 MiB) raises
:class:`~kinsumer.WriteError` saying so: never a truncated envelope. ``process()`` then tries
again and raises :class:`~kinsumer.RecordFailed`, leaving the record for the next owner. Unless the sink
has a **claim check**, ``claim_check=S3Bucket(...)``: then the whole envelope goes into that bucket and
the sink sends a pointer in its place, the same fields but ``data``, and ``"claim_check": {"bucket": ...,
"key": ...}`` (see :mod:`kinsumer.dead_letters.envelope`); ``kinsumer dead-letters`` follows it.

``process()`` and the other ``*process*()`` calls check a built-in sink when they start (:func:`check`):
a queue, a stream or a bucket (a claim check's too) that does not exist raises
:class:`~kinsumer.ConfigError` naming it, before any record is handled, rather than at the first record
that fails.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import boto3
import botocore.exceptions

from .aws.error_codes import error_code, error_message, is_missing_queue, is_not_found, is_transient
from .aws.kinesis import DEFAULT_MAX_RECORD_BYTES, described_max_record_bytes, max_record_bytes
from .aws.stream_ref import StreamRef, stream_params
from .dead_letters.envelope import (
    VERSION,  # noqa: F401 (kinsumer.dead_letter.VERSION, as before)
    BadEnvelope,
    encode,
    envelope,
)
from .dead_letters.s3 import S3Bucket
from .errors import ConfigError, WriteError
from .failure import Failure

__all__ = ["BadEnvelope", "KinesisStream", "S3Bucket", "SqsQueue", "check", "envelope"]

log = logging.getLogger("kinsumer")


def _body(failure: Failure) -> bytes:
    return encode(envelope(failure))


def _claimed(body: bytes, claim_check: S3Bucket) -> bytes:
    """The pointer to send in place of the envelope ``body``, once it is stored whole in ``claim_check``."""
    return encode(claim_check.claim(json.loads(body)))


def _where(failure: Failure) -> str:
    record = failure.record
    sub = "" if record.sub_sequence_number is None else f":{record.sub_sequence_number}"
    return f"the failed record of {record.shard_id} at {record.sequence_number}{sub}"


class SqsQueue:
    """Sends each failed record's envelope to the SQS queue at ``url`` (``client``: a boto3 SQS client).

    A FIFO queue (its URL ends in ``.fifo``) gets the shard as the message group (so a shard's
    failures stay in order) and the record's position as the deduplication ID (a record sent
    twice, by two owners, arrives once within SQS's five minutes).

    ``claim_check``: an :class:`S3Bucket` that takes the envelopes larger than ``MaximumMessageSize``; the
    message is then a pointer to it (see the module's description).
    """

    def __init__(self, url: str, *, client: Any = None, claim_check: S3Bucket | None = None) -> None:
        self.url = url
        self.claim_check = claim_check
        self._client = client if client is not None else boto3.client("sqs")
        self._fifo = url.endswith(".fifo")
        self._limit: int | None = None  # the queue's MaximumMessageSize, read once
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SqsQueue({self.url!r})"

    def check(self) -> None:
        """Read the queue's attributes, as the first failed record would: :class:`~kinsumer.ConfigError` naming
        the queue if it does not exist or this client may not use it (the sink needs ``sqs:GetQueueAttributes``
        and ``sqs:SendMessage``). A transient fault (throttling, a 5xx, the network) is logged, not raised: the
        sink reads them again when a record fails. ``process()`` calls it when it starts."""
        try:
            self._max_size()
        except botocore.exceptions.ClientError as exc:
            if is_transient(exc):
                _unchecked(self, exc)
                return
            if is_missing_queue(exc):
                rule = (
                    f"names the SQS queue {self.url}, which does not exist ({error_code(exc)}): create it, or give "
                    "SqsQueue the URL of a queue that does (in the region and account of its SQS client)"
                )
            else:
                rule = (
                    f"names the SQS queue {self.url}, which this SQS client cannot use ({error_code(exc)}: "
                    f"{error_message(exc)}): the sink needs sqs:GetQueueAttributes and sqs:SendMessage on it"
                )
            raise ConfigError("dead_letter", rule, self) from exc
        except (botocore.exceptions.BotoCoreError, ConnectionError, TimeoutError) as exc:
            _unchecked(self, exc)

    def __call__(self, failure: Failure) -> None:
        body = _body(failure)
        limit = self._max_size()
        if len(body) > limit and self.claim_check is not None:
            body = _claimed(body, self.claim_check)
        if len(body) > limit:
            raise WriteError(
                f"{_where(failure)} makes an SQS message of {len(body):,} bytes: more than the queue's "
                f"MaximumMessageSize of {limit:,} ({self.url}); raise it, or use a sink that takes larger records"
            )
        params: dict[str, Any] = {
            "QueueUrl": self.url,
            "MessageBody": body.decode(),
            "MessageAttributes": {
                "reason": {"DataType": "String", "StringValue": failure.reason},
                "attempts": {"DataType": "Number", "StringValue": str(failure.attempts)},
            },
        }
        if self._fifo:
            record = failure.record
            sub = "" if record.sub_sequence_number is None else f"-{record.sub_sequence_number}"
            params["MessageGroupId"] = record.shard_id
            params["MessageDeduplicationId"] = f"{record.sequence_number}{sub}"[-128:]
        self._client.send_message(**params)

    def _max_size(self) -> int:
        with self._lock:
            if self._limit is None:
                attributes = self._client.get_queue_attributes(QueueUrl=self.url, AttributeNames=["MaximumMessageSize"])
                self._limit = int(attributes["Attributes"]["MaximumMessageSize"])
            return self._limit


class KinesisStream:
    """Puts each failed record's envelope into the Kinesis stream ``name`` (a name, or an ARN: then called by ARN,
    with a client made in its region; ``client``: a boto3 Kinesis client), under the record's own partition key, so
    a shard's failures keep their order per key.

    ``claim_check``: an :class:`S3Bucket` that takes the envelopes larger than a Kinesis record; the record
    is then a pointer to it (see the module's description)."""

    def __init__(self, name: str, *, client: Any = None, claim_check: S3Bucket | None = None) -> None:
        self.name = name
        self.claim_check = claim_check
        region = StreamRef(name, field="KinesisStream name").region
        self._client = client if client is not None else boto3.client("kinesis", region_name=region)
        self._limit: int | None = None  # the stream's maximum record size, described once it matters
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"KinesisStream({self.name!r})"

    def check(self) -> None:
        """Describe the stream (DescribeStreamSummary): :class:`~kinsumer.ConfigError` naming it if it does not
        exist or is being deleted. A refusal (the sink itself needs only ``kinesis:PutRecord``) or a transient
        fault is logged, not raised: the stream is then first tried when a record fails. ``process()`` calls it
        when it starts."""
        try:
            summary = self._client.describe_stream_summary(**stream_params(self.name))["StreamDescriptionSummary"]
        except botocore.exceptions.ClientError as exc:
            if not is_not_found(exc):
                _unchecked(self, exc)
                return
            rule = (
                f"names the Kinesis stream {self.name}, which does not exist: create it, or give KinesisStream the "
                "name of a stream that does (in the region and account of its Kinesis client)"
            )
            raise ConfigError("dead_letter", rule, self) from exc
        except (botocore.exceptions.BotoCoreError, ConnectionError, TimeoutError) as exc:
            _unchecked(self, exc)
            return
        if summary.get("StreamStatus") == "DELETING":
            rule = f"names the Kinesis stream {self.name}, which is being deleted: give KinesisStream another stream"
            raise ConfigError("dead_letter", rule, self)
        with self._lock:
            self._limit = max_record_bytes(summary)

    def __call__(self, failure: Failure) -> None:
        body = _body(failure)
        key = failure.record.partition_key
        size = len(body) + len(key.encode())
        limit = self._largest() if size > DEFAULT_MAX_RECORD_BYTES else DEFAULT_MAX_RECORD_BYTES
        if size > limit and self.claim_check is not None:
            body = _claimed(body, self.claim_check)
            size = len(body) + len(key.encode())
        if size > limit:
            raise WriteError(
                f"{_where(failure)} makes a Kinesis record of {size:,} bytes (envelope and partition key): more "
                f"than the {limit:,} a record of {self.name} may hold (its maximum record size); raise it with "
                "UpdateMaxRecordSize (up to 10 MiB), give the sink a claim_check bucket, or use a sink that takes "
                "larger records"
            )
        self._client.put_record(**stream_params(self.name), Data=body, PartitionKey=key)


    def _largest(self) -> int:
        """The stream's maximum record size (from its description, read once; a refusal to describe it: 1 MiB)."""
        with self._lock:
            if self._limit is None:
                try:
                    self._limit = described_max_record_bytes(self._client, self.name)
                except botocore.exceptions.ClientError as exc:
                    if is_transient(exc):
                        raise
                    log.warning("could not read the maximum record size of %s (%s); taking 1 MiB", self.name,
                                error_code(exc))  # fmt: skip
                    self._limit = DEFAULT_MAX_RECORD_BYTES
            return self._limit


def _unchecked(sink: SqsQueue | KinesisStream, exc: BaseException) -> None:
    log.warning(
        "could not check the dead-letter sink %r (%s: %s); going on: it is tried when a record fails",
        sink, error_code(exc), error_message(exc),
    )  # fmt: skip


def check(sink: object) -> None:
    """``sink.check()`` for a built-in sink, and its claim check's (see the module's description); any other
    callable is not checked."""
    if isinstance(sink, SqsQueue | KinesisStream | S3Bucket):
        sink.check()
    if isinstance(sink, SqsQueue | KinesisStream) and sink.claim_check is not None:
        sink.claim_check.check(field="dead_letter's claim_check")
