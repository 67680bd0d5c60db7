"""Capacity: the units a request consumes, what each table and item consumed, and throttling.

Units (developer guide, "Read/write capacity mode"):

- a read of an item: 1 unit per 4 KB of the item (its whole size, whatever the projection), at least 1; half
  of that eventually consistent. A GetItem that finds nothing still costs the minimum.
- a Scan page: the sizes of every item it read (before the filter) summed, then rounded up to 4 KB; at least
  1 unit (0.5 eventually consistent).
- a write: 1 unit per 1 KB of the larger of the item before and after, at least 1. A write whose condition
  fails still consumes (the item's size as it is).

Throttling, over one-second windows of the injected clock (``floor(now)``):

- each partition serves 3,000 read and 1,000 write units a second. The model gives every item key a
  partition of its own (DynamoDB splits hot partitions down to one key, so one key's ceiling is the
  question for a hot item); a Scan's units are charged to each item read, in proportion to its size, but
  only the table's limit can throttle a Scan (a scan spreads over every partition);
- a provisioned table (created with ProvisionedThroughput, or given :class:`Limits`) serves its read and
  write units a second; an on-demand table's optional maximum (OnDemandThroughput, or :class:`Limits`) too.
- a request is admitted while its window has capacity left, and may overdraw it: the overdraft is repaid
  from the next windows (DynamoDB's token bucket lets a request through on a positive balance). A
  throttled request changes nothing and consumes nothing.
- burst capacity (off unless ``Limits.burst_seconds``; AWS keeps up to 300 s): a provisioned table's unused
  units are banked, up to ``burst_seconds`` of them, and spent once a window's own are.

Over a partition's limit, or a provisioned table's: ProvisionedThroughputExceededException (with
ThrottlingReasons, ``TableReadKeyRangeThroughputExceeded``...); over an on-demand maximum: ThrottlingException
(``TableReadMaxOnDemandThroughputExceeded``...).
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass, field

from .._errors import SimError

__all__ = ["Limits", "Meter", "Usage", "Window", "read_units", "write_units"]

_EXCEEDED = "ProvisionedThroughputExceededException"
READ_BLOCK = 4096
WRITE_BLOCK = 1024


def read_units(size: int, consistent: bool) -> float:
    units = float(max(1, math.ceil(size / READ_BLOCK)))
    return units if consistent else units / 2


def write_units(size: int) -> float:
    return float(max(1, math.ceil(size / WRITE_BLOCK)))


@dataclass(frozen=True)
class Limits:
    """A table's throughput limits, in units a second (None: no such limit)."""

    partition_read: float = 3000.0
    partition_write: float = 1000.0
    provisioned_read: float | None = None
    provisioned_write: float | None = None
    on_demand_read: float | None = None
    on_demand_write: float | None = None
    burst_seconds: float = 0.0


class Window:
    """Units consumed in the current one-second window, an overdraft carried on, and banked burst capacity."""

    def __init__(self, rate: float, burst_seconds: float = 0.0) -> None:
        self.rate = rate
        self.cap = rate * burst_seconds
        self.second: int | None = None
        self.used = 0.0
        self.bank = 0.0  # negative: an overdraft to repay
        self.peak = 0.0  # the most units consumed in one window

    def _roll(self, now: float) -> None:
        second = math.floor(now)
        if self.second is None:
            self.second = second
        if second > self.second:
            left = self.bank + self.rate - self.used + self.rate * (second - self.second - 1)
            self.bank = min(self.cap, left)
            self.second, self.used = second, 0.0

    def admits(self, now: float) -> bool:
        self._roll(now)
        return self.used < self.rate + self.bank

    def charge(self, now: float, units: float) -> None:
        self._roll(now)
        self.used += units
        self.peak = max(self.peak, self.used)


@dataclass
class Usage:
    """What a table, an operation or an item consumed."""

    calls: int = 0
    read_units: float = 0.0
    write_units: float = 0.0
    condition_failures: int = 0
    throttled: int = 0
    errors: int = 0  # every error answer: condition failures and throttles included

    def add(self, read: float = 0.0, write: float = 0.0) -> None:
        self.read_units += read
        self.write_units += write


@dataclass
class TableMeter:
    """One table's accounts: in total, by operation, by item key, by second of the clock."""

    total: Usage = field(default_factory=Usage)
    operations: dict[str, Usage] = field(default_factory=dict)
    items: dict[Hashable, Usage] = field(default_factory=dict)
    seconds: dict[int, Usage] = field(default_factory=dict)
    item_reads: dict[Hashable, Window] = field(default_factory=dict)
    item_writes: dict[Hashable, Window] = field(default_factory=dict)

    def peak(self, key: Hashable) -> tuple[float, float]:
        """The most read and write units ``key`` consumed in one second of the clock."""
        reads, writes = self.item_reads.get(key), self.item_writes.get(key)
        return (reads.peak if reads else 0.0, writes.peak if writes else 0.0)

    def hottest(self, by: str = "write_units", count: int = 1) -> list[tuple[Hashable, Usage]]:
        """The items that consumed the most (``by``: ``read_units``, ``write_units`` or ``calls``)."""
        return sorted(self.items.items(), key=lambda kv: -float(getattr(kv[1], by)))[:count]


