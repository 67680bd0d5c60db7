"""The PySpark Python Data Source: ``spark.readStream.format("kinsumer")``.

Driver: ``initialOffset`` / ``latestOffset`` / ``partitions`` list shards and read the
recorded batch ends from DynamoDB; they never read records. Executors: ``read`` reads one
shard's share of a batch (see ``shard_range``). One input partition per shard.
"""

from __future__ import annotations

import datetime as dt
import functools
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import attrs
import boto3
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from ..aws import records_parser
from ..aws.kinesis import list_shards
from ..aws.tables import Tables, create_table
from ..errors import ConfigError
from ..reading.reader import ApiRecord
from .batch_ends import BatchEnds
from .offsets import TRIM_HORIZON, BatchOffset, at_timestamp, next_offset
from .shard_range import ShardRange, read_shard_range

try:  # pyspark >= 4.2: admission control
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
except ImportError:  # pragma: no cover - pyspark 4.0 / 4.1
    ReadAllAvailable = ReadLimit = ReadMaxRows = None  # type: ignore[assignment,misc]

__all__ = ["SCHEMA", "KinsumerDataSource", "SourceOptions"]

SCHEMA = (
    "data binary, partition_key string, sequence_number string, shard_id string, "
    "approximate_arrival_timestamp timestamp, stream string, sub_sequence_number long, explicit_hash_key string"
)
_ARROW_SCHEMA = pa.schema(  # SCHEMA, as the Arrow batches read() yields
    [
        ("data", pa.binary()),
        ("partition_key", pa.string()),
        ("sequence_number", pa.string()),
        ("shard_id", pa.string()),
        ("approximate_arrival_timestamp", pa.timestamp("us", tz="UTC")),
        ("stream", pa.string()),
        ("sub_sequence_number", pa.int64()),
        ("explicit_hash_key", pa.string()),
    ]
)
_LISTING_TTL = 1.0  # seconds a ListShards answer is reused by the driver
_KEPT_BATCHES = 2  # recorded ends kept for batches before the newest (a restart replays the newest)


def _positive(name: str, raw: str | None, default: float) -> float:
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"option {name}", "must be a number", raw) from None
    if value < 0:
        raise ConfigError(f"option {name}", "must be >= 0", raw)
    return value


@attrs.frozen
class SourceOptions:
    """The options of the source (Spark hands their keys over lower-cased)."""

    stream: str
    region: str | None = None
    endpoint_url: str | None = None
    dynamodb_endpoint_url: str | None = None
    initial_position: str = "TRIM_HORIZON"
    at_timestamp: dt.datetime | None = None
    max_records_per_shard: int = 10_000
    application_name: str = ""
    idle_batch_interval: float = 1.0
    read_time_budget: float = 10.0

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> SourceOptions:
        get = {k.lower(): v for k, v in options.items()}.get
        stream = get("streamname")
        if not stream:
            raise ConfigError("option streamName", "is required", stream)
        position = (get("initialposition") or "TRIM_HORIZON").upper()
        if position not in ("TRIM_HORIZON", "LATEST", "AT_TIMESTAMP"):
            raise ConfigError("option initialPosition", "must be TRIM_HORIZON, LATEST or AT_TIMESTAMP", position)
        when = None
        if position == "AT_TIMESTAMP":
            raw = get("attimestamp")
            try:
                when = dt.datetime.fromisoformat(raw or "")
            except ValueError:
                raise ConfigError("option atTimestamp", "must be an ISO 8601 time with AT_TIMESTAMP", raw) from None
            when = when if when.tzinfo else when.replace(tzinfo=dt.UTC)
        limit = _positive("maxRecordsPerShard", get("maxrecordspershard"), 10_000)
        if limit != int(limit) or limit < 1:
            raise ConfigError("option maxRecordsPerShard", "must be a whole number >= 1", get("maxrecordspershard"))
        return cls(
            stream=stream,
            region=get("region"),
            endpoint_url=get("endpointurl"),
            dynamodb_endpoint_url=get("dynamodbendpointurl"),
            initial_position=position,
            at_timestamp=when,
            max_records_per_shard=int(limit),
            application_name=get("applicationname") or f"kinsumer-spark-{stream}",
            idle_batch_interval=_positive("idleBatchInterval", get("idlebatchinterval"), 1.0),
            read_time_budget=_positive("readTimeBudget", get("readtimebudget"), 10.0),
        )

    @property
    def table(self) -> str:
        return Tables.for_application(self.application_name).metadata


@functools.lru_cache(maxsize=16)
def _clients(options: SourceOptions) -> tuple[Any, Any]:
    """Kinesis and DynamoDB clients, made once per process (boto3 clients do not pickle)."""
    session = boto3.Session(region_name=options.region)
    kinesis = session.client("kinesis", endpoint_url=options.endpoint_url)
    records_parser.install(kinesis)
    dynamodb = session.client("dynamodb", endpoint_url=options.dynamodb_endpoint_url)
    return kinesis, dynamodb


class ShardPartition(InputPartition):
    """One shard of one batch (pickled to an executor)."""

    def __init__(self, index: int, run: str, shard_range: ShardRange) -> None:
        super().__init__(index)
        self.run = run
        self.shard_range = shard_range


