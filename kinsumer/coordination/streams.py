"""The streams of one application: how their rows are keyed, and which the clients read together.

Pure (no I/O). An application's *home* stream is the one its first client recorded in the metadata
table (:func:`~.metadata_table.claim_home_stream`). Its checkpoint rows and its shard cache keep the
keys a single-stream application has always used (the shard ID; ``ShardCache``), so an application
that adds streams needs no migration. Every other stream's rows are keyed ``<stream>/<shard ID>``
(a stream name has no ``/``) and its cache is ``ShardCache/<stream>``. A stream given by ARN is keyed by its
name all the same (:mod:`kinsumer.aws.stream_ref`), so rows never depend on how a client names a stream.

Each client lists its streams in its clients-table row. The application reads the streams that
*every* live client lists (:func:`agreed_streams`), so all clients compute the same shard list and
assignment; every client must list the home stream. A stream is added to a running application by
restarting its clients one by one with the longer list: the stream is read once the last one lists
it. It is removed the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from ..stats import GuardedStats, KeyedStats

__all__ = [
    "SEPARATOR", "StreamScope", "agreed_streams", "combined_keys", "listed_streams", "scope_stats", "split_key",
]  # fmt: skip

SEPARATOR = "/"
_CACHE_KEY = "ShardCache"


@attrs.frozen
class StreamScope:
    """One stream of the application, as this client reads it."""

    name: str
    #: ``ARN@creation ms`` (:func:`~kinsumer.aws.kinesis.stream_identity`); "" when not known.
    identity: str = ""
    #: The application's home stream: its rows are keyed by the bare shard ID.
    home: bool = True
    #: The stream's ARN if the client was given one (its Kinesis calls then name it by ARN), else "".
    arn: str = ""

    @property
    def ref(self) -> str:
        """The stream as this client's Kinesis calls name it: its ARN if given one, else its name."""
        return self.arn or self.name

    def key(self, shard_id: str) -> str:
        """The checkpoint row's key (and this client's name for the shard) of ``shard_id``."""
        return shard_id if self.home else f"{self.name}{SEPARATOR}{shard_id}"

    def shard_id(self, key: str) -> str | None:
        """The shard ID of ``key`` if it is a key of this stream; None if it is another stream's."""
        if self.home:
            return None if SEPARATOR in key else key
        prefix = f"{self.name}{SEPARATOR}"
        return key[len(prefix) :] if key.startswith(prefix) else None

    @property
    def cache_key(self) -> str:
        """The metadata table's key of this stream's shard cache."""
        return _CACHE_KEY if self.home else f"{_CACHE_KEY}{SEPARATOR}{self.name}"


def split_key(key: str, home: str) -> tuple[str, str]:
    """``(stream, shard ID)`` of a row key, ``home`` being the application's home stream."""
    stream, sep, shard_id = key.rpartition(SEPARATOR)
    return (stream, shard_id) if sep else (home, key)


def listed_streams(row_streams: Sequence[str], home: str) -> Sequence[str]:
    """The streams a clients-table row lists: its ``Streams``, or (a row without it) the home stream."""
    return row_streams or (home,)


def agreed_streams(mine: Sequence[str], listed: Iterable[Sequence[str]]) -> tuple[str, ...]:
    """The streams of ``mine`` that every live client lists (``listed``, this client's own list
    among them), in ``mine``'s order."""
    agreed = list(mine)
    for streams in listed:
        agreed = [s for s in agreed if s in streams]
    return tuple(agreed)


def combined_keys(shards: Iterable[tuple[StreamScope, Iterable[str]]]) -> list[str]:
    """The sorted keys of every stream's shards: the one list all clients assign from."""
    return sorted(scope.key(shard_id) for scope, shard_ids in shards for shard_id in shard_ids)


def scope_stats(stats: GuardedStats, scope: StreamScope) -> GuardedStats:
    """What ``scope``'s readers report to: shards named by their key (bare IDs for the home stream)."""
    return stats if scope.home else KeyedStats(stats, scope.key)
