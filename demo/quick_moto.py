"""moto, less the costs that give nothing back, for the tests' and the demo's servers.

Measured under the client-process tests' load, these took a third of moto's server CPU, and the last
grows with a shard's length:

- it found each request's backend by listing moto's package directory and trying each service's URL
  patterns, a function of the host alone (:class:`QuickDispatch` remembers it);
- it listed the methods of a service's response class by inspection, for each request (remembered by
  :func:`install`);
- it logged each request (:class:`QuietHandler` logs errors only);
- a Kinesis shard found its last sequence number by copying all of its keys, for each record put, and
  GetRecords walked the shard from its first record, for each call. A shard's records are numbered
  1, 2, 3... (moto numbers each record one past the shard's last and never removes one), so
  :func:`install` gives the shard a lookup by number, with the same answers.

Nothing here changes an answer: ``tests/server/test_quick_moto.py`` compares them with moto's own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from moto.core import responses, utils
from moto.kinesis.models import Record, Shard
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler

__all__ = ["QuickDispatch", "QuietHandler", "install"]

_moto_get_records = Shard.get_records


class QuickDispatch(DomainDispatcherApplication):
    """moto's dispatcher, remembering the backend it finds for each host."""

    def __init__(self, create_app: Callable[[Any], Any]) -> None:
        super().__init__(create_app)
        self._backends: dict[str | None, Any] = {}

    def get_backend_for_host(self, host: str | None) -> Any:
        # called under the dispatcher's lock
        if host not in self._backends:
            self._backends[host] = super().get_backend_for_host(host)
        return self._backends[host]


class QuietHandler(MotoRequestHandler):
    """moto's request handler without a log line for each request (errors are still logged)."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass


def _last_number(shard: Shard) -> int:
    return next(reversed(shard.records), 0)


def _first_number(shard: Shard) -> int:
    return next(iter(shard.records), 0)


def _get_records(shard: Shard, last_sequence_id: str, limit: int | None) -> tuple[list[Record], int, int]:
    """moto's ``Shard.get_records``, from the record after ``last_sequence_id`` instead of the first."""
    records = shard.records
    first, last = _first_number(shard), _last_number(shard)
    if not records or last - first + 1 != len(records) or (limit is not None and limit < 1):
        return _moto_get_records(shard, last_sequence_id, limit)  # empty, or not numbered 1, 2, 3...: moto's own walk
    start = max(int(last_sequence_id) + 1, first)
    end = last if limit is None else min(last, start + limit - 1)
    if start > end:
        return [], int(last_sequence_id), 0
    taken = [records[number] for number in range(start, end + 1)]
    behind = records[last].created_at - taken[-1].created_at
    return taken, end, int(behind.total_seconds() * 1000)


@functools.cache
def install() -> None:
    """Patch moto's response classes and Kinesis shards in this process (once)."""
    # a class's methods do not change while the server runs
    responses.method_names_from_class = functools.cache(utils.method_names_from_class)  # type: ignore[attr-defined]
    Shard.get_max_sequence_number = _last_number  # type: ignore[method-assign,assignment]
    Shard.get_min_sequence_number = _first_number  # type: ignore[method-assign,assignment]
    Shard.get_records = _get_records  # type: ignore[method-assign,assignment]
