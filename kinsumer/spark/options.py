"""The options of the Spark source: names, aliases, checks. Pure, no Spark, no I/O.

Spark hands option keys over lower-cased. Every key must be one of ours or an alias that
AWS's spark-sql-kinesis-connector uses for the same thing (``kinesis.streamName``,
``kinesis.endpointUrl``, ...); anything else is an error that names the valid options, so a
misspelled limit or endpoint never silently falls back to a default.
"""

from __future__ import annotations

import datetime as dt
import difflib
import re
from collections.abc import Mapping

import attrs

from ..aws.stream_ref import StreamRef, distinct_names, reading_region
from ..aws.tables import Tables
from ..config import STREAM_NAME, Config
from ..errors import ConfigError
from .path_ledger import check_metadata_path

__all__ = ["BATCH_ONLY_IGNORED", "CREDENTIALS", "OPTIONS", "OptionNames", "Role", "SourceOptions", "duration", "number"]

#: Our option names (as documented) and what each is for.
OPTIONS: dict[str, str] = {
    "streamName": "the Kinesis stream (this or streamARN required); several streams separated by commas (streamNames: "
    "the same)",
    "streamARN": "the Kinesis stream by ARN (a stream another account shares): called by ARN, in the ARN's region; "
    "several separated by commas; with streamName, read after its streams",
    "region": "the AWS region (default: the standard AWS chain)",
    "endpointUrl": "the Kinesis endpoint",
    "dynamodbEndpointUrl": "the DynamoDB endpoint of the batch ledger",
    "applicationName": "names the ledger table <applicationName>_metadata (default kinsumer-spark-<stream>)",
    "metadataPath": "keeps the batch ledger at this path (local or s3://bucket/prefix) instead of DynamoDB",
    "startingPosition": "TRIM_HORIZON (default), EARLIEST (the same), LATEST, or AT_TIMESTAMP <ISO 8601 time>",
    "initialPosition": "the same as startingPosition",
    "atTimestamp": "the time (ISO 8601) of startingPosition AT_TIMESTAMP",
    "maxRecordsPerShard": "records read from one shard in one micro-batch at most (default 100000)",
    "maxRecordsPerTrigger": "records in one micro-batch at most, over all shards (default: no total)",
    "minRecordsPerTrigger": "a micro-batch waits until this many records are available, or maxTriggerDelay passed",
    "maxTriggerDelay": "with minRecordsPerTrigger, the longest a micro-batch waits (default 15m; 30s, 500ms, 1h, ...)",
    "readTimeBudget": "seconds one shard's read in a micro-batch may take (default 10)",
    "shardsPerTask": "shards one Spark task reads, concurrently (default 4; 1: a task per shard)",
    "failOnDataLoss": "true (default): fail the query when records it had not read were trimmed by the stream's "
    "retention; false: log a warning, count it, and read on from the oldest record still there",
    "idleBatchInterval": "seconds between checks of a shard that was at the tip of the stream (default 1)",
    "consumerName": "reads with enhanced fan-out (SubscribeToShard) through this stream consumer, registered if absent",
    "consumerType": "GetRecords (default: polling) or SubscribeToShard (enhanced fan-out: needs consumerName)",
    "roleArn": "reads the stream as this IAM role (a stream in another account): each Spark process assumes it "
    "with STS from its own credentials; the ledger stays on them",
    "roleSessionName": "the session name of roleArn (default kinsumer-spark)",
    "externalId": "the external ID roleArn's trust policy asks for",
    "stsEndpointUrl": "the STS endpoint roleArn is assumed through",
    "dropRemovedStreams": "true: a restarted query drops the streams no longer named (default false: it fails)",
    "kplOutsideShard": "deliver (default) or drop: the user records of KPL aggregates outside their shard's hash key "
    "range (after a split or a merge), counted either way",
}

