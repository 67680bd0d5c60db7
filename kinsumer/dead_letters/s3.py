"""The S3 dead-letter sink, :class:`S3Bucket`: one object per failed record, at a key an operator can list.

Each failure is one object holding its envelope (the JSON of :mod:`kinsumer.dead_letter`), at::

    <prefix><application>/<stream>/<shard_id>/<YYYY>/<MM>/<DD>/<HH>/<sequence>[-<sub>]-<failed_at ms>.json

``YYYY/MM/DD/HH`` and ``failed_at ms`` are the envelope's ``failed_at`` (UTC; milliseconds since the
epoch), ``sub`` the ``sub_sequence_number`` of a user record of a KPL aggregate. So a listing by prefix
narrows to an application, a stream, a shard, a day, an hour; the names of one hour sort by position
in the shard. A record dead-lettered twice (by two owners: one died after handing it on) is two objects
that differ only in ``failed_at``. A segment is the name as is when made of ``A-Z a-z 0-9 . _ -``
(kinsumer's names always are), percent-encoded otherwise, ``_`` when empty.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

import attrs
import boto3
import botocore.exceptions

from ..aws.error_codes import error_code, error_message, is_missing_bucket, is_transient
from ..errors import ConfigError
from ..failure import Failure
from .envelope import encode, envelope, pointer

__all__ = ["DEFAULT_PREFIX", "KeyParts", "S3Bucket", "key_parts", "object_key"]

DEFAULT_PREFIX = "kinsumer-dead-letters/"

log = logging.getLogger("kinsumer")

_KEY = re.compile(
    r"(?P<application>[^/]+)/(?P<stream>[^/]+)/(?P<shard_id>[^/]+)/\d{4}/\d\d/\d\d/\d\d/"
    r"(?P<sequence>\d+)(?:-(?P<sub>\d+))?-(?P<ms>\d+)\.json"
)


def _segment(name: str) -> str:
    return urllib.parse.quote(name, safe="") or "_"


def object_key(fields: Mapping[str, Any], prefix: str) -> str:
    """The key of an envelope's object under ``prefix`` (see the module's description)."""
    failed_at = dt.datetime.fromisoformat(fields["failed_at"]).astimezone(dt.UTC)
    sub = fields.get("sub_sequence_number")
    name = f"{fields['sequence_number']}{'' if sub is None else f'-{sub}'}-{int(failed_at.timestamp() * 1000)}.json"
    where = "/".join(_segment(str(fields.get(part) or "")) for part in ("application", "stream", "shard_id"))
    return f"{prefix}{where}/{failed_at:%Y/%m/%d/%H}/{name}"


@attrs.frozen
class KeyParts:
    """What an object's key says of its dead letter."""

    application: str
    stream: str
    shard_id: str
    failed_at: dt.datetime


def key_parts(key: str, prefix: str) -> KeyParts | None:
    """The parts of a key :func:`object_key` made under ``prefix``; None for any other key."""
    if not key.startswith(prefix) or not (found := _KEY.fullmatch(key[len(prefix) :])):
        return None
    unquote = urllib.parse.unquote
    failed_at = dt.datetime.fromtimestamp(int(found["ms"]) / 1000, dt.UTC)
    return KeyParts(unquote(found["application"]), unquote(found["stream"]), unquote(found["shard_id"]), failed_at)


class S3Bucket:
    """Puts each failed record's envelope into the S3 bucket ``bucket`` (``client``: a boto3 S3 client), one
    object per failure under ``prefix`` (a ``/`` is added if it does not end with one). The sink needs
    ``s3:PutObject``; its check, ``s3:ListBucket`` (HeadBucket). Given to :class:`SqsQueue` or
    :class:`KinesisStream` as ``claim_check``, it holds the envelopes too large for them."""

    def __init__(self, bucket: str, *, prefix: str = DEFAULT_PREFIX, client: Any = None) -> None:
        if not bucket or "/" in bucket:
            rule = "must be an S3 bucket's name (no s3:// and no /: the path goes in prefix=)"
            raise ConfigError("bucket", rule, bucket)
        self.bucket = bucket
        self.prefix = prefix if not prefix or prefix.endswith("/") else prefix + "/"
        self._client = client if client is not None else boto3.client("s3")

    def __repr__(self) -> str:
        return f"S3Bucket({self.bucket!r}, prefix={self.prefix!r})"

    def check(self, *, field: str = "dead_letter") -> None:
        """HeadBucket: :class:`~kinsumer.ConfigError` naming the bucket if it does not exist. A refusal (the
        sink itself needs only ``s3:PutObject``) or a transient fault is logged, not raised: the bucket is then
        first tried when a record fails. ``process()`` calls it when it starts (``field``: the argument that
        names this bucket, for the error)."""
        try:
            self._client.head_bucket(Bucket=self.bucket)
        except botocore.exceptions.ClientError as exc:
            if not is_missing_bucket(exc) or is_transient(exc):
                _unchecked(self, exc)
                return
            rule = (
                f"names the S3 bucket {self.bucket}, which does not exist: create it, or give S3Bucket the name of a "
                "bucket that does (in the account of its S3 client)"
            )
            raise ConfigError(field, rule, self) from exc
        except (botocore.exceptions.BotoCoreError, ConnectionError, TimeoutError) as exc:
            _unchecked(self, exc)

    def __call__(self, failure: Failure) -> None:
        self.store(envelope(failure))

    def store(self, fields: Mapping[str, Any]) -> str:
        """Put one envelope into the bucket; its key."""
        key = object_key(fields, self.prefix)
        self._client.put_object(Bucket=self.bucket, Key=key, Body=encode(fields), ContentType="application/json")
        return key

    def claim(self, fields: Mapping[str, Any]) -> dict[str, Any]:
        """Store the envelope ``fields`` whole; the claim-check pointer to send in its place."""
        return pointer(fields, self.bucket, self.store(fields))


def _unchecked(sink: S3Bucket, exc: BaseException) -> None:
    log.warning(
        "could not check the dead-letter bucket %r (%s: %s); going on: it is tried when a record fails",
        sink, error_code(exc), error_message(exc),
    )  # fmt: skip
