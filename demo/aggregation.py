"""KPL-aggregated records, written with awslabs' ``aws-kinesis-agg`` (an independent implementation).

Used by the tests and the benchmarks to write what the Kinesis Producer Library writes with an
implementation other than kinsumer's (``kinsumer produce --aggregate N`` uses kinsumer's own,
:mod:`kinsumer.writing.aggregation`). aws-kinesis-agg's modules put their own folder first on
``sys.path`` when imported (its ``messages_pb2`` imports ``config_pb2`` as a top-level
module); :func:`aggregator` imports it once and puts ``sys.path`` back as it was.
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Iterable, Iterator
from types import ModuleType
from typing import Any

__all__ = ["UserRecord", "aggregated_entries", "aggregator", "deaggregator"]

#: (partition key, data, explicit hash key or None)
UserRecord = tuple[str, bytes, str | None]


@functools.cache
def aggregator() -> ModuleType:
    """``aws_kinesis_agg.aggregator``, imported without leaving its folder on ``sys.path``."""
    return _import("aws_kinesis_agg.aggregator")


@functools.cache
def deaggregator() -> ModuleType:
    """``aws_kinesis_agg.deaggregator``, imported without leaving its folder on ``sys.path``."""
    return _import("aws_kinesis_agg.deaggregator")


def _import(name: str) -> ModuleType:
    saved = list(sys.path)
    try:
        return importlib.import_module(name)  # a test and demo dependency
    except ImportError as exc:
        raise ImportError(
            "demo.aggregation needs aws-kinesis-agg, a development dependency that `make` installs: run "
            "`make .venv/.installed` at the top of the checkout and use .venv/bin/python"
        ) from exc
    finally:
        sys.path[:] = saved


def aggregated_entries(user_records: Iterable[UserRecord], per_record: int) -> Iterator[dict[str, Any]]:
    """PutRecords entries, each one KPL aggregate of up to ``per_record`` user records, in order."""
    aggregate = aggregator().AggRecord()
    for key, data, hash_key in user_records:
        if aggregate.get_num_user_records() >= per_record or not aggregate.add_user_record(key, data, hash_key):
            yield _entry(aggregate)
            aggregate = aggregator().AggRecord()
            if not aggregate.add_user_record(key, data, hash_key):
                raise ValueError(f"a user record of {len(data)} bytes does not fit in a Kinesis record")
    if aggregate.get_num_user_records():
        yield _entry(aggregate)


def _entry(aggregate: Any) -> dict[str, Any]:
    key, hash_key, data = aggregate.get_contents()
    entry = {"Data": data, "PartitionKey": key}
    if hash_key is not None:
        entry["ExplicitHashKey"] = hash_key
    return entry