#: spark-sql-kinesis-connector's names for the same options.
_ALIASES = {
    "streamNames": "streamName",
    "kinesis.streamName": "streamName",
    "kinesis.region": "region",
    "kinesis.endpointUrl": "endpointUrl",
    "kinesis.startingPosition": "startingPosition",
    "kinesis.maxFetchRecordsPerShard": "maxRecordsPerShard",
    "kinesis.maxFetchTimePerShardSec": "readTimeBudget",
    "kinesis.metadataPath": "metadataPath",
    "kinesis.failOnDataLoss": "failOnDataLoss",
    "kinesis.consumerName": "consumerName",
    "kinesis.consumerType": "consumerType",
    "kinesis.stsRoleArn": "roleArn",
    "kinesis.stsSessionName": "roleSessionName",
    "kinesis.stsEndpointUrl": "stsEndpointUrl",
}

_CHAIN = "credentials come from the standard AWS chain (environment, profile, instance role)"
#: spark-sql-kinesis-connector's credential options, refused by reading and writing alike.
CREDENTIALS = {
    "kinesis.awsAccessKeyId": _CHAIN,
    "kinesis.awsSecretKey": _CHAIN,
    "kinesis.sessionToken": _CHAIN,
}

#: spark-sql-kinesis-connector options we know of and do not take, with what to do instead.
_NOT_TAKEN = {
    **CREDENTIALS,
    "kinesis.metadataCommitterType": "the batch ledger is the DynamoDB table <applicationName>_metadata",
    "kinesis.dynamodb.tableName": "set applicationName: the ledger table is <applicationName>_metadata",
}

#: Options a batch read (``spark.read``) has no use for: it reads everything up to now, once.
BATCH_ONLY_IGNORED = (
    "maxRecordsPerTrigger",
    "minRecordsPerTrigger",
    "maxTriggerDelay",
    "idleBatchInterval",
    "dynamodbEndpointUrl",
    "applicationName",
    "metadataPath",
    "consumerName",
    "dropRemovedStreams",
    "failOnDataLoss",  # a batch read starts at TRIM_HORIZON or a time: nothing it had not read can be trimmed
)

_POSITIONS = ("TRIM_HORIZON", "LATEST", "AT_TIMESTAMP")
_CONSUMER_TYPES = {"getrecords": "GetRecords", "subscribetoshard": "SubscribeToShard"}


@attrs.frozen
class OptionNames:
    """The options of one side of the format (reading or writing): ours, AWS's aliases, AWS's we refuse."""

    ours: Mapping[str, str]  # name -> what it is for
    aliases: Mapping[str, str] = attrs.field(factory=dict)  # AWS connector's name -> ours
    not_taken: Mapping[str, str] = attrs.field(factory=dict)  # AWS connector's name -> what to do instead

    def canonical(self, options: Mapping[str, str]) -> dict[str, str]:
        """Our names for the given options; an error for an unknown option or two values for one."""
        ours = {name.lower(): name for name in self.ours}
        aliases = {alias.lower(): name for alias, name in self.aliases.items()}
        not_taken = {name.lower(): (name, why) for name, why in self.not_taken.items()}
        found: dict[str, tuple[str, str]] = {}  # our name -> (key as given, value)
        for key, value in options.items():
            low = key.lower()
            if low in not_taken:
                given, why = not_taken[low]
                rule = f"is spark-sql-kinesis-connector's and not taken here: {why}"
                raise ConfigError(f"option {given}", rule, "(not shown)")  # it may be a secret
            name = ours.get(low) or aliases.get(low)
            if name is None:
                close = difflib.get_close_matches(low, [*ours, *aliases], n=1, cutoff=0.75)
                hint = f"did you mean {ours.get(close[0]) or self._alias_name(close[0])}? " if close else ""
                valid = ", ".join(self.ours)
                raise ConfigError(f"option {key}", f"is unknown: {hint}valid options are {valid}", value)
            if name == "initialPosition":
                name = "startingPosition"
            if name in found and found[name][1] != value:
                twice = f"is given twice ({found[name][0]} and {key}) with different values"
                raise ConfigError(f"option {name}", twice, value)
            found[name] = (key, value)
        return {name: value for name, (_, value) in found.items()}

    def _alias_name(self, lowered: str) -> str:
        return next(alias for alias in self.aliases if alias.lower() == lowered)


_READING = OptionNames(OPTIONS, _ALIASES, _NOT_TAKEN)


