"""The options of the Kinesis sink (``df.write.format("kinsumer")``, ``writeStream``). Pure, no Spark, no I/O."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from ..aws.stream_ref import StreamRef
from ..errors import ConfigError
from ..writing.aggregation import MAX_RECORD_BYTES
from ..writing.writer import DEFAULT_AGGREGATE_BYTES
from .options import CREDENTIALS, OptionNames, number

__all__ = ["SINK_OPTIONS", "SinkOptions"]

#: The sink's option names (as documented) and what each is for.
SINK_OPTIONS: dict[str, str] = {
    "streamName": "the Kinesis stream to write to (this or streamARN required)",
    "streamARN": "the Kinesis stream to write to, by ARN (a stream another account shares): called by ARN, in the "
    "ARN's region",
    "region": "the AWS region (default: the standard AWS chain)",
    "endpointUrl": "the Kinesis endpoint",
    "aggregate": "true: pack records into KPL aggregates, by shard (default false)",
    "aggregateMaxBytes": f"the size of an aggregate at most (default {DEFAULT_AGGREGATE_BYTES}, the KPL's)",
    "retryTimeout": "seconds a task keeps sending records Kinesis refused (throttling) before it fails (default 600)",
}

_BUFFERING = "each task writes its rows as they come, in PutRecords calls of up to 500 records or 5 MiB"
_NAMES = OptionNames(
    SINK_OPTIONS,
    aliases={
        "kinesis.streamName": "streamName",
        "kinesis.region": "region",
        "kinesis.endpointUrl": "endpointUrl",
        "kinesis.sink.aggregationEnabled": "aggregate",
    },
    not_taken={
        **CREDENTIALS,
        "kinesis.stsRoleArn": "the sink writes with each process's own credentials (the standard AWS chain)",
        "kinesis.sink.recordTtl": "no record is ever dropped: retryTimeout bounds the retries, then the task fails",
        "kinesis.sink.flushWaitTimeMs": _BUFFERING,
        "kinesis.sink.recordMaxBufferedTimeMs": _BUFFERING,
        "kinesis.sink.maxConnections": "each task writes through one connection",
    },
)
_TRUE, _FALSE = ("true", "yes", "1"), ("false", "no", "0")
#: Options Spark itself sets on a streaming writer: not the sink's.
_SPARKS = frozenset({"checkpointlocation", "queryname"})


@attrs.frozen
class SinkOptions:
    """The sink's options, checked."""

    stream: str  # a name, or an ARN (streamARN)
    region: str | None = None
    endpoint_url: str | None = None
    aggregate: bool = False
    aggregate_bytes: int = DEFAULT_AGGREGATE_BYTES
    retry_timeout: float = 600.0

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> SinkOptions:
        """Check ``options`` (any case, AWS's names allowed)."""
        get = _NAMES.canonical({k: v for k, v in options.items() if k.lower() not in _SPARKS}).get
        stream, arn = get("streamName"), get("streamARN")
        if stream and arn:
            raise ConfigError("option streamARN", "names the stream as streamName does: give one of them", arn)
        if arn:
            ref = StreamRef(arn.strip(), field="option streamARN")
            if ref.arn is None:
                raise ConfigError("option streamARN", "must be a stream ARN: give a stream name with streamName", arn)
            stream = ref.text
        if not stream:
            raise ConfigError("option streamName", "is required (or streamARN): the stream to write to", stream)
        aggregate = (get("aggregate") or "false").strip().lower()
        if aggregate not in _TRUE + _FALSE:
            raise ConfigError("option aggregate", "must be true or false", get("aggregate"))
        size = number("aggregateMaxBytes", get("aggregateMaxBytes"), DEFAULT_AGGREGATE_BYTES, whole=True, minimum=100)
        if size > MAX_RECORD_BYTES:
            raise ConfigError("option aggregateMaxBytes", f"must be <= {MAX_RECORD_BYTES} (a Kinesis record)", size)
        return cls(
            stream=stream,
            region=StreamRef(stream, field="option streamName").region or get("region"),  # an ARN's region
            endpoint_url=get("endpointUrl"),
            aggregate=aggregate in _TRUE,
            aggregate_bytes=int(size),
            retry_timeout=number("retryTimeout", get("retryTimeout"), 600.0, minimum=0),
        )
