"""The exceptions kinsumer raises.

Everything kinsumer's API raises is a :class:`KinsumerError`; the subclasses that also stand
for a standard exception derive from it too (``except TimeoutError`` catches
:class:`NoRecordWithin`, ``except ValueError`` catches :class:`ConfigError`). Errors from the
background threads that retrying cannot fix are stored and raised from the caller's next
call to ``next*()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .failure import Failure

__all__ = [
    "AWSError",
    "AlreadyStarted",
    "CheckpointModeError",
    "ClientIdInUse",
    "ConfigError",
    "DataLossError",
    "EndpointUnreachable",
    "GoClientsLive",
    "KinsumerError",
    "MissingDependency",
    "NoRecordWithin",
    "NotStarted",
    "HandlerStuck",
    "RecordFailed",
    "ReplayError",
    "StreamNotFound",
    "TableConflict",
    "TableNotFound",
    "TableTimeout",
    "WriteError",
    "WrongTableSchema",
]


class KinsumerError(Exception):
    """Base class of every error kinsumer raises on purpose."""


class ConfigError(KinsumerError, ValueError):
    """A configuration value or constructor argument breaks a rule."""

    def __init__(self, field: str, rule: str, value: object) -> None:
        self.field = field
        self.rule = rule
        self.value = value
        super().__init__(f"{field} {rule}; got {value!r}")


class GoClientsLive(ConfigError):
    """``run()`` found clients of the Go library (twitchscience/kinsumer) live on the application, and
    ``Config.beside_go`` is ``"refuse"``: kinsumer never reads beside the Go library."""

    def __init__(self, application: str, clients: tuple[str, ...], go_client_max_age: float) -> None:
        self.application = application
        self.clients = clients
        which = "client" if len(clients) == 1 else "clients"
        rule = (
            f"is 'refuse', and the Go library's {which} {', '.join(clients)} of application {application!r} "
            f"{'is' if len(clients) == 1 else 'are'} live: kinsumer never reads beside the Go library. Stop the Go "
            "clients first (a clean Stop() hands their shards over at once; a killed one counts as gone "
            f"go_client_max_age={go_client_max_age:g} s after its last heartbeat), or set "
            "Config(beside_go='wait') to start now and take the shards over once they are gone"
        )
        self.field, self.rule, self.value = "Config.beside_go", rule, "refuse"
        KinsumerError.__init__(self, f"Config.beside_go {rule}; see docs/moving-to-kinsumer.md")


class StreamNotFound(KinsumerError):
    """The Kinesis stream does not exist (or was deleted while we read it)."""

    def __init__(self, stream_name: str) -> None:
        self.stream_name = stream_name
        super().__init__(
            f"Kinesis stream {stream_name!r} does not exist; check the name and the region "
            "(or endpoint) the client points at"
        )


class TableNotFound(KinsumerError):
    """One of the application's DynamoDB tables does not exist."""

    def __init__(self, table_name: str) -> None:
        self.table_name = table_name
        application = table_name.rsplit("_", 1)[0]
        super().__init__(
            f"DynamoDB table {table_name!r} does not exist (or is not ACTIVE); create the application's "
            f"tables once first: Kinsumer.create_required_tables() or `kinsumer create-tables {application}`"
        )


class WrongTableSchema(KinsumerError):
    """One of the application's DynamoDB tables exists with another key than kinsumer's."""

    def __init__(self, table_name: str, found: str, key: str) -> None:
        self.table_name = table_name
        self.found = found
        self.expected = f"{key} (string hash key)"
        application = table_name.rsplit("_", 1)[0]
        super().__init__(
            f"DynamoDB table {table_name!r} is keyed by {found}; kinsumer needs {self.expected} alone. "
            f"It was made by something else: use another application name, or delete it "
            f"(`kinsumer delete-tables {application}`) and create the tables again"
        )


