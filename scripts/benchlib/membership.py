"""The clients table at scale: what each client's membership round reads, and ListShards per stream.

``clients`` clients (default config, one process, one moto server) share an idle 8-shard stream,
with ``dead`` rows of clients that crashed 5 minutes ago in the clients table (the leader deletes
a row 10 minutes after its last heartbeat). After a warm-up, for ``WINDOW`` seconds: each client's
membership reads (Scans of the clients table, GetItems of a client's row and of the roster), and
the read units they cost by DynamoDB's rule (an item or a Scan page costs its size rounded up to
4 KB: one unit per 4 KB strongly consistent, half a unit eventually consistent), and every client's
ListShards calls. With
``roster=False`` every client scans the clients table each round, as before the roster.
"""

from __future__ import annotations

import math
import time
import uuid
from typing import Any

import attrs

from demo.servers import LocalServer
from kinsumer import Kinsumer
from kinsumer.coordination import coordinator

from .common import new_stream

__all__ = ["Membership", "membership"]

SHARDS = 8
WARM_UP = 10.0
WINDOW = 30.0


@attrs.frozen
class Membership:
    clients: int
    dead: int
    roster: bool  # the followers read the leader's roster (else every client scans)
    reads_per_minute: float  # per client: Scans of the clients table, GetItems of a client row or the roster
    scans_per_minute: float  # per client
    read_units_per_minute: float  # per client
    table_read_units_per_second: float  # all clients together
    list_shards_per_second: float  # all clients together (the per-stream limit is 100/s)


def item_size(item: dict[str, Any]) -> int:
    """An item's size as DynamoDB counts it (names plus values; numbers about a byte per two digits)."""
    size = 0
    for name, value in item.items():
        size += len(name.encode())
        if "S" in value:
            size += len(value["S"].encode())
        elif "N" in value:
            size += 1 + math.ceil(len(value["N"].lstrip("-").replace(".", "")) / 2)
        else:
            size += 1
    return size


class _Counter:
    def __init__(self) -> None:
        self.counting = False
        self.scans = 0
        self.reads = 0
        self.units = 0.0
        self.list_shards = 0

    def before_build(self, params: dict[str, Any], context: dict[str, Any], model: Any, **_: Any) -> None:
        table = str(params.get("TableName", ""))
        roster = params.get("Key", {}).get("Key", {}).get("S") == "Roster"
        context["membership_read"] = table.endswith("_clients") or (model.name == "GetItem" and roster)
        context["membership_unit"] = 1.0 if params.get("ConsistentRead") else 0.5

    def after_read(self, parsed: dict[str, Any], context: dict[str, Any], model: Any, **_: Any) -> None:
        if not (self.counting and context.get("membership_read")):
            return
        self.reads += 1
        items = parsed.get("Items", []) if model.name == "Scan" else [parsed.get("Item", {})]
        self.scans += model.name == "Scan"
        self.units += (math.ceil(sum(item_size(item) for item in items) / 4096) or 1) * context["membership_unit"]

    def before_list_shards(self, **_: Any) -> None:
        if self.counting:
            self.list_shards += 1


def membership(server: LocalServer, clients: int, dead: int = 0, *, roster: bool = True) -> Membership:
    kinesis = server.client("kinesis")
    stream, app = new_stream(kinesis, "members", SHARDS), f"members-{uuid.uuid4().hex[:8]}"
    counters, consumers = [], []
    for n in range(clients):
        dynamodb, own_kinesis = server.client("dynamodb"), server.client("kinesis")
        counter = _Counter()
        for operation in ("Scan", "GetItem"):
            dynamodb.meta.events.register(f"before-parameter-build.dynamodb.{operation}", counter.before_build)
            dynamodb.meta.events.register(f"after-call.dynamodb.{operation}", counter.after_read)
        own_kinesis.meta.events.register("before-call.kinesis.ListShards", counter.before_list_shards)
        counters.append(counter)
        consumers.append(Kinsumer(stream, app, f"member-{n:03d}", kinesis=own_kinesis, dynamodb=dynamodb))
    consumers[0].create_required_tables()
    table = consumers[0].tables.clients
    db = server.client("dynamodb")
    stopped = int((time.time() - 300) * 1000)  # 5 minutes ago: the leader deletes a row 10 minutes after
    for n in range(dead):  # rows as a client that crashed then leaves them
        db.put_item(TableName=table, Item={
            "ID": {"S": f"gone-{uuid.uuid4().hex}"}, "Name": {"S": f"gone-{n}"}, "LastUpdate": {"N": str(stopped)},
            "Host": {"S": "ip-10-0-0-1.ec2.internal"}, "Pid": {"N": "4242"}, "Instance": {"S": uuid.uuid4().hex},
            "Reading": {"S": "polling"}, "CacheVersion": {"N": "3"},
        })  # fmt: skip
    coordinator.READ_ROSTER = roster
    try:
        for k in consumers:
            k.run()
        time.sleep(WARM_UP)
        for counter in counters:
            counter.counting = True
        time.sleep(WINDOW)
        for counter in counters:
            counter.counting = False
    finally:
        coordinator.READ_ROSTER = True
        for k in consumers:
            k.stop()
        consumers[0].delete_tables()
        kinesis.delete_stream(StreamName=stream)
    minutes = WINDOW / 60
    return Membership(
        clients, dead, roster,
        reads_per_minute=sum(c.reads for c in counters) / clients / minutes,
        scans_per_minute=sum(c.scans for c in counters) / clients / minutes,
        read_units_per_minute=sum(c.units for c in counters) / clients / minutes,
        table_read_units_per_second=sum(c.units for c in counters) / WINDOW,
        list_shards_per_second=sum(c.list_shards for c in counters) / WINDOW,
    )  # fmt: skip
