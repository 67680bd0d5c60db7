"""The offset of a query over one or several streams. Pure, no I/O.

A query's offset is one :class:`~.offsets.BatchOffset` per stream, all at the same batch
number. Each stream's offset has a run of its own, which names its items in the batch
ledger, so the shards of two streams (``shardId-000000000000`` in both) never share an end.

JSON: a query over one stream writes that stream's offset as it always did (so checkpoints
written before several streams were possible read back, and read back the same)::

    {"batch": 7, "run": "...", "shards": {...}, "stream": "<ARN>@<ms>", ...}

Several streams::

    {"batch": 7, "run": "<query run>", "streams": {"clicks": {<offset>}, "views": {<offset>}}}

An offset of the first form belongs to the stream its identity names (its ARN ends in
``stream/<name>``); one written before identities were recorded, to the query's first stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ..errors import ConfigError
from .offsets import BatchOffset

__all__ = ["QueryOffset", "stream_of_identity", "stream_run"]


def stream_run(run: str, stream: str) -> str:
    """The ledger run of ``stream`` in query run ``run`` when the query reads several streams, or it joins one."""
    return f"{run}.{stream}"


def stream_of_identity(identity: str | None) -> str | None:
    """The stream name in an identity (``arn:aws:kinesis:<region>:<account>:stream/<name>@<ms>``); None if none."""
    arn = (identity or "").rsplit("@", 1)[0]
    _, found, name = arn.rpartition(":stream/")
    return name if found and name else None


@attrs.frozen
class QueryOffset:
    """Batch ``batch`` of every stream of a query run ``run`` (see the module's description)."""

    run: str
    streams: Mapping[str, BatchOffset]

    @property
    def batch(self) -> int:
        return next(iter(self.streams.values())).batch

    @classmethod
    def start(cls, run: str, streams: Mapping[str, BatchOffset]) -> QueryOffset:
        return cls(run, dict(sorted(streams.items())))

    def stream_run(self, stream: str) -> str:
        """The ledger run of ``stream`` joining this query (a query that starts with one stream gives it its own)."""
        return stream_run(self.run, stream)

    def to_json(self) -> dict[str, Any]:
        if len(self.streams) == 1:
            (offset,) = self.streams.values()
            if offset.run == self.run:  # the form of a query that has always read one stream
                return offset.to_json()
        streams = {name: self.streams[name].to_json() for name in sorted(self.streams)}
        return {"batch": self.batch, "run": self.run, "streams": streams}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], first_stream: str) -> QueryOffset:
        """Read an offset of either form (``first_stream``: the query's first, for offsets of one unnamed stream)."""
        if "streams" in data:
            streams = {str(name): BatchOffset.from_json(value) for name, value in data["streams"].items()}
            if not streams:
                raise ConfigError("offset", "names no stream (not an offset the kinsumer source wrote)", data)
            return cls(str(data["run"]), streams)
        offset = BatchOffset.from_json(data)
        return cls(offset.run, {stream_of_identity(offset.stream) or first_stream: offset})

    def with_streams(self, streams: Mapping[str, BatchOffset]) -> QueryOffset:
        return attrs.evolve(self, streams=dict(sorted(streams.items())))
