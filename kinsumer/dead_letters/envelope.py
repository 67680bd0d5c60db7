"""The dead-letter envelope: made from a :class:`~kinsumer.Failure` by the sinks, read back by ``kinsumer
dead-letters``. Pure: no I/O.

An envelope is one JSON object (``version`` 1; the fields are described in :mod:`kinsumer.dead_letter`).
A **claim-check pointer** is the envelope of a failure too large for its queue or stream, stored whole in
S3 (:class:`~kinsumer.dead_letter.S3Bucket`): the same fields but ``data``, and ``claim_check``, where
the whole envelope is::

    {"version": 1, ..., "claim_check": {"bucket": "my-dead-letters", "key": "claims/billing-app/..."}}

``version`` stays 1: a reader of version 1 envelopes that does not know claim checks finds no ``data``
and fails on it, rather than reading a pointer as a record.

:func:`parse` reads an envelope or a pointer back, checking each field it needs (a
:class:`BadEnvelope` names the field and what is wrong with it).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

import attrs

from ..errors import KinsumerError
from ..failure import Failure

__all__ = ["VERSION", "BadEnvelope", "ClaimCheck", "DeadLetter", "encode", "envelope", "parse", "pointer"]

#: The envelope's format.
VERSION = 1


class BadEnvelope(KinsumerError, ValueError):
    """A dead letter that is not a kinsumer envelope this version can read: not JSON, a newer ``version``,
    or a field missing or of the wrong kind (the message names it)."""


def envelope(failure: Failure) -> dict[str, Any]:
    """The JSON-ready envelope of a failed record (see :mod:`kinsumer.dead_letter`)."""
    record = failure.record
    return {
        "version": VERSION,
        "application": failure.application,
        "client_id": failure.client_id,
        "stream": failure.stream,
        "shard_id": record.shard_id,
        "sequence_number": record.sequence_number,
        "sub_sequence_number": record.sub_sequence_number,
        "partition_key": record.partition_key,
        "explicit_hash_key": record.explicit_hash_key,
        "approximate_arrival_timestamp": record.approximate_arrival_timestamp.isoformat(),
        "data": base64.b64encode(record.data).decode("ascii"),
        "attempts": failure.attempts,
        "reason": failure.reason,
        "error": failure.error,
        "failed_at": dt.datetime.now(dt.UTC).isoformat(),
        "trace_id": failure.trace_id,
        "span_id": failure.span_id,
    }


def encode(fields: Mapping[str, Any]) -> bytes:
    """An envelope (or a pointer) as the compact JSON the sinks send."""
    return json.dumps(fields, separators=(",", ":")).encode()


def pointer(fields: Mapping[str, Any], bucket: str, key: str) -> dict[str, Any]:
    """The claim-check pointer of an envelope stored whole at ``s3://bucket/key``: every field but ``data``,
    and ``claim_check``."""
    kept = {name: value for name, value in fields.items() if name != "data"}
    return {**kept, "claim_check": {"bucket": bucket, "key": key}}


@attrs.frozen
class ClaimCheck:
    """Where a pointer's whole envelope is: ``s3://bucket/key``."""

    bucket: str
    key: str

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


@attrs.frozen
class DeadLetter:
    """An envelope read back. ``data`` is None for a claim-check pointer (``claim_check`` says where the
    whole envelope is); ``fields`` is the JSON object as read."""

    stream: str
    shard_id: str
    sequence_number: str
    sub_sequence_number: int | None
    partition_key: str
    explicit_hash_key: str | None
    data: bytes | None
    attempts: int
    reason: str
    error: str
    failed_at: dt.datetime
    application: str
    client_id: str
    claim_check: ClaimCheck | None
    fields: Mapping[str, Any] = attrs.field(eq=False, repr=False)

    @property
    def position(self) -> str:
        """The failed record's place: ``shard/sequence`` (``/sub`` inside a KPL aggregate)."""
        sub = "" if self.sub_sequence_number is None else f"/{self.sub_sequence_number}"
        return f"{self.shard_id}/{self.sequence_number}{sub}"


