"""The consumer's configuration: a frozen, validated value object, and every default it starts from.

A base module: it imports only :mod:`.errors` and :mod:`.stats`, and the layers below the consumer take
their defaults from here."""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any, Literal

import attrs

from .errors import ConfigError
from .stats import StatReceiver

#: Seconds between two GetRecords calls on one shard (Kinesis allows 5 per second per shard).
DEFAULT_THROTTLE_DELAY = 0.25
#: The most records one GetRecords call may return (Kinesis' limit).
MAX_RECORDS_PER_CALL = 10_000
#: The longest wait between two reads of a shard whose reads come back empty.
DEFAULT_IDLE_POLL_INTERVAL = 1.0
#: The longest wait between two reads of a shard whose reads have come back empty for a long time.
DEFAULT_MAX_IDLE_POLL_INTERVAL = 5.0
#: The default bound on bytes of record data read from Kinesis and not yet taken
#: (see :class:`~kinsumer.delivery.budget.ByteBudget`).
DEFAULT_MAX_BUFFERED_BYTES = 64 * 2**20
#: Threads that make a client's blocking calls at most (Kinesis reads, DynamoDB writes of the shards).
DEFAULT_THREADS = 32
#: How the shards are shared out among the clients (see :mod:`kinsumer.coordination.assignment`).
Assignment = Literal["modulo", "balanced"]
ASSIGNMENTS: tuple[Assignment, ...] = ("modulo", "balanced")
#: The longest handoff_timeout: stop() waits about this long at most for a shard's records.
MAX_HANDOFF_TIMEOUT = 300.0
#: What a client does while a client of the Go library (twitchscience/kinsumer) is live on its application.
BesideGo = Literal["refuse", "wait"]
#: How long a Go client's row counts as live by default: the Go library's own age of a client row,
#: 5 x its shardCheckFrequency (a minute by default).
DEFAULT_GO_CLIENT_MAX_AGE = 300.0
#: What the readers do with the user records of KPL aggregates outside their shard's hash key range.
KplOutsideShard = Literal["deliver", "drop"]
#: The spans of process*()'s handler calls: one per run of a shard's records, one per call, or none.
HandlerSpans = Literal["run", "call", "off"]

__all__ = [
    "STREAM_NAME",
    "BesideGo",
    "Config",
    "HandlerSpans",
    "InitialPosition",
    "KplOutsideShard",
    "validate_application_name",
    "validate_names",
]

InitialPosition = Literal["TRIM_HORIZON", "LATEST", "AT_TIMESTAMP"]
_POSITIONS = ("TRIM_HORIZON", "LATEST", "AT_TIMESTAMP")
_BILLING_MODES = ("PAY_PER_REQUEST", "PROVISIONED")
_STAT_METHODS = tuple(name for name in vars(StatReceiver) if not name.startswith("_"))


def _seconds(minimum: float, *, inclusive: bool, why: str = "", maximum: float = math.inf) -> Any:
    """Validator: a finite number of seconds above ``minimum`` (and at most ``maximum``)."""

    def check(instance: Any, attribute: attrs.Attribute[float], value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ConfigError(f"Config.{attribute.name}", "must be a finite number of seconds", value)
        if value < minimum or (not inclusive and value == minimum):
            op = ">=" if inclusive else ">"
            raise ConfigError(f"Config.{attribute.name}", f"must be {op} {minimum:g} seconds{why}", value)
        if value > maximum:
            raise ConfigError(f"Config.{attribute.name}", f"must be <= {maximum:g} seconds", value)

    return check


def _integer(low: int, high: int | None = None) -> Any:
    def check(instance: Any, attribute: attrs.Attribute[int], value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"Config.{attribute.name}", "must be an integer", value)
        if value < low or (high is not None and value > high):
            rule = f"must be >= {low}" if high is None else f"must be between {low} and {high}"
            raise ConfigError(f"Config.{attribute.name}", rule, value)

    return check


def _one_of(choices: tuple[str, ...]) -> Any:
    def check(instance: Any, attribute: attrs.Attribute[str], value: object) -> None:
        if value not in choices:
            raise ConfigError(f"Config.{attribute.name}", f"must be one of {', '.join(choices)}", value)

    return check


def _spans_choice(value: object) -> object:
    """``handler_spans`` as it was once given, a bool: True (a span per call, the former default), False (none)."""
    if value is True:
        return "call"
    if value is False:
        return "off"
    return value


def _boolean(instance: Any, attribute: attrs.Attribute[bool], value: object) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"Config.{attribute.name}", "must be True or False", value)


