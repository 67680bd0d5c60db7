"""The hash key ranges of a stream's shards, as ListShards gives them, shared by the readers of a stream.

A reader needs its shard's range only when it reads a KPL aggregate (to find the user records
outside it, :func:`~.kpl.outside_range`). A shard's range never changes, so one listing serves
every reader of the stream: the first lookup lists the stream, and a shard the listing did not
hold (a child of a reshard since) lists it again, at most once per :data:`RELIST_AFTER` seconds.
A listing that fails (no ``kinesis:ListShards``, a fault) leaves the range unknown: the records
are then delivered and not counted, and a warning says why, once.

The Spark executors get their shard's range from the driver's listing instead (:meth:`ShardRanges.known`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..aws.error_codes import error_code, error_message
from ..aws.kinesis import list_shards
from .kpl import HashRange

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient

__all__ = ["RELIST_AFTER", "ShardRanges"]

log = logging.getLogger("kinsumer.reading")

#: Seconds between two listings of a stream made for a shard the last one did not hold.
RELIST_AFTER = 10.0


class ShardRanges:
    """The ranges of the shards of ``stream`` (see the module's description). Thread-safe."""

    def __init__(
        self, kinesis: KinesisClient | None, stream: str, ranges: Mapping[str, HashRange] | None = None
    ) -> None:
        self._kinesis = kinesis
        self._stream = stream
        self._ranges = dict(ranges or {})
        self._listed_at = -RELIST_AFTER  # monotonic
        self._lock = threading.Lock()
        self._warned = False

    @classmethod
    def known(cls, stream: str, ranges: Mapping[str, HashRange]) -> ShardRanges:
        """Ranges listed elsewhere (the Spark driver's): never lists."""
        return cls(None, stream, ranges)

    def of(self, shard_id: str) -> HashRange | None:
        """The hash key range of ``shard_id``; None if not known. May block for a ListShards."""
        with self._lock:
            known = self._ranges.get(shard_id)
            if known is not None or self._kinesis is None or time.monotonic() - self._listed_at < RELIST_AFTER:
                return known
            self._listed_at = time.monotonic()  # one listing at a time
        try:
            listing = list_shards(self._kinesis, self._stream)
        except Exception as exc:  # noqa: BLE001 - the range stays unknown; reading goes on
            self._warn(exc)
            return None
        found = {info.shard_id: info.hash_range for info in listing if info.hash_range is not None}
        with self._lock:
            self._ranges.update(found)
            self._listed_at = time.monotonic()
        return found.get(shard_id)

    def _warn(self, exc: Exception) -> None:
        if self._warned:
            return
        self._warned = True
        log.warning(
            "could not list the shards of %s (%s: %s): user records of KPL aggregates outside their shard's hash key "
            "range are neither counted nor dropped until it can",
            self._stream, error_code(exc), error_message(exc),
        )  # fmt: skip