def parse(body: bytes | str, where: str) -> DeadLetter:
    """The envelope (or claim-check pointer) ``body``, checked; ``where`` names it in a :class:`BadEnvelope`
    (``SQS message 5fea7756...``)."""
    try:
        fields = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadEnvelope(f"{where} is not a kinsumer dead letter: not JSON ({exc})") from None
    if not isinstance(fields, dict):
        raise BadEnvelope(f"{where} is not a kinsumer dead letter: not a JSON object")
    field = _Fields(fields, where)
    version = field.integer("version")
    if version > VERSION:
        newer = f"newer than the {VERSION} this kinsumer reads: upgrade kinsumer"
        raise BadEnvelope(f"{where} has version {version}, {newer}")
    if version < 1:
        raise BadEnvelope(f"{where}: field 'version' must be 1 or more, not {version}")
    claim = field.claim_check()
    return DeadLetter(
        stream=field.text("stream"),
        shard_id=field.text("shard_id"),
        sequence_number=field.text("sequence_number"),
        sub_sequence_number=field.maybe_integer("sub_sequence_number"),
        partition_key=field.text("partition_key"),
        explicit_hash_key=field.maybe_text("explicit_hash_key"),
        data=None if claim is not None else field.base64("data"),
        attempts=field.integer("attempts"),
        reason=field.text("reason"),
        error=field.maybe_text("error") or "",
        failed_at=field.time("failed_at"),
        application=field.maybe_text("application") or "",
        client_id=field.maybe_text("client_id") or "",
        claim_check=claim,
        fields=fields,
    )


class _Fields:
    """Typed reads of an envelope's fields, each failing with a :class:`BadEnvelope` that names the field."""

    def __init__(self, fields: dict[str, Any], where: str) -> None:
        self._fields, self._where = fields, where

    def _get(self, name: str, optional: bool) -> Any:
        value = self._fields.get(name)
        if value is None and not optional:
            missing = "is null" if name in self._fields else "is missing"
            raise BadEnvelope(f"{self._where}: field {name!r} {missing}")
        return value

    def _wrong(self, name: str, what: str, value: object) -> BadEnvelope:
        return BadEnvelope(f"{self._where}: field {name!r} must be {what}, not {value!r}")

    def text(self, name: str) -> str:
        value = self._get(name, optional=False)
        if not isinstance(value, str):
            raise self._wrong(name, "a string", value)
        return value

    def maybe_text(self, name: str) -> str | None:
        return None if self._fields.get(name) is None else self.text(name)

    def integer(self, name: str) -> int:
        value = self._get(name, optional=False)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self._wrong(name, "an integer", value)
        return value

    def maybe_integer(self, name: str) -> int | None:
        return None if self._fields.get(name) is None else self.integer(name)

    def base64(self, name: str) -> bytes:
        value = self.text(name)
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise BadEnvelope(f"{self._where}: field {name!r} is not base64 ({exc})") from None

    def time(self, name: str) -> dt.datetime:
        value = self.text(name)
        try:
            when = dt.datetime.fromisoformat(value)
        except ValueError:
            raise self._wrong(name, "an ISO 8601 time", value) from None
        return when if when.tzinfo else when.replace(tzinfo=dt.UTC)

    def claim_check(self) -> ClaimCheck | None:
        value = self._get("claim_check", optional=True)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self._wrong("claim_check", 'an object {"bucket", "key"}', value)
        bucket, key = value.get("bucket"), value.get("key")
        if not isinstance(bucket, str) or not bucket:
            raise self._wrong("claim_check.bucket", "a bucket name", bucket)
        if not isinstance(key, str) or not key:
            raise self._wrong("claim_check.key", "an object key", key)
        return ClaimCheck(bucket, key)
