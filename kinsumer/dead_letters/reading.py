"""Reading dead letters back from a sink, for ``kinsumer dead-letters``: list, show one, re-drive.

A sink is named as the command line takes it (:func:`sink_source`): ``s3://BUCKET/PREFIX``, ``sqs:URL``
(or the queue's ``https://sqs...`` URL alone), ``kinesis:STREAM``. Each source yields the dead letters
it holds (:class:`Letter`), each with an ``id`` of the sink's own: the object's key, the SQS message's
ID, ``<shard ID>/<sequence number>`` of the record in the dead-letter stream. A claim-check pointer is
followed to its bucket: the letter carries the whole envelope. What cannot be read as an envelope is
an :class:`Unreadable` saying why, never skipped silently.

- S3: the objects under the prefix (narrowed to ``application/stream/shard/`` when those filters are
  given), the key's time compared with ``since`` before the object is read.
- SQS: received with a visibility timeout (the messages stay in the queue, hidden from its other readers
  meanwhile) until a receive brings nothing new; :meth:`SqsSource.release` makes those not deleted
  visible again at once. Nothing is deleted but by :meth:`delete`. A FIFO queue hands out the messages
  of a message group only while none of the group is in flight: one receive's worth per group.
- Kinesis: every shard of the dead-letter stream read from TRIM_HORIZON (or ``since``, AT_TIMESTAMP) to
  its end as it is now. Nothing can be deleted from a stream.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import attrs
import botocore.exceptions

from ..aws.error_codes import error_code, error_message, is_missing_object, is_not_found
from ..aws.kinesis import list_shards
from ..errors import KinsumerError
from ..reading.polling import PollingReader
from ..reading.position import StartPosition
from ..reading.reader import ApiRecord
from .envelope import BadEnvelope, ClaimCheck, DeadLetter, parse
from .s3 import DEFAULT_PREFIX, key_parts

__all__ = [
    "Filters",
    "KinesisSource",
    "Letter",
    "S3Source",
    "SinkName",
    "Source",
    "SqsSource",
    "Unreadable",
    "follow",
    "sink_name",
]

_SQS_BATCH = 10  # messages per ReceiveMessage, DeleteMessageBatch, ChangeMessageVisibilityBatch


@attrs.frozen
class Letter:
    """A dead letter read back: its ``id`` in the sink, its envelope (the whole one, a claim check followed),
    and the claim check it came through, if any."""

    id: str
    dead: DeadLetter
    claim_check: ClaimCheck | None = None


@attrs.frozen
class Unreadable:
    """Something in the sink that is not a dead letter this kinsumer can read, and why."""

    id: str
    reason: str


@attrs.frozen
class Filters:
    """Which dead letters to take: of an application, a stream, a shard of it, failed at or after ``since``."""

    application: str | None = None
    stream: str | None = None
    shard_id: str | None = None
    since: dt.datetime | None = None

    def admit(self, application: str, stream: str, shard_id: str, failed_at: dt.datetime) -> bool:
        return (
            self.application in (None, application)
            and self.stream in (None, stream)
            and self.shard_id in (None, shard_id)
            and (self.since is None or failed_at >= self.since)
        )

    def admit_letter(self, dead: DeadLetter) -> bool:
        return self.admit(dead.application, dead.stream, dead.shard_id, dead.failed_at)


class Source(Protocol):
    """A sink read back."""

    def letters(self, filters: Filters) -> Iterator[Letter | Unreadable]:
        """The dead letters ``filters`` admits (and what could not be read), in the sink's order."""
        ...

    def find(self, letter_id: str) -> Letter | Unreadable | None:
        """The dead letter ``letter_id``; None if the sink has no such thing."""
        ...

    def delete(self, letters: Sequence[Letter]) -> int:
        """Remove ``letters`` from the sink; how many were removed."""
        ...

    def release(self) -> None:
        """Done reading: give back what reading holds (an SQS message's invisibility)."""
        ...


@attrs.frozen
class SinkName:
    """A sink as the command line names it: ``kind`` is ``s3``, ``sqs`` or ``kinesis``; ``name`` the bucket,
    the queue's URL or the stream; ``prefix`` the S3 prefix."""

    kind: str
    name: str
    prefix: str = ""

    def __str__(self) -> str:
        return f"s3://{self.name}/{self.prefix}" if self.kind == "s3" else f"{self.kind}:{self.name}"


