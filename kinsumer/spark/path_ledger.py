"""The batch ledger at a path beside the Spark checkpoint (option ``metadataPath``).

The same rules as the DynamoDB ledger (:mod:`.batch_ends`): the driver plans a batch before
its tasks run; the first end recorded for a (batch, shard) is final. Layout::

    <metadataPath>/<run>/<batch, 12 digits>/_planned
    <metadataPath>/<run>/<batch, 12 digits>/<shard>.json   {"end", "stop", "count", "behind"}

First write wins through an exclusive create, which only some stores offer:

- a local (or shared, POSIX) path: the file is written aside and hard-linked into place,
  which fails if the name exists, so a reader never sees half a file;
- ``s3://bucket/prefix``: PutObject with ``If-None-Match: *`` (S3 refuses the second write).
  The S3 endpoint comes from the standard AWS settings (``AWS_ENDPOINT_URL_S3`` for a local
  server).

Other schemes (``hdfs://``, ...) are refused: a plain overwrite would break first write wins.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import tempfile
import urllib.parse
from typing import Any, Protocol

import botocore.exceptions

from ..aws.error_codes import error_code
from ..errors import ConfigError
from .offsets import ShardEnd, Stop

__all__ = ["PathLedger", "check_metadata_path"]

_PLANNED = "_planned"
_SCHEMES = ("", "file", "s3")


def check_metadata_path(path: str) -> str:
    """``path`` if the ledger can live there (a local path or ``s3://bucket/...``); else a ConfigError."""
    parsed = urllib.parse.urlparse(path)
    if parsed.scheme not in _SCHEMES:
        rule = "must be a local path or s3://bucket/prefix: a ledger needs a store with exclusive creates"
        raise ConfigError("option metadataPath", rule, path)
    if parsed.scheme == "s3" and not parsed.netloc:
        raise ConfigError("option metadataPath", "names no bucket", path)
    return path


class _Store(Protocol):
    def create(self, name: str, body: bytes) -> bool: ...
    def read(self, name: str) -> bytes | None: ...
    def list(self, prefix: str) -> list[str]: ...
    def delete_tree(self, prefix: str) -> None: ...


class _LocalStore:
    def __init__(self, root: str) -> None:
        self._root = pathlib.Path(root.removeprefix("file://"))

    def create(self, name: str, body: bytes) -> bool:
        target = self._root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target.parent, prefix=".writing-", delete=False) as tmp:
            tmp.write(body)
            tmp.flush()
            os.fsync(tmp.fileno())
        try:
            os.link(tmp.name, target)
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp.name)
        return True

    def read(self, name: str) -> bytes | None:
        try:
            return (self._root / name).read_bytes()
        except FileNotFoundError:
            return None

    def list(self, prefix: str) -> list[str]:
        folder = self._root / prefix
        if not folder.is_dir():
            return []
        return sorted(f"{prefix}/{p.name}" for p in folder.iterdir() if not p.name.startswith("."))

    def delete_tree(self, prefix: str) -> None:
        shutil.rmtree(self._root / prefix, ignore_errors=True)


class _S3Store:
    def __init__(self, s3: Any, url: str) -> None:
        parsed = urllib.parse.urlparse(url)
        self._s3 = s3
        self._bucket = parsed.netloc
        self._prefix = parsed.path.strip("/")

    def _key(self, name: str) -> str:
        return f"{self._prefix}/{name}" if self._prefix else name

    def create(self, name: str, body: bytes) -> bool:
        try:
            self._s3.put_object(Bucket=self._bucket, Key=self._key(name), Body=body, IfNoneMatch="*")
        except botocore.exceptions.ClientError as exc:
            if error_code(exc) in ("PreconditionFailed", "ConditionalRequestConflict"):
                return False
            raise
        return True

    def read(self, name: str) -> bytes | None:
        try:
            return bytes(self._s3.get_object(Bucket=self._bucket, Key=self._key(name))["Body"].read())
        except botocore.exceptions.ClientError as exc:
            if error_code(exc) in ("NoSuchKey", "404"):
                return None
            raise

    def list(self, prefix: str) -> list[str]:
        names: list[str] = []
        start = self._key(prefix) + "/"
        for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=self._bucket, Prefix=start):
            names += [str(item["Key"])[len(self._key("")) :].lstrip("/") for item in page.get("Contents", [])]
        return sorted(names)

    def delete_tree(self, prefix: str) -> None:
        for name in self.list(prefix):
            self._s3.delete_object(Bucket=self._bucket, Key=self._key(name))


class PathLedger:
    """The ledger of one run of a query, at ``path`` (see the module's description)."""

    def __init__(self, path: str, run: str, s3: Any = None) -> None:
        self.table = path  # named as the DynamoDB ledger's, for messages
        self._run = run
        self._store: _Store = _S3Store(s3, path) if path.startswith("s3://") else _LocalStore(path)

    def _batch(self, batch: int) -> str:
        return f"{self._run}/{batch:012d}"

    def plan(self, batch: int) -> bool:
        return self._store.create(f"{self._batch(batch)}/{_PLANNED}", b"")

    def record(self, batch: int, shard: str, end: ShardEnd, count: int) -> bool:
        if self._store.read(f"{self._batch(batch)}/{_PLANNED}") is None:
            return False  # never planned (or forgotten): nothing to record into
        body = json.dumps({"end": end.position, "stop": end.stop.value, "count": count, "behind": end.behind}).encode()
        return self._store.create(f"{self._batch(batch)}/{shard}.json", body)

    def ends(self, batch: int) -> dict[str, ShardEnd]:
        found = {}
        for name in self._store.list(self._batch(batch)):
            if not name.endswith(".json"):
                continue
            body = self._store.read(name)
            if body is not None:
                data = json.loads(body)
                shard = name.rsplit("/", 1)[1].removesuffix(".json")
                found[shard] = ShardEnd(data["end"], Stop(data["stop"]), data.get("behind"), data.get("count"))
        return found

    def forget(self, batch: int) -> None:
        if batch >= 0:
            self._store.delete_tree(self._batch(batch))