def _stat_receiver(instance: Any, attribute: attrs.Attribute[StatReceiver], value: object) -> None:
    missing = [name for name in _STAT_METHODS if not callable(getattr(value, name, None))]
    if value is None or missing:
        rule = "must be a StatReceiver (subclass kinsumer.StatReceiver)"
        if value is not None:
            rule += f"; missing {', '.join(missing)}"
        raise ConfigError("Config.stats", rule, value)


def _client_id(instance: Any, attribute: attrs.Attribute[str | None], value: object) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ConfigError("Config.client_id", "must be None or a non-empty string", value)


def _consumer_name(instance: Any, attribute: attrs.Attribute[str | None], value: object) -> None:
    if value is not None and (not isinstance(value, str) or not _CONSUMER_NAME.fullmatch(value)):
        raise ConfigError("Config.efo_consumer_name", "must be None or 1-128 characters of A-Z a-z 0-9 _ . -", value)


_ROLE_ARN = re.compile(r"arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}")
_EXTERNAL_ID = re.compile(r"[\w+=,.@:/-]{2,1224}")
_SESSION_NAME = re.compile(r"[\w+=,.@-]{2,64}")


def _matching(name: str, pattern: re.Pattern[str], rule: str) -> Any:
    def check(instance: Any, attribute: Any, value: object) -> None:
        if value is not None and (not isinstance(value, str) or not pattern.fullmatch(value)):
            raise ConfigError(name, f"must be None or {rule}", value)

    return check


def _timestamp(instance: Any, attribute: attrs.Attribute[dt.datetime | None], value: object) -> None:
    if value is None:
        return
    if not isinstance(value, dt.datetime) or value.tzinfo is None:
        raise ConfigError("Config.initial_timestamp", "must be a timezone-aware datetime", value)


def _as_float(value: object) -> object:
    """Converter: accept ints for durations without accepting strings or bools."""
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