class KinsumerStreamReader(DataSourceStreamReader):
    """Plans micro-batches on the driver and reads shards on the executors."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        initial = TRIM_HORIZON
        if options.initial_position == "LATEST":  # pinned now, so a replay means the same records
            initial = at_timestamp(dt.datetime.now(dt.UTC))
        elif options.at_timestamp is not None:
            initial = at_timestamp(options.at_timestamp)
        self._initial = initial
        self._run = uuid.uuid4().hex
        self._last: BatchOffset | None = None  # pyspark < 4.2 calls latestOffset() without a start
        self._listing: tuple[float, list[Any]] = (-_LISTING_TTL, [])
        self._ends: tuple[int, dict[str, str]] = (-1, {})
        self._idle_since: float | None = None

    # ----------------------------------------------------------------- driver

    def initialOffset(self) -> dict[str, Any]:
        _, dynamodb = _clients(self._options)
        create_table(dynamodb, self._options.table, "Key")
        return BatchOffset(run=self._run, batch=-1, initial=self._initial).to_json()

    def getDefaultReadLimit(self) -> Any:
        return ReadMaxRows(self._options.max_records_per_shard) if ReadMaxRows is not None else None

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        current = BatchOffset.from_json(start) if start is not None else self._last
        if current is None:
            current = BatchOffset.from_json(self.initialOffset())
        ends = self._recorded_ends(current)
        following = next_offset(current, ends, self._list_shards())
        following = attrs.evolve(following, limit=self._per_shard_limit(limit))
        if self._idle(current, ends, following):
            return current.to_json()
        self._batch_ends(current.run).forget(current.batch - _KEPT_BATCHES)
        self._last = following
        return following.to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[ShardPartition]:
        batch = BatchOffset.from_json(end)
        self._last = batch
        if start == end or batch.batch < 0:
            return []
        self._batch_ends(batch.run).plan(batch.batch)
        opts = self._options
        closed = {s.shard_id for s in self._list_shards() if s.closed}  # read those to their end
        return [
            ShardPartition(
                i,
                batch.run,
                ShardRange(
                    opts.stream,
                    shard,
                    batch.batch,
                    batch.shards[shard],
                    batch.limit,
                    opts.read_time_budget,
                    closed=shard in closed,
                ),
            )
            for i, shard in enumerate(sorted(batch.shards))
        ]

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: recorded ends are forgotten as later batches are planned."""

    def _batch_ends(self, run: str) -> BatchEnds:
        return BatchEnds(_clients(self._options)[1], self._options.table, run)

    def _recorded_ends(self, offset: BatchOffset) -> dict[str, str]:
        if offset.batch < 0:
            return {}
        if self._ends[0] != offset.batch:  # a batch's ends are final once it ran: read them once
            self._ends = (offset.batch, self._batch_ends(offset.run).ends(offset.batch))
        return self._ends[1]

    def _list_shards(self) -> list[Any]:
        listed_at, listing = self._listing
        if time.monotonic() - listed_at >= _LISTING_TTL:
            listing = list_shards(_clients(self._options)[0], self._options.stream)
            self._listing = (time.monotonic(), listing)
        return listing

    def _per_shard_limit(self, limit: Any) -> int:
        if ReadAllAvailable is not None and isinstance(limit, ReadAllAvailable):
            return 0
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            return int(limit.max_rows)
        return self._options.max_records_per_shard

    def _idle(self, current: BatchOffset, ends: Mapping[str, str], following: BatchOffset) -> bool:
        """After a batch that read nothing, wait idle_batch_interval before planning another."""
        progressed = any(ends.get(shard, start) != start for shard, start in current.shards.items())
        changed = following.shards.keys() != current.shards.keys()
        if current.batch < 0 or progressed or changed:
            self._idle_since = None
            return False
        now = time.monotonic()
        if self._idle_since is None:
            self._idle_since = now
        if now - self._idle_since < self._options.idle_batch_interval:
            return True
        self._idle_since = None
        return False

    # ----------------------------------------------------------------- executors

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, ShardPartition)
        kinesis, dynamodb = _clients(self._options)
        part = partition.shard_range
        ends = BatchEnds(dynamodb, self._options.table, partition.run)
        records = read_shard_range(kinesis, ends, part)
        if records:  # one Arrow batch: far cheaper than a Python tuple per row
            yield _arrow_batch(records, part)


def _arrow_batch(records: list[ApiRecord], part: ShardRange) -> Any:
    count = len(records)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r["Data"] for r in records], pa.binary()),
            pa.array([r["PartitionKey"] for r in records], pa.string()),
            pa.array([r["SequenceNumber"] for r in records], pa.string()),
            pa.array([part.shard] * count, pa.string()),
            pa.array([r["ApproximateArrivalTimestamp"] for r in records], pa.timestamp("us", tz="UTC")),
            pa.array([part.stream] * count, pa.string()),
            pa.array([r.get("SubSequenceNumber") for r in records], pa.int64()),
            pa.array([r.get("ExplicitHashKey") for r in records], pa.string()),
        ],
        schema=_ARROW_SCHEMA,
    )


class KinsumerDataSource(DataSource):
    """``spark.readStream.format("kinsumer").option("streamName", ...).load()``."""

    @classmethod
    def name(cls) -> str:
        return "kinsumer"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> KinsumerStreamReader:
        return KinsumerStreamReader(SourceOptions.from_options(self.options))
