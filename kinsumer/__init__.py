"""kinsumer: consume a Kinesis stream from several cooperating processes, coordinated in DynamoDB."""

from .config import Config
from .consumer import Kinsumer
from .delivery import Checkpoint
from .errors import (
    AlreadyStarted,
    AWSError,
    CheckpointModeError,
    ClientIdInUse,
    ConfigError,
    KinsumerError,
    MissingDependency,
    NoRecordWithin,
    NotStarted,
    ReplayError,
    StreamNotFound,
    TableConflict,
    TableNotFound,
    TableTimeout,
    WriteError,
    WrongTableSchema,
)
from .record import Record
from .stats import StatReceiver

__all__ = [
    "AWSError",
    "AlreadyStarted",
    "Checkpoint",
    "CheckpointModeError",
    "ClientIdInUse",
    "Config",
    "ConfigError",
    "Kinsumer",
    "KinsumerError",
    "MissingDependency",
    "NoRecordWithin",
    "NotStarted",
    "Record",
    "ReplayError",
    "StatReceiver",
    "StreamNotFound",
    "TableConflict",
    "TableNotFound",
    "TableTimeout",
    "WriteError",
    "WrongTableSchema",
]

__version__ = "0.1.0"