@attrs.frozen(kw_only=True)
class Config:
    """How a Kinsumer reads, coordinates and checkpoints. Durations are seconds.

    Make variants with ``attrs.evolve(config, field=value)``. Every invalid value raises
    :class:`~kinsumer.ConfigError` naming the field and the rule.

    The defaults fail over a dead client's shards about ``client_record_max_age`` (7 s) after its
    last heartbeat, 5-7 s after it died, and keep DynamoDB traffic to a few requests per second
    per client.
    """

    #: Time between two GetRecords calls on one shard; a shard with a backlog (a full page) makes them
    #: back to back, at most 1 / throttle_delay in any second (Kinesis allows 5 reads/s/shard).
    throttle_delay: float = attrs.field(
        default=DEFAULT_THROTTLE_DELAY,
        converter=_as_float,
        validator=_seconds(0.2, inclusive=True, why=" (Kinesis allows 5 GetRecords per second per shard)"),
    )
    #: The longest wait between two GetRecords of a shard whose reads come back empty. A shard is read
    #: every ``throttle_delay`` while it brings records and for a second of empty reads after that; then
    #: each empty read doubles the wait, up to this. A read with records brings the full rate back at
    #: once. A record written to an idle shard waits at most about this long. At least ``throttle_delay``.
    idle_poll_interval: float = attrs.field(
        default=DEFAULT_IDLE_POLL_INTERVAL, converter=_as_float, validator=_seconds(0, inclusive=False)
    )
    #: The longest wait between two GetRecords of a long-idle shard: after a minute of empty reads at
    #: ``idle_poll_interval``, each empty read doubles the wait again, up to this. A read with records
    #: brings the full rate back at once. A record written to a shard idle for over a minute waits at
    #: most about this long. None: 5 s (``idle_poll_interval`` if longer); equal to ``idle_poll_interval``:
    #: no such slowing down. At least ``idle_poll_interval``.
    max_idle_poll_interval: float | None = attrs.field(
        default=None, converter=_as_float, validator=attrs.validators.optional(_seconds(0, inclusive=False))
    )
    #: How often, at most, a shard's checkpoint is written; only when it moved (an idle shard
    #: writes nothing: the client's heartbeat keeps its shards). After a crash, up to this much
    #: of each shard's processed records is delivered again.
    commit_frequency: float = attrs.field(default=3.0, converter=_as_float, validator=_seconds(0, inclusive=False))
    #: Heartbeat and membership / shard-cache refresh period.
    shard_check_frequency: float = attrs.field(default=2.0, converter=_as_float, validator=_seconds(0, inclusive=False))
    #: How often the leader refreshes the shard cache from Kinesis.
    leader_action_frequency: float = attrs.field(
        default=10.0, converter=_as_float, validator=_seconds(0, inclusive=False)
    )
    #: When a silent client (and the shards it owns) counts as dead. None: 3.5 x shard_check_frequency;
    #: at least 3 x shard_check_frequency.
    client_record_max_age: float | None = attrs.field(
        default=None, converter=_as_float, validator=attrs.validators.optional(_seconds(0, inclusive=False))
    )
    #: Capacity, in records, of the queue between the shard readers and next().
    buffer_size: int = attrs.field(default=1000, validator=_integer(1))
    #: The most bytes of record data the client holds between reading them and next() taking them,
    #: over all its shards (the queue and pages waiting for room in it): a shard reads only once
    #: the bytes its page may hold fit. At least 1 MiB.
    max_buffered_bytes: int = attrs.field(default=DEFAULT_MAX_BUFFERED_BYTES, validator=_integer(2**20))
    #: The most threads that make the client's calls for its shards at once (GetRecords and the
    #: shards' DynamoDB writes); started as needed, whatever the number of shards.
    reader_threads: int = attrs.field(default=DEFAULT_THREADS, validator=_integer(1, 1024))
    #: True: use next_with_checkpointer() and call each Checkpoint; False: use next().
    manual_checkpointing: bool = attrs.field(default=False, validator=_boolean)
    #: Where a shard with no checkpoint starts.
    initial_position: InitialPosition = attrs.field(default="TRIM_HORIZON", validator=_one_of(_POSITIONS))
    #: The timestamp for initial_position="AT_TIMESTAMP" (timezone-aware).
    initial_timestamp: dt.datetime | None = attrs.field(default=None, validator=_timestamp)
    #: The Limit of each GetRecords call.
    max_records_per_call: int = attrs.field(default=MAX_RECORDS_PER_CALL, validator=_integer(1, MAX_RECORDS_PER_CALL))
    #: How long a client that gives up a shard waits for delivered records to be checkpointed
    #: (at most 300 s: it bounds how long ``stop()`` takes).
    handoff_timeout: float = attrs.field(
        default=10.0,
        converter=_as_float,
        validator=_seconds(0, inclusive=True, maximum=MAX_HANDOFF_TIMEOUT),
    )
    #: Receives counters and timings; the default does nothing.
    stats: StatReceiver = attrs.field(factory=StatReceiver, validator=_stat_receiver)
    #: This client's identity in the application (its row in the clients table, the owner of its shards).
    #: None: a new random UUID for each Kinsumer, so a restarted process is a new client. Set one, unique per
    #: live process, for a restarted process to be the same client (after a crash, on the same host, it takes
    #: its shards back at once). The constructor's ``client_name`` is only a display name.
    client_id: str | None = attrs.field(default=None, validator=_client_id)
    #: Billing of the tables create_required_tables() makes.
    billing_mode: Literal["PAY_PER_REQUEST", "PROVISIONED"] = attrs.field(
        default="PAY_PER_REQUEST", validator=_one_of(_BILLING_MODES)
    )
    #: How shards are spread over the live clients: "modulo" (the Go library's: a join or a leave
    #: may move almost every shard) or "balanced" (the leader keeps each shard with its owner
    #: while balance allows: a leave moves only the leaver's shards). Every client of an
    #: application must use the same one.
    assignment: Assignment = attrs.field(default="modulo", validator=_one_of(ASSIGNMENTS))
    #: None: read with GetRecords (polling). A name: read with enhanced fan-out through the stream
    #: consumer of that name (registered if absent; each owned shard gets SubscribeToShard).
    efo_consumer_name: str | None = attrs.field(default=None, validator=_consumer_name)
    #: A KPL aggregate read after a split or a merge can hold user records whose hash keys are outside
    #: the range of the shard that stored it; the KPL sends those again to the right shard. "deliver"
    #: hands them on (an aggregator that mixes keys loses nothing; a KPL record may come twice);
    #: "drop" leaves them out, as KCL does. Either way they are counted. See docs/kpl.md.
    kpl_outside_shard: KplOutsideShard = attrs.field(default="deliver", validator=_one_of(("deliver", "drop")))
    #: Read capacity units of each table when billing_mode="PROVISIONED".
    read_capacity: int = attrs.field(default=10, validator=_integer(1))
    #: Write capacity units of each table when billing_mode="PROVISIONED".
    write_capacity: int = attrs.field(default=10, validator=_integer(1))
    #: Readiness (``Kinsumer.health()``, ``/readyz``) fails while a shard this client owns is further behind
    #: than this: its MillisBehindLatest, or the age of its oldest record in hand. None: not checked.
    max_healthy_lag: float | None = attrs.field(
        default=None, converter=_as_float, validator=attrs.validators.optional(_seconds(0, inclusive=False))
    )
    #: The OpenTelemetry spans of ``process*()`` and ``aprocess*()``, made once the application set a
    #: TracerProvider (an SDK) and the API is importable. "run": a span per run of one shard's records (up
    #: to 64 handed over in a row) around their first calls, each retry in a span of its own; "call": a span
    #: per handler call (a recording span costs the SDK tens of µs, several times kinsumer's own cost of a
    #: record); "off": none, whatever is set. With ``trace_context`` (each record's span the child of its
    #: producer's) "run" is "call"; a batch handler's call is in a span of its own with either. True and False
    #: are taken as "call" and "off". See docs/observability.md#traces.
    handler_spans: HandlerSpans = attrs.field(
        default="run", converter=_spans_choice, validator=_one_of(("run", "call", "off"))
    )
    #: Read the stream as this IAM role (a stream in another account): Kinesis calls use the role's
    #: credentials, assumed with STS from the caller's and refreshed before they expire; DynamoDB
    #: stays on the caller's own. None: the caller's credentials for both.
    role_arn: str | None = attrs.field(
        default=None,
        validator=_matching("Config.role_arn", _ROLE_ARN, "an IAM role ARN (arn:aws:iam::123456789012:role/name)"),
    )
    #: The external ID the role's trust policy asks for, if it does (with role_arn).
    external_id: str | None = attrs.field(
        default=None,
        validator=_matching("Config.external_id", _EXTERNAL_ID, "2-1224 characters of A-Z a-z 0-9 _ + = , . @ : / -"),
    )
    #: The assumed role's session name, as CloudTrail shows it (with role_arn). None: ``kinsumer-<client name>``.
    role_session_name: str | None = attrs.field(
        default=None,
        validator=_matching("Config.role_session_name", _SESSION_NAME, "2-64 characters of A-Z a-z 0-9 _ + = , . @ -"),
    )
    #: While a client of the Go library (twitchscience/kinsumer) is live on the application, kinsumer reads
    #: nothing (it never reads beside the Go library; a running client hands its shards over to it).
    #: "refuse": run() raises GoClientsLive; "wait": run() starts and the client takes the shards once the Go
    #: clients are gone (a rolling deploy). See docs/moving-to-kinsumer.md.
    beside_go: BesideGo = attrs.field(default="refuse", validator=_one_of(("refuse", "wait")))
    #: How long a Go client's row counts as live after its last heartbeat: the Go fleet's
    #: shardCheckFrequency x 5 (300 s with the Go library's defaults). A Go client killed without a clean
    #: Stop() keeps its shards that long.
    go_client_max_age: float = attrs.field(
        default=DEFAULT_GO_CLIENT_MAX_AGE, converter=_as_float, validator=_seconds(0, inclusive=False)
    )

    @property
    def reading(self) -> str:
        """How shards are read: ``"polling"``, or ``"fan-out:<efo_consumer_name>"``."""
        return "polling" if self.efo_consumer_name is None else f"fan-out:{self.efo_consumer_name}"

    @property
    def effective_client_record_max_age(self) -> float:
        """client_record_max_age, or its default of 3.5 x shard_check_frequency (a heartbeat then keeps the
        client's shards 1.75 rounds, so it may land 0.75 of a round late)."""
        if self.client_record_max_age is None:
            return 3.5 * self.shard_check_frequency
        return self.client_record_max_age

    @property
    def effective_max_idle_poll_interval(self) -> float:
        """max_idle_poll_interval, or its default of 5 s (``idle_poll_interval`` if that is longer)."""
        if self.max_idle_poll_interval is None:
            return max(DEFAULT_MAX_IDLE_POLL_INTERVAL, self.idle_poll_interval)
        return self.max_idle_poll_interval

    def __attrs_post_init__(self) -> None:
        for name in ("external_id", "role_session_name"):
            if getattr(self, name) is not None and self.role_arn is None:
                rule = "goes with role_arn (the role to assume): set role_arn too"
                raise ConfigError(f"Config.{name}", rule, getattr(self, name))
        max_age = self.effective_client_record_max_age
        if self.leader_action_frequency < self.shard_check_frequency:
            raise ConfigError(
                "Config.leader_action_frequency",
                f"must be >= shard_check_frequency ({self.shard_check_frequency:g} s)",
                self.leader_action_frequency,
            )
        if max_age < 3 * self.shard_check_frequency:  # a heartbeat vouches for half of it: the next one must land
            raise ConfigError(
                "Config.client_record_max_age",
                f"must be >= 3 x shard_check_frequency ({3 * self.shard_check_frequency:g} s): a client's "
                "heartbeat keeps its shards for half of it, and the next heartbeat must land in that time",
                self.client_record_max_age,
            )
        if self.idle_poll_interval < self.throttle_delay:
            raise ConfigError(
                "Config.idle_poll_interval",
                f"must be >= throttle_delay ({self.throttle_delay:g} s): it is the longest wait between two reads",
                self.idle_poll_interval,
            )
        if self.effective_max_idle_poll_interval < self.idle_poll_interval:
            raise ConfigError(
                "Config.max_idle_poll_interval",
                f"must be >= idle_poll_interval ({self.idle_poll_interval:g} s): it is the longest wait between "
                "two reads of a long-idle shard",
                self.max_idle_poll_interval,
            )
        if (self.initial_position == "AT_TIMESTAMP") != (self.initial_timestamp is not None):
            raise ConfigError(
                "Config.initial_timestamp",
                "must be set exactly when initial_position is 'AT_TIMESTAMP'",
                self.initial_timestamp,
            )


_CONSUMER_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_TABLE_PREFIX = re.compile(r"[A-Za-z0-9_.-]{1,240}")
#: A stream's name (the one rule: the stream references of kinsumer.aws.stream_ref and the Spark options use it).
STREAM_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def validate_names(stream_name: object, application_name: object, client_name: object) -> None:
    """Check the constructor's names, raising ConfigError naming the argument."""
    if not isinstance(stream_name, str) or not STREAM_NAME.fullmatch(stream_name):
        raise ConfigError("stream_name", "must be 1-128 characters of A-Z a-z 0-9 _ . -", stream_name)
    validate_application_name(application_name)
    if not isinstance(client_name, str) or not client_name:
        raise ConfigError("client_name", "must be a non-empty string", client_name)


def validate_application_name(application_name: object) -> None:
    """Check an application's name (its tables' prefix), raising ConfigError naming it."""
    if not isinstance(application_name, str) or not _TABLE_PREFIX.fullmatch(application_name):
        raise ConfigError(
            "application_name",
            "must be 1-240 characters of A-Z a-z 0-9 _ . - (it prefixes the DynamoDB table names)",
            application_name,
        )