class AlreadyStarted(KinsumerError):
    """``run()`` was called on a Kinsumer that already ran, or that was stopped before it ran."""

    def __init__(self, *, stopped_before_run: bool = False) -> None:
        what = "stop() was called before run() on this Kinsumer" if stopped_before_run else "run() was already called"
        super().__init__(f"{what}; a Kinsumer runs once: create a new one to consume again")


class ClientIdInUse(KinsumerError):
    """Another live process heartbeats with this ``client_id`` (it was fixed in the Config)."""

    def __init__(self, client_id: str, host: str, pid: int, seconds_ago: float, *, taken_over: bool = False) -> None:
        self.client_id = client_id
        self.host = host
        self.pid = pid
        self.seconds_ago = seconds_ago
        if taken_over:
            what = (
                f"client_id {client_id!r} was taken over by another process (host {host!r}, pid {pid}) while "
                "this client could not heartbeat; this client stops so that the two do not read the same shards"
            )
        else:
            what = (
                f"client_id {client_id!r} is in use by another live process (host {host!r}, pid {pid}, last "
                f"heartbeat {seconds_ago:.1f} s ago)"
            )
        super().__init__(
            f"{what}; give each process its own client_id, or leave client_id unset for a fresh one. If that "
            "process is gone, start again once its heartbeat is older than client_record_max_age"
        )


class NotStarted(KinsumerError):
    """A call that consumes records (``next*()``, ``process*()``, a ``for`` loop over the Kinsumer) came before
    ``run()``. ``called``: that call, as the message names it."""

    def __init__(self, called: str = "next()") -> None:
        self.called = called
        super().__init__(f"{called} before run(): call run() first (or use 'with Kinsumer(...) as k:')")


class CheckpointModeError(KinsumerError):
    """The ``next*()`` variant does not match ``Config.manual_checkpointing``. ``called``: the call (``"next()"``)."""

    def __init__(self, called: str, use: str, manual: bool) -> None:
        state = "enabled" if manual else "disabled"
        super().__init__(f"{called} is not available: Config.manual_checkpointing is {state}; use {use} instead")


class AWSError(KinsumerError):
    """An AWS call failed in a way retrying cannot fix (access denied, invalid request...).

    The botocore exception is chained as ``__cause__``.
    """

    def __init__(self, operation: str, code: str, message: str) -> None:
        self.operation = operation
        self.code = code
        super().__init__(f"{operation} failed: {code}: {message}")


class EndpointUnreachable(AWSError):
    """An AWS endpoint was never reached: the connection was refused, its host name is unknown, or its TLS
    certificate is not trusted. ``endpoint``: its URL; ``reason``: what failed.

    The botocore exception is chained as ``__cause__``.
    """

    def __init__(self, operation: str, code: str, endpoint: str, reason: str, advice: str) -> None:
        self.endpoint = endpoint
        self.reason = reason
        super().__init__(operation, code, f"cannot reach {endpoint}: {reason}; {advice}")


