"""kinsumer: consume a Kinesis stream from several cooperating processes, coordinated in DynamoDB."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__ as __version__
from .config import Config
from .errors import (
    AlreadyStarted,
    AWSError,
    CheckpointModeError,
    ClientIdInUse,
    ConfigError,
    DataLossError,
    EndpointUnreachable,
    GoClientsLive,
    HandlerStuck,
    KinsumerError,
    MissingDependency,
    NoRecordWithin,
    NotStarted,
    RecordFailed,
    ReplayError,
    StreamNotFound,
    TableConflict,
    TableNotFound,
    TableTimeout,
    WriteError,
    WrongTableSchema,
)
from .failure import Failure
from .record import Record
from .stats import StatReceiver

if TYPE_CHECKING:
    from .consumer import Kinsumer
    from .coordination.rewind import ResetPlan
    from .delivery import Checkpoint
    from .health import Health

#: The names imported when first used: the consumer pulls in every layer (about 0.2 CPU-s), which a process
#: that only needs a part (a Spark worker reading shards, ``kinsumer --help``) does not pay.
_LAZY = {
    "Kinsumer": ".consumer",
    "ResetPlan": ".coordination.rewind",
    "Checkpoint": ".delivery",
    "Health": ".health",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kinsumer' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})

__all__ = [
    "AWSError",
    "AlreadyStarted",
    "Checkpoint",
    "CheckpointModeError",
    "ClientIdInUse",
    "Config",
    "ConfigError",
    "DataLossError",
    "EndpointUnreachable",
    "Failure",
    "GoClientsLive",
    "Kinsumer",
    "KinsumerError",
    "MissingDependency",
    "NoRecordWithin",
    "NotStarted",
    "Record",
    "HandlerStuck",
    "Health",
    "RecordFailed",
    "ReplayError",
    "ResetPlan",
    "StatReceiver",
    "StreamNotFound",
    "TableConflict",
    "TableNotFound",
    "TableTimeout",
    "WriteError",
    "WrongTableSchema",
]