def number(name: str, raw: str | None, default: float, *, whole: bool = False, minimum: float = 0) -> float:
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"option {name}", "must be a number", raw) from None
    if whole and value != int(value):
        raise ConfigError(f"option {name}", "must be a whole number", raw)
    if value < minimum:
        raise ConfigError(f"option {name}", f"must be >= {minimum:g}", raw)
    return value


#: Spark's time units (``JavaUtils.timeStringAs``), in seconds.
_TIME_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"(-?[0-9]+)([a-z]+)?")


def duration(name: str, raw: str | None, default: float) -> float:
    """A duration in seconds, written as Spark writes them (``Utils.timeStringAsMs``, as Kafka's
    ``maxTriggerDelay``): a whole number and a unit (``us``, ``ms``, ``s``, ``m`` or ``min``, ``h``,
    ``d``); a bare number is milliseconds, as in Spark."""
    if raw is None:
        return default
    found = _DURATION.fullmatch(raw.strip().lower())
    if found is None or (found[2] is not None and found[2] not in _TIME_UNITS):
        rule = "must be a whole number and a unit (us, ms, s, m, min, h, d), e.g. 30s or 15m"
        raise ConfigError(f"option {name}", rule, raw)
    seconds = int(found[1]) * _TIME_UNITS[found[2] or "ms"]
    if seconds < 0:
        raise ConfigError(f"option {name}", "must be >= 0", raw)
    return seconds
def true_or_false(name: str, raw: str | None, default: bool = False) -> bool:
    """A boolean option: ``true`` or ``false`` (any case); ``default`` if absent."""
    if raw is None:
        return default
    value = {"true": True, "false": False}.get(raw.strip().lower())
    if value is None:
        raise ConfigError(f"option {name}", "must be true or false", raw)
    return value


def _starting_position(raw: str | None, at: str | None) -> tuple[str, dt.datetime | None]:
    text = (raw or "TRIM_HORIZON").strip()
    kind, _, when_text = text.partition(" ")
    kind = "TRIM_HORIZON" if kind.upper() == "EARLIEST" else kind.upper()
    if kind not in _POSITIONS:
        raise ConfigError("option startingPosition", "must be TRIM_HORIZON, EARLIEST, LATEST or AT_TIMESTAMP", raw)
    if kind != "AT_TIMESTAMP":
        if when_text or at:
            raise ConfigError("option atTimestamp", "is only for startingPosition AT_TIMESTAMP", at or raw)
        return kind, None
    if when_text and at and when_text.strip() != at.strip():
        raise ConfigError("option atTimestamp", "differs from the time in startingPosition", at)
    value = (when_text or at or "").strip()
    try:
        when = dt.datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
    except ValueError:
        raise ConfigError("option atTimestamp", "must be an ISO 8601 time with AT_TIMESTAMP", value) from None
    return kind, when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def stream_names(raw: str | None) -> tuple[str, ...]:
    """The streams of ``streamName``: one, or several separated by commas, each named once."""
    names = tuple(name.strip() for name in (raw or "").split(","))
    if not raw or not all(names):
        empty = "names an empty stream (two commas, or one at an end)"
        rule = "is required (or streamARN)" if not (raw or "").strip() else empty
        raise ConfigError("option streamName", rule, raw)
    for name in names:
        if not STREAM_NAME.fullmatch(name):
            raise ConfigError("option streamName", f"{name!r} is not a stream name (1-128 of a-z A-Z 0-9 _ . -)", raw)
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ConfigError("option streamName", f"names {', '.join(twice)} twice", raw)
    return names


def _kpl_outside_shard(raw: str | None) -> bool:
    """Whether ``kplOutsideShard`` says drop (deliver, the default, says not)."""
    choice = (raw or "deliver").strip().lower()
    if choice not in ("deliver", "drop"):
        raise ConfigError("option kplOutsideShard", "must be deliver or drop", raw)
    return choice == "drop"


