"""process(decode=) and aprocess(decode=) as a user types them: a handler of (value, record), and one of records."""

from __future__ import annotations

import json
from dataclasses import dataclass

from kinsumer import Kinsumer, Record


@dataclass(frozen=True)
class Order:
    id: int
    total: float


def decode(data: bytes) -> Order:
    return Order(**json.loads(data))


def handle(order: Order, record: Record) -> None:
    print(order.total, record.shard_id)


async def ahandle(order: Order, record: Record) -> None:
    print(order.total, record.shard_id)


def plain(record: Record) -> None:
    print(record.data)


def run(k: Kinsumer) -> None:
    k.process(handle, decode=decode, max_attempts=3)
    k.process(plain)


async def arun(k: Kinsumer) -> None:
    await k.aprocess(ahandle, decode=decode)