def sink_name(text: str) -> SinkName:
    """``s3://BUCKET/PREFIX`` (``s3://BUCKET`` alone: S3Bucket's default prefix), ``sqs:URL`` or the URL alone,
    ``kinesis:STREAM``; ValueError saying what is accepted otherwise."""
    if text.startswith("s3://"):
        bucket, slash, prefix = text[len("s3://") :].partition("/")
        if bucket:
            if not slash:
                return SinkName("s3", bucket, DEFAULT_PREFIX)
            return SinkName("s3", bucket, prefix if not prefix or prefix.endswith("/") else prefix + "/")
    elif text.startswith("sqs:") and len(text) > len("sqs:"):
        return SinkName("sqs", text[len("sqs:") :])
    elif text.startswith("https://sqs.") or text.startswith("http://"):
        return SinkName("sqs", text)
    elif text.startswith("kinesis:") and len(text) > len("kinesis:"):
        return SinkName("kinesis", text[len("kinesis:") :])
    raise ValueError(f"a dead-letter sink is s3://BUCKET/PREFIX, sqs:QUEUE_URL or kinesis:STREAM; got {text!r}")


def follow(dead: DeadLetter, s3: Any, letter_id: str) -> Letter | Unreadable:
    """``dead`` as a letter: a claim-check pointer replaced by the whole envelope it points to."""
    claim = dead.claim_check
    if claim is None:
        return Letter(letter_id, dead)
    try:
        body = s3.get_object(Bucket=claim.bucket, Key=claim.key)["Body"].read()
    except botocore.exceptions.ClientError as exc:
        why = f"{error_code(exc)}: {error_message(exc)}"
        return Unreadable(letter_id, f"its claim check {claim} cannot be read ({why})")
    try:
        whole = parse(body, f"the claim check {claim}")
    except BadEnvelope as exc:
        return Unreadable(letter_id, str(exc))
    if whole.position != dead.position or whole.stream != dead.stream or whole.data is None:
        other = f"{whole.position} of {whole.stream}"
        return Unreadable(letter_id, f"its claim check {claim} holds another record ({other})")
    return Letter(letter_id, whole, claim)


def _read(body: bytes | str, letter_id: str, where: str, s3: Any) -> Letter | Unreadable:
    try:
        dead = parse(body, where)
    except BadEnvelope as exc:
        return Unreadable(letter_id, str(exc))
    return follow(dead, s3, letter_id)


class S3Source:
    """The objects of an :class:`~kinsumer.dead_letter.S3Bucket` (see the module's description)."""

    def __init__(self, s3: Any, bucket: str, prefix: str) -> None:
        self._s3, self.bucket, self.prefix = s3, bucket, prefix

    def letters(self, filters: Filters) -> Iterator[Letter | Unreadable]:
        narrowed = self.prefix
        for part in (filters.application, filters.stream, filters.shard_id):
            if part is None:
                break
            narrowed += f"{part}/"
        for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=narrowed):
            for item in page.get("Contents", []):
                key = item["Key"]
                parts = key_parts(key, self.prefix)
                if parts is not None and not filters.admit(parts.application, parts.stream, parts.shard_id,
                                                           parts.failed_at):  # fmt: skip
                    continue
                found = self.find(key)
                if found is None or (isinstance(found, Letter) and not filters.admit_letter(found.dead)):
                    continue
                yield found

    def find(self, letter_id: str) -> Letter | Unreadable | None:
        try:
            body = self._s3.get_object(Bucket=self.bucket, Key=letter_id)["Body"].read()
        except botocore.exceptions.ClientError as exc:
            if is_missing_object(exc):
                return None
            raise
        return _read(body, letter_id, f"s3://{self.bucket}/{letter_id}", self._s3)

    def delete(self, letters: Sequence[Letter]) -> int:
        for start in range(0, len(letters), 1000):
            objects = [{"Key": letter.id} for letter in letters[start : start + 1000]]
            answer = self._s3.delete_objects(Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True})
            if errors := answer.get("Errors"):
                first = errors[0]
                raise KinsumerError(
                    f"{len(errors)} dead letters of s3://{self.bucket}/{self.prefix} could not be deleted "
                    f"({first.get('Key')}: {first.get('Code')}: {first.get('Message')}); they were re-driven"
                )
        return len(letters)

    def release(self) -> None:
        pass