def stream_refs(names: str | None, arns: str | None, region: str | None) -> tuple[StreamRef, ...]:
    """The streams of ``streamName`` (names) and ``streamARN`` (ARNs), in that order: at least one, of distinct
    names (the offsets, the ledger and the ``stream`` column know a stream by its name), in one region."""
    if arns is None:
        refs = tuple(StreamRef(name) for name in stream_names(names))
    else:
        texts = tuple(arn.strip() for arn in arns.split(","))
        if not all(texts):
            raise ConfigError("option streamARN", "names an empty stream (two commas, or one at an end)", arns)
        by_arn = tuple(StreamRef(text, field="option streamARN") for text in texts)
        if any(ref.arn is None for ref in by_arn):
            raise ConfigError("option streamARN", "must hold stream ARNs: give stream names with streamName", arns)
        refs = (*(StreamRef(name) for name in stream_names(names)), *by_arn) if names is not None else by_arn
    distinct_names(refs, field="option streamARN" if arns is not None else "option streamName")
    reading_region(refs, region, field="option streamARN")
    return refs


def _consumer_name(name: str | None, kind: str | None) -> str | None:
    """The enhanced fan-out consumer to read through; None: polling (GetRecords)."""
    chosen = _CONSUMER_TYPES.get((kind or "").strip().lower()) if kind is not None else None
    if kind is not None and chosen is None:
        raise ConfigError("option consumerType", "must be GetRecords or SubscribeToShard", kind)
    if name is not None and not name.strip():
        raise ConfigError("option consumerName", "must name a stream consumer", name)
    if chosen == "SubscribeToShard" and name is None:
        rule = "is required with consumerType SubscribeToShard: the stream consumer to read through"
        raise ConfigError("option consumerName", rule, name)
    if chosen == "GetRecords" and name is not None:
        raise ConfigError("option consumerName", "is for consumerType SubscribeToShard, not GetRecords", name)
    return name


@attrs.frozen
class Role:
    """An IAM role to read the stream as (``roleArn`` and its companions), checked."""

    arn: str
    session_name: str = "kinsumer-spark"
    external_id: str | None = None
    sts_endpoint_url: str | None = None


def _role(arn: str | None, session_name: str | None, external_id: str | None, sts: str | None) -> Role | None:
    if arn is None:
        for name, value in (("roleSessionName", session_name), ("externalId", external_id), ("stsEndpointUrl", sts)):
            if value is not None:
                raise ConfigError(f"option {name}", "goes with roleArn (the role to assume): set roleArn too", value)
        return None
    try:  # the same rules as the consumer's Config
        Config(role_arn=arn, role_session_name=session_name, external_id=external_id)
    except ConfigError as exc:
        raise ConfigError(_ROLE_OPTIONS.get(exc.field, exc.field), exc.rule, exc.value) from None
    return Role(arn, session_name or "kinsumer-spark", external_id, sts)


_ROLE_OPTIONS = {
    "Config.role_arn": "option roleArn",
    "Config.role_session_name": "option roleSessionName",
    "Config.external_id": "option externalId",
}


