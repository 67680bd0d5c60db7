"""Observability hooks: the :class:`StatReceiver` protocol.

A StatReceiver is called from several threads at once; implementations must be
thread-safe and fast (they run on the reading and delivering paths). Every method of this
base class does nothing, so a receiver overrides only what it needs and ``StatReceiver()``
is the no-op default.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

__all__ = ["GuardedStats", "KeyedStats", "StatReceiver"]


class StatReceiver:
    """Receives counters and timings from a running Kinsumer. Methods default to no-ops."""

    def records_fetched(self, shard_id: str, count: int, millis_behind_latest: int | None) -> None:
        """A GetRecords call on ``shard_id`` returned ``count`` records."""

    def record_delivered(self, shard_id: str, latency_seconds: float) -> None:
        """``next*()`` (or ``process*()``) handed a record over; latency is now minus its arrival in Kinesis."""

    def record_handled(self, shard_id: str, seconds: float) -> None:
        """``process*()``'s handler returned for a record of ``shard_id``: it is done (its first call, or a retry).
        ``seconds``: that call's duration; a batch handler's call counts once per record it did."""

    def records_delivered(self, shard_id: str, count: int, latency_seconds: float) -> None:
        """``process*()`` handed over ``count`` records of ``shard_id`` in a row (a run of the queue);
        ``latency_seconds``: the first's (the run's oldest) when it was handed over. The per-run form of
        :meth:`record_delivered`, for a receiver that needs no per-record latency: one that overrides it
        gets it instead of ``record_delivered`` (with ``count`` 1 for each record ``next*()`` hands over), and
        costs ``process()`` one call per run instead of one per record."""

    def records_handled(self, shard_id: str, count: int, seconds: float) -> None:
        """``process*()``'s handler did ``count`` records of ``shard_id`` in a row; ``seconds``: the mean duration
        of the calls that did them (a batch call's own). The per-run form of :meth:`record_handled`: a
        receiver that overrides it gets it instead of ``record_handled`` (with ``count`` 1 where records are
        done one by one: a retry, ``concurrency`` > 1), and costs ``process()`` one call per run."""

    def checkpoint_written(self, shard_id: str) -> None:
        """A checkpoint (sequence number) of ``shard_id`` was stored in DynamoDB."""

    def shard_gained(self, shard_id: str) -> None:
        """This client captured ``shard_id``."""

    def shard_lost(self, shard_id: str) -> None:
        """This client gave up ``shard_id`` (rebalance, stop, or fencing)."""

    def handoff(self, shard_id: str, seconds: float, clean: bool) -> None:
        """A handoff of ``shard_id`` ended; ``clean`` is False when it timed out."""

    def error_retried(self, operation: str, error: str) -> None:
        """A transient error (throttling, 5xx, connection, expired iterator) was retried."""

    def error_abandoned(self, operation: str, error: str) -> None:
        """A transient error was not retried because the client (or that shard's reader) was
        stopping, or because the call's time was up (a round's, a commit's or a handoff's); whoever
        next does the work (this client in a later round, or another client) starts over."""

    def malformed_aggregates(self, shard_id: str, count: int) -> None:
        """``count`` records started like KPL aggregates but were not valid ones (a wrong MD5, a body
        that does not parse): they were delivered as they are, each as one record."""

    def outside_range(self, shard_id: str, count: int, dropped: bool) -> None:
        """``count`` user records of KPL aggregates read from ``shard_id`` have hash keys outside its hash key
        range (after a split or a merge; the KPL sends such records again to the right shard): ``dropped``
        (``Config.kpl_outside_shard="drop"``), else delivered."""

    def handler_failed(self, shard_id: str, error: str) -> None:
        """``process()``'s handler raised ``error`` (an exception's type name) on a record of ``shard_id``."""

    def handler_retried(self, shard_id: str) -> None:
        """``process()`` will call the handler again for a record of ``shard_id`` that failed."""

    def dead_lettered(self, shard_id: str, reason: str) -> None:
        """A record of ``shard_id`` went to the dead-letter sink (``reason``: ``raised``, ``crashed`` or
        ``expired``)."""

    def handler_timed_out(self, shard_id: str, timeout: float) -> None:
        """A call of ``process()``'s handler on a record of ``shard_id`` ran longer than ``timeout`` seconds:
        a failed attempt (a sync call goes on in the background; an async one is cancelled)."""

    def hook_failed(self, shard_id: str, hook: str, error: str) -> None:
        """``process()``'s lifecycle hook ``hook`` (``on_assigned``, ``on_revoked`` or ``on_lost``) raised
        ``error`` (an exception's type name) for ``shard_id``."""

    def record_expired(self, shard_id: str, age_seconds: float) -> None:
        """``process()`` found a record of ``shard_id`` older than its ``max_record_age`` (``age_seconds``
        since it reached the stream) when its turn came: it goes to the sink (``dead_lettered`` follows)
        without a handler call."""

    def record_age(self, shard_id: str, oldest_seconds: float | None) -> None:
        """The age (now minus its arrival in the stream) of the oldest record of ``shard_id`` this client
        holds and has not finished with (fetched, queued, or under a handler), or None when it holds none:
        reported for each owned shard about once per commit period, so a gauge of it stays current."""

    def dynamodb_call(self, operation: str, table: str, seconds: float, error: str | None) -> None:
        """A DynamoDB call (``operation``, as ``PutItem``) on the application's ``table`` (``clients``,
        ``checkpoints`` or ``metadata``) ended after ``seconds``, botocore's own retries included: answered
        (``error`` None), or failed with ``error`` (the error code, as ``ConditionalCheckFailedException`` or
        ``ProvisionedThroughputExceededException``; an exception's type name when no answer came)."""

    def flush(self) -> None:
        """The Kinsumer stopped: called once, as ``stop()`` ends (after its threads' last calls), to
        write out what the receiver keeps."""


def _ignore(shard_id: str, seconds: float) -> None:
    """A per-record hook a duck-typed receiver does not have."""


def _overrides(kind: type, method: str) -> bool:
    """``kind`` (a receiver's class) has its own ``method``, not StatReceiver's no-op (nor none at all)."""
    return getattr(kind, method, None) not in (None, getattr(StatReceiver, method))


def _one_of_run(per_run: Callable[[str, int, float], None]) -> Callable[[str, float], None]:
    """A per-run hook as a per-record one: a record is a run of one."""

    def call(shard_id: str, value: float) -> None:
        per_run(shard_id, 1, value)

    return call


class GuardedStats(StatReceiver):
    """Calls a user's receiver; an exception it raises is logged once per method, never raised.

    A metrics bug must not stop consumption: kinsumer calls its receiver through this.
    """

    def __init__(self, receiver: StatReceiver) -> None:
        self._receiver = receiver
        self._failed: set[str] = set()
        kind = type(receiver)
        #: the receiver takes runs of records (it overrides records_delivered / records_handled): process() then
        #: calls it once per run, and a record next*() hands over is a run of one
        self.deliveries_per_run = _overrides(kind, "records_delivered")
        self.handled_per_run = _overrides(kind, "records_handled")
        #: False when the receiver ignores deliveries (either form): next*() then skips the per-record call
        self.wants_deliveries = self.deliveries_per_run or _overrides(kind, "record_delivered")
        #: False when the receiver ignores handled records (either form): process() then skips the per-record call
        self.wants_handled = self.handled_per_run or _overrides(kind, "record_handled")
        # bound once: they are called per record (a duck-typed receiver may lack a hook: it is not called)
        self._delivered = getattr(receiver, "record_delivered", _ignore)
        self._handled = getattr(receiver, "record_handled", _ignore)
        if self.deliveries_per_run:
            self._delivered = _one_of_run(receiver.records_delivered)
        if self.handled_per_run:
            self._handled = _one_of_run(receiver.records_handled)

    def _call(self, method: str, *args: object) -> None:
        try:
            getattr(self._receiver, method)(*args)
        except Exception:  # noqa: BLE001 - logged (once) by _raised
            self._raised(method)

    def _raised(self, method: str) -> None:
        if method not in self._failed:  # once: a receiver failing per record would flood the log
            self._failed.add(method)
            logging.getLogger("kinsumer").exception("StatReceiver.%s raised; its calls go on", method)

    def records_fetched(self, shard_id: str, count: int, millis_behind_latest: int | None) -> None:
        self._call("records_fetched", shard_id, count, millis_behind_latest)

    def record_delivered(self, shard_id: str, latency_seconds: float) -> None:
        try:  # not through _call: this one is per record
            self._delivered(shard_id, latency_seconds)
        except Exception:  # noqa: BLE001 - logged (once) by _raised
            self._raised("record_delivered")

    def record_handled(self, shard_id: str, seconds: float) -> None:
        try:  # not through _call: this one is per record
            self._handled(shard_id, seconds)
        except Exception:  # noqa: BLE001 - logged (once) by _raised
            self._raised("record_handled")

    def records_delivered(self, shard_id: str, count: int, latency_seconds: float) -> None:
        if self.deliveries_per_run:
            self._call("records_delivered", shard_id, count, latency_seconds)
        else:
            for _ in range(count):
                self.record_delivered(shard_id, latency_seconds)

    def records_handled(self, shard_id: str, count: int, seconds: float) -> None:
        if self.handled_per_run:
            self._call("records_handled", shard_id, count, seconds)
        else:
            for _ in range(count):
                self.record_handled(shard_id, seconds)

    def checkpoint_written(self, shard_id: str) -> None:
        self._call("checkpoint_written", shard_id)

    def shard_gained(self, shard_id: str) -> None:
        self._call("shard_gained", shard_id)

    def shard_lost(self, shard_id: str) -> None:
        self._call("shard_lost", shard_id)

    def handoff(self, shard_id: str, seconds: float, clean: bool) -> None:
        self._call("handoff", shard_id, seconds, clean)

    def error_retried(self, operation: str, error: str) -> None:
        self._call("error_retried", operation, error)

    def error_abandoned(self, operation: str, error: str) -> None:
        self._call("error_abandoned", operation, error)

    def malformed_aggregates(self, shard_id: str, count: int) -> None:
        self._call("malformed_aggregates", shard_id, count)

    def outside_range(self, shard_id: str, count: int, dropped: bool) -> None:
        self._call("outside_range", shard_id, count, dropped)

    def handler_failed(self, shard_id: str, error: str) -> None:
        self._call("handler_failed", shard_id, error)

    def handler_retried(self, shard_id: str) -> None:
        self._call("handler_retried", shard_id)

    def dead_lettered(self, shard_id: str, reason: str) -> None:
        self._call("dead_lettered", shard_id, reason)

    def record_expired(self, shard_id: str, age_seconds: float) -> None:
        self._call("record_expired", shard_id, age_seconds)

    def hook_failed(self, shard_id: str, hook: str, error: str) -> None:
        self._call("hook_failed", shard_id, hook, error)

    def handler_timed_out(self, shard_id: str, timeout: float) -> None:
        self._call("handler_timed_out", shard_id, timeout)

    def record_age(self, shard_id: str, oldest_seconds: float | None) -> None:
        self._call("record_age", shard_id, oldest_seconds)

    def dynamodb_call(self, operation: str, table: str, seconds: float, error: str | None) -> None:
        self._call("dynamodb_call", operation, table, seconds, error)

    def flush(self) -> None:
        self._call("flush")


#: The methods whose first argument is a shard.
_BY_SHARD = frozenset(
    {
        "records_fetched", "record_delivered", "record_handled", "records_delivered", "records_handled",
        "checkpoint_written", "shard_gained", "shard_lost",
        "handoff", "malformed_aggregates", "outside_range", "handler_failed", "handler_retried", "dead_lettered",
        "record_expired", "hook_failed", "handler_timed_out", "record_age",
    }
)  # fmt: skip


class KeyedStats(GuardedStats):
    """``guarded``, naming each shard by ``key(shard ID)``: the readers of a stream other than an
    application's first report its shards as the rest of kinsumer does, ``<stream>/<shard ID>``."""

    def __init__(self, guarded: GuardedStats, key: Callable[[str], str]) -> None:
        super().__init__(guarded._receiver)
        self._failed = guarded._failed  # one "raised" log per method for the whole client
        self._key = key

    def record_delivered(self, shard_id: str, latency_seconds: float) -> None:
        if self.deliveries_per_run:
            self._call("records_delivered", shard_id, 1, latency_seconds)
        else:
            self._call("record_delivered", shard_id, latency_seconds)

    def record_handled(self, shard_id: str, seconds: float) -> None:
        if self.handled_per_run:
            self._call("records_handled", shard_id, 1, seconds)
        else:
            self._call("record_handled", shard_id, seconds)

    def _call(self, method: str, *args: object) -> None:
        if method in _BY_SHARD:
            args = (self._key(str(args[0])), *args[1:])
        super()._call(method, *args)