class SqsSource:
    """The messages of an SQS dead-letter queue (see the module's description)."""

    def __init__(self, sqs: Any, s3: Any, url: str, *, visibility_timeout: int = 60, wait: int = 1) -> None:
        self._sqs, self._s3, self.url = sqs, s3, url
        self._visibility, self._wait = visibility_timeout, wait
        self._held: dict[str, str] = {}  # message ID -> its receipt handle, while invisible by our receive
        self._read: dict[str, Letter | Unreadable] = {}

    def _receive(self) -> Iterator[Letter | Unreadable]:
        """Each message of the queue once, received until a receive brings nothing new."""
        yield from list(self._read.values())
        while True:
            answer = self._sqs.receive_message(
                QueueUrl=self.url, MaxNumberOfMessages=_SQS_BATCH, WaitTimeSeconds=self._wait,
                VisibilityTimeout=self._visibility,
            )  # fmt: skip
            fresh = [m for m in answer.get("Messages", []) if m["MessageId"] not in self._read]
            for message in answer.get("Messages", []):
                self._held[message["MessageId"]] = message["ReceiptHandle"]
            if not fresh:
                return
            for message in fresh:
                letter_id = message["MessageId"]
                read = self._read[letter_id] = _read(message["Body"], letter_id, f"SQS message {letter_id}", self._s3)
                yield read

    def letters(self, filters: Filters) -> Iterator[Letter | Unreadable]:
        for read in self._receive():
            if isinstance(read, Unreadable) or filters.admit_letter(read.dead):
                yield read

    def find(self, letter_id: str) -> Letter | Unreadable | None:
        return next((read for read in self._receive() if read.id == letter_id), None)

    def delete(self, letters: Sequence[Letter]) -> int:
        deleted = 0
        held = [(letter.id, self._held[letter.id]) for letter in letters if letter.id in self._held]
        for start in range(0, len(held), _SQS_BATCH):
            part = held[start : start + _SQS_BATCH]
            entries = [{"Id": str(i), "ReceiptHandle": handle} for i, (_, handle) in enumerate(part)]
            answer = self._sqs.delete_message_batch(QueueUrl=self.url, Entries=entries)
            for done in answer.get("Successful", []):
                del self._held[held[start + int(done["Id"])][0]]
                deleted += 1
            if failed := answer.get("Failed"):
                raise KinsumerError(
                    f"{len(failed)} messages of {self.url} could not be deleted ({failed[0].get('Code')}: "
                    f"{failed[0].get('Message')}; past --visibility-timeout?); they were re-driven, and are in the "
                    "queue still"
                )
        return deleted

    def release(self) -> None:
        held, self._held = list(self._held.values()), {}
        for start in range(0, len(held), _SQS_BATCH):
            entries = [{"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": 0} for i, h in
                       enumerate(held[start : start + _SQS_BATCH])]  # fmt: skip
            self._sqs.change_message_visibility_batch(QueueUrl=self.url, Entries=entries)


class KinesisSource:
    """The records of a Kinesis dead-letter stream (see the module's description), read with kinsumer's own
    reader (retries, expired iterators, a stream given by ARN)."""

    def __init__(self, kinesis: Any, s3: Any, stream: str) -> None:
        self._kinesis, self._s3, self.stream = kinesis, s3, stream

    def _shard(self, shard_id: str, since: dt.datetime | None) -> Iterator[Letter | Unreadable]:
        start = StartPosition.trim_horizon() if since is None else StartPosition.at_timestamp(since)
        reader = PollingReader(self._kinesis, self.stream, shard_id, start)
        while True:
            page = reader.next_page()
            for record in page.raw:
                yield self._letter(shard_id, record)
            if page.end_of_shard or page.at_tip:
                return  # the shard's end, as it is now

    def _letter(self, shard_id: str, record: ApiRecord) -> Letter | Unreadable:
        letter_id = f"{shard_id}/{record['SequenceNumber']}"
        return _read(record["Data"], letter_id, f"the record {letter_id} of {self.stream}", self._s3)

    def letters(self, filters: Filters) -> Iterator[Letter | Unreadable]:
        for shard in list_shards(self._kinesis, self.stream):
            for read in self._shard(shard.shard_id, filters.since):
                if isinstance(read, Unreadable) or filters.admit_letter(read.dead):
                    yield read

    def find(self, letter_id: str) -> Letter | Unreadable | None:
        shard_id, _, sequence = letter_id.rpartition("/")
        if not shard_id or not sequence.isdigit():
            raise ValueError(f"a dead letter of a stream is SHARD_ID/SEQUENCE_NUMBER; got {letter_id!r}")
        start = StartPosition("AT_SEQUENCE_NUMBER", sequence_number=sequence)
        try:
            records = PollingReader(self._kinesis, self.stream, shard_id, start).next_page(1).raw
        except botocore.exceptions.ClientError as exc:
            if is_not_found(exc):
                return None
            raise
        if not records or records[0]["SequenceNumber"] != sequence:
            return None
        return self._letter(shard_id, records[0])

    def delete(self, letters: Sequence[Letter]) -> int:
        raise KinsumerError(
            f"records cannot be deleted from a Kinesis stream ({self.stream}): they expire with its retention"
        )

    def release(self) -> None:
        pass