@attrs.frozen
class SourceOptions:
    """The source's options, checked."""

    stream: str  # the first of ``streams``: it names the default ledger table
    region: str | None = None
    endpoint_url: str | None = None
    dynamodb_endpoint_url: str | None = None
    initial_position: str = "TRIM_HORIZON"
    at_timestamp: dt.datetime | None = None
    max_records_per_shard: int = 100_000
    max_records_per_trigger: int | None = None
    min_records_per_trigger: int | None = None
    max_trigger_delay: float = 900.0  # seconds; only with min_records_per_trigger
    application_name: str = ""
    metadata_path: str | None = None
    idle_batch_interval: float = 1.0
    read_time_budget: float = 10.0
    shards_per_task: int = 4
    consumer_name: str | None = None  # enhanced fan-out through this consumer; None: GetRecords
    role: Role | None = None  # read the stream as this role (roleArn)
    streams: tuple[str, ...] = attrs.field()  # every stream the query reads (its name), ``stream`` first
    stream_arns: tuple[str, ...] = ()  # the ARNs of those given by ARN (streamARN): their Kinesis calls name them so
    drop_removed_streams: bool = False  # a restart drops a stream its options no longer name
    fail_on_data_loss: bool = True  # failOnDataLoss
    drop_outside_shard: bool = False  # kplOutsideShard drop

    @streams.default
    def _just_stream(self) -> tuple[str, ...]:
        return (self.stream,)

    @classmethod
    def from_options(cls, options: Mapping[str, str], *, batch: bool = False) -> SourceOptions:
        """Check ``options`` (any case, aliases allowed); ``batch`` for ``spark.read``."""
        get = _READING.canonical(options).get
        if batch:
            for name in BATCH_ONLY_IGNORED:
                if get(name) is not None:
                    raise ConfigError(f"option {name}", "is for streaming reads: a batch read ignores it", get(name))
            if (get("consumerType") or "").strip().lower() == "subscribetoshard":
                rule = "SubscribeToShard is for streaming reads: a batch read reads with GetRecords"
                raise ConfigError("option consumerType", rule, get("consumerType"))
        refs = stream_refs(get("streamName"), get("streamARN"), get("region"))
        streams = tuple(ref.name for ref in refs)
        metadata_path = get("metadataPath")
        if metadata_path is not None:
            check_metadata_path(metadata_path)
            for name in ("dynamodbEndpointUrl", "applicationName"):
                if get(name) is not None:
                    rule = "is for the DynamoDB ledger; with metadataPath the ledger is at that path"
                    raise ConfigError(f"option {name}", rule, get(name))
        position, when = _starting_position(get("startingPosition"), get("atTimestamp"))
        per_shard = number("maxRecordsPerShard", get("maxRecordsPerShard"), 100_000, whole=True, minimum=1)
        per_trigger = get("maxRecordsPerTrigger")
        total = None if per_trigger is None else number("maxRecordsPerTrigger", per_trigger, 0, whole=True, minimum=1)
        min_trigger = get("minRecordsPerTrigger")
        least = None if min_trigger is None else number("minRecordsPerTrigger", min_trigger, 0, whole=True, minimum=1)
        if least is not None and total is not None and least > total:
            rule = f"must be <= maxRecordsPerTrigger ({int(total)}): a batch never holds more"
            raise ConfigError("option minRecordsPerTrigger", rule, min_trigger)
        # without minRecordsPerTrigger, maxTriggerDelay is checked and has no effect, as in Kafka's source
        delay = duration("maxTriggerDelay", get("maxTriggerDelay"), 900.0)
        stream = streams[0]
        return cls(
            stream=stream,
            streams=streams,
            stream_arns=tuple(ref.text for ref in refs if ref.arn),
            drop_removed_streams=true_or_false("dropRemovedStreams", get("dropRemovedStreams")),
            region=get("region"),
            endpoint_url=get("endpointUrl"),
            dynamodb_endpoint_url=get("dynamodbEndpointUrl"),
            initial_position=position,
            at_timestamp=when,
            max_records_per_shard=int(per_shard),
            max_records_per_trigger=None if total is None else int(total),
            min_records_per_trigger=None if least is None else int(least),
            max_trigger_delay=delay,
            application_name=get("applicationName") or f"kinsumer-spark-{stream}",
            metadata_path=metadata_path,
            idle_batch_interval=number("idleBatchInterval", get("idleBatchInterval"), 1.0),
            read_time_budget=number("readTimeBudget", get("readTimeBudget"), 10.0),
            shards_per_task=int(number("shardsPerTask", get("shardsPerTask"), 4, whole=True, minimum=1)),
            consumer_name=_consumer_name(get("consumerName"), get("consumerType")),
            role=_role(get("roleArn"), get("roleSessionName"), get("externalId"), get("stsEndpointUrl")),
            fail_on_data_loss=true_or_false("failOnDataLoss", get("failOnDataLoss"), True),
            drop_outside_shard=_kpl_outside_shard(get("kplOutsideShard")),
        )

    def ref(self, stream: str) -> str:
        """How Kinesis calls name ``stream`` (one of :attr:`streams`): its ARN if given one, else its name."""
        return next((arn for arn in self.stream_arns if StreamRef(arn).name == stream), stream)

    @property
    def kinesis_region(self) -> str | None:
        """The Kinesis client's region: that of the ARNs (streamARN), else ``region``."""
        return next((region for arn in self.stream_arns if (region := StreamRef(arn).region)), self.region)

    @property
    def table(self) -> str:
        """The DynamoDB table of the batch ledger."""
        return Tables.for_application(self.application_name).metadata