class NoRecordWithin(KinsumerError, TimeoutError):
    """``next*(timeout=...)`` got no record within the timeout (the consumer is still running)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        super().__init__(f"no record within {timeout:g} s")


class TableTimeout(KinsumerError, TimeoutError):
    """A DynamoDB table did not reach the wanted state in time (creating or deleting it)."""

    def __init__(self, table_name: str, status: str | None, timeout: float) -> None:
        self.table_name = table_name
        super().__init__(
            f"DynamoDB table {table_name!r} is still {status or 'missing'} after {timeout:g} s; "
            "check it in the DynamoDB console (or `aws dynamodb describe-table`) and try again"
        )


class MissingDependency(KinsumerError, ImportError):
    """An optional feature needs a package that is not installed."""

    def __init__(self, feature: str, packages: str, extra: str) -> None:
        super().__init__(f"{feature} needs {packages}: pip install 'pykinsumer[{extra}]'")


class ReplayError(KinsumerError):
    """The Spark source cannot read a micro-batch again exactly as it was first read."""


class DataLossError(KinsumerError):
    """Records the Spark source had not read yet are gone from the stream (``failOnDataLoss`` is true).

    The stream's retention trimmed the record a shard's position follows (``reason`` ``"trimmed"``,
    ``earliest``: the oldest record still in the shard), or the shard itself expired before the query
    read it to its end (``"expired"``). ``replay_to``: set when the records were those of a batch the
    query replays after a restart (from ``position`` to ``replay_to``), and every one of them is gone.
    """

    def __init__(
        self,
        stream: str,
        shard: str,
        position: str,
        reason: str,
        earliest: str | None = None,
        replay_to: str | None = None,
    ) -> None:
        self.stream = stream
        self.shard = shard
        self.position = position
        self.reason = reason
        self.earliest = earliest
        self.replay_to = replay_to  # the recorded end of a batch being replayed, whose records are all gone
        if replay_to is not None:
            message = (
                f"data loss in Kinesis stream {stream!r}: shard {shard}'s records from {position} to {replay_to}, "
                "of a batch the query replays (its sink had not committed it), are gone: the shard's oldest record "
                f"now is {earliest}; the stream's retention trimmed them. Set the option failOnDataLoss to false "
                "to skip them and read on"
            )
        else:
            if reason == "expired":
                what = "expired (ListShards no longer lists it) before the query read it to its end"
            else:
                what = f"no longer holds that record: its oldest record now is {earliest}"
            message = (
                f"data loss in Kinesis stream {stream!r}: shard {shard} was to be read from {position}, but it "
                f"{what}; records the query had not read were trimmed by the stream's retention and may be lost. "
                "Set the option failOnDataLoss to false to read on from the oldest record still there"
            )
        super().__init__(message)


class WriteError(KinsumerError):
    """A record that cannot be written (to a stream, or a dead-letter sink): too large, a bad key, or
    one the service kept refusing."""


class TableConflict(KinsumerError):
    """A row of the application's tables kept changing under this client's conditional writes.

    Another process writes it at the same moment (a second process with this client ID, say):
    the write was tried again and gave up.
    """


class HandlerStuck(KinsumerError):
    """``process()`` stopped: more handler calls ran past its ``timeout`` and are still running than it
    allows (``concurrency`` times ``max_attempts``). A sync call cannot be killed: the client left
    (its shards went to the others, the records in hand are delivered again there), and the process
    should be restarted (by a supervisor).

    ``stuck``: (shard ID, seconds running) of each stuck call; ``bound``: how many were allowed.
    """

    def __init__(self, stuck: list[tuple[str, float]], bound: int) -> None:
        self.stuck = stuck
        self.bound = bound
        calls = ", ".join(f"{shard} for {seconds:.0f} s" for shard, seconds in stuck)
        super().__init__(
            f"{len(stuck)} handler calls are stuck past their timeout (at most {bound} allowed): {calls}; "
            "the client left, restart the process"
        )


class RecordFailed(KinsumerError):
    """``process()`` could not finish a record: it failed ``max_attempts`` times and there is no dead-letter
    sink (or the sink failed too). The record is left unacknowledged, so the shard's next owner tries it again.

    ``failure``: the record and why (a :class:`kinsumer.Failure`); ``sink_error``: what the sink raised, if it did.
    """

    def __init__(self, failure: Failure, sink_error: str | None = None) -> None:
        self.failure = failure
        self.sink_error = sink_error
        record = failure.record
        where = f"{record.shard_id} at {record.sequence_number}"
        if record.sub_sequence_number is not None:
            where += f":{record.sub_sequence_number}"
        what = {
            "raised": f"its handler raised {failure.attempts} times (last: {failure.error})",
            "crashed": f"{failure.attempts} processes died while it was in their handler",
            "expired": f"it expired ({failure.error})",
            "decode": f"decode could not decode it ({failure.error})",
        }.get(failure.reason, f"{failure.reason} after {failure.attempts} attempts ({failure.error})")
        if sink_error is None:
            fix = "pass dead_letter= to hand such records on, or fix the handler; the next owner tries it again"
        else:
            fix = f"the dead-letter sink failed too ({sink_error}); the next owner tries the record again"
        super().__init__(f"the record of {where} could not be handled: {what}; {fix}")
