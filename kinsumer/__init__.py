"""kinsumer: consume a Kinesis stream from several cooperating processes, coordinated in DynamoDB."""

from ._version import __version__ as __version__
from .config import Config
from .consumer import Kinsumer
from .coordination.rewind import ResetPlan
from .delivery import Checkpoint
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
from .health import Health
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
