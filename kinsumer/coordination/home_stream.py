"""Which stream is an application's home stream (see :mod:`.streams`), established once.

Recorded in the metadata table by the application's first client. An application of a version
before that record has checkpoint rows keyed by shard ID that name their stream (``Stream``): that
stream is its home, whatever a client lists first, so that adding a stream in front of it never
reads the old stream's rows as the new one's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..aws.stream_ref import StreamRef
from ..aws.tables import Tables
from . import checkpoints_table, metadata_table
from .streams import StreamScope

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["establish_home_stream", "stream_scope"]


def establish_home_stream(db: DynamoDBClient, tables: Tables, first: str) -> str:
    """The application's home stream: as recorded; else as its checkpoint rows say; else ``first``
    (recorded now, unless another client recorded one meanwhile: that one)."""
    home = metadata_table.read_home_stream(db, tables.metadata)
    if home is not None:
        return home
    inferred = checkpoints_table.recorded_stream_name(db, tables.checkpoints)
    return metadata_table.claim_home_stream(db, tables.metadata, inferred or first)


def stream_scope(db: DynamoDBClient, tables: Tables, stream: str, identity: str = "") -> StreamScope:
    """``stream`` (a name or an ARN) as one of the application's streams (the keys of its rows), writing nothing:
    for readers of the tables (``status``, ``tail``, a reset's plan). An application with no home stream
    yet makes ``stream`` its home when a client starts."""
    ref = StreamRef(stream, field="stream")
    home = metadata_table.read_home_stream(db, tables.metadata)
    if home is None:
        home = checkpoints_table.recorded_stream_name(db, tables.checkpoints)
    return StreamScope(ref.name, identity, home in (None, ref.name), ref.arn or "")