class Meter:
    """Admission (throttling) and accounts for every table of a simulated DynamoDB."""

    def __init__(self) -> None:
        self.tables: dict[str, TableMeter] = {}
        self._read: dict[str, Window] = {}
        self._write: dict[str, Window] = {}

    def table(self, name: str) -> TableMeter:
        return self.tables.setdefault(name, TableMeter())

    def configure(self, name: str, limits: Limits) -> None:
        """Start ``name``'s table windows afresh under ``limits``."""
        self._read.pop(name, None)
        self._write.pop(name, None)
        read = limits.provisioned_read if limits.provisioned_read is not None else limits.on_demand_read
        write = limits.provisioned_write if limits.provisioned_write is not None else limits.on_demand_write
        burst = limits.burst_seconds if limits.provisioned_read is not None else 0.0
        if read is not None:
            self._read[name] = Window(read, burst)
        burst = limits.burst_seconds if limits.provisioned_write is not None else 0.0
        if write is not None:
            self._write[name] = Window(write, burst)

    def admit(self, name: str, arn: str, limits: Limits, keys: list[Hashable], reading: bool, now: float) -> None:
        """Raise the throttling error DynamoDB would if the table or the partition of ``keys[0]`` (a single-item
        request; ``keys`` empty for a scan) has no capacity left in this second."""
        meter, kind = self.table(name), "Read" if reading else "Write"
        if keys:
            windows = meter.item_reads if reading else meter.item_writes
            rate = limits.partition_read if reading else limits.partition_write
            window = windows.setdefault(keys[0], Window(rate))
            if not window.admits(now):
                raise _throttled(_EXCEEDED, f"Table{kind}KeyRangeThroughputExceeded", arn)
        table_window = (self._read if reading else self._write).get(name)
        if table_window is not None and not table_window.admits(now):
            provisioned = (limits.provisioned_read if reading else limits.provisioned_write) is not None
            if provisioned:
                raise _throttled(_EXCEEDED, f"Table{kind}ProvisionedThroughputExceeded", arn)
            raise _throttled("ThrottlingException", f"Table{kind}MaxOnDemandThroughputExceeded", arn)

    def charge(self, name: str, operation: str, units: float, shares: dict[Hashable, float], reading: bool,
               now: float, limits: Limits) -> None:  # fmt: skip
        """Account one request's ``units``, ``shares`` of them to each item key."""
        meter = self.table(name)
        read, write = (units, 0.0) if reading else (0.0, units)
        second = math.floor(now)
        for usage in (meter.total, meter.operations.setdefault(operation, Usage()),
                      meter.seconds.setdefault(second, Usage())):  # fmt: skip
            usage.calls += 1
            usage.add(read, write)
        windows = meter.item_reads if reading else meter.item_writes
        rate = limits.partition_read if reading else limits.partition_write
        for key, share in shares.items():
            item = meter.items.setdefault(key, Usage())
            item.calls += 1
            item.add(share if reading else 0.0, 0.0 if reading else share)
            windows.setdefault(key, Window(rate)).charge(now, share)
        table_window = (self._read if reading else self._write).get(name)
        if table_window is not None:
            table_window.charge(now, units)

    def failed(self, name: str, operation: str, now: float, code: str) -> None:
        """Account a request answered with an error (units of a failed condition are charged apart)."""
        meter = self.table(name)
        for usage in (meter.total, meter.operations.setdefault(operation, Usage()),
                      meter.seconds.setdefault(math.floor(now), Usage())):  # fmt: skip
            if code != "ConditionalCheckFailedException":  # charge() counted the call
                usage.calls += 1
            usage.errors += 1
            usage.condition_failures += code == "ConditionalCheckFailedException"
            usage.throttled += code in ("ProvisionedThroughputExceededException", "ThrottlingException")


def _throttled(code: str, reason: str, arn: str) -> SimError:
    messages = {
        "ProvisionedThroughputExceededException": "The level of configured provisioned throughput for the table was "
        "exceeded. Consider increasing your provisioning level with the UpdateTable API.",
        "ThrottlingException": "Throughput exceeds the maximum on-demand throughput configured for the table.",
    }
    field_name = "ThrottlingReasons" if code == "ProvisionedThroughputExceededException" else "throttlingReasons"
    return SimError(code, messages[code], **{field_name: [{"reason": reason, "resource": arn}]})
