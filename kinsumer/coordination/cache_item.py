"""How the shard cache and the published assignment are stored in their DynamoDB item. Pure, no I/O.

A DynamoDB item holds at most 400 KB. Written as lists and maps, the frontier of a stream's
shards, their parents and the published assignment pass that at about 3,000 shards (each
shard ID and client ID spelled out, once per shard). So a cache larger than :data:`PLAIN_LIMIT`
bytes is written packed: one binary attribute ``Packed``, the zlib-compressed JSON of the shard
IDs, each frontier shard's parents, and the assignment as each client's list of indexes into
the shard IDs. At 10,000 shards with two parents each, assigned to 50 clients, that is about
100 KB (:func:`item_size`). A smaller cache is written as it always was (``ShardIDs``,
``Parents``, ``Assignment``), which earlier versions read; a reader takes either.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from typing import Any

__all__ = ["PLAIN_LIMIT", "decode", "encode", "item_size"]

#: Bytes (as :func:`item_size` counts them) up to which the cache is written as lists and maps.
PLAIN_LIMIT = 64 * 1024
#: The most a DynamoDB item may hold.
MAX_ITEM_BYTES = 400 * 1024


def encode(
    shard_ids: list[str], parents: Mapping[str, tuple[str, ...]], assignment: Mapping[str, str] | None
) -> dict[str, Any]:
    """The cache's attributes (without ``Key``, ``Version``, ``LastUpdate``, ``Stream``)."""
    plain: dict[str, Any] = {
        "ShardIDs": {"L": [{"S": s} for s in shard_ids]},
        "Parents": {"M": {s: {"L": [{"S": p} for p in ps]} for s, ps in parents.items()}},
    }
    if assignment:
        plain["Assignment"] = {"M": {shard: {"S": owner} for shard, owner in assignment.items()}}
    if item_size(plain) <= PLAIN_LIMIT:
        return plain
    index = {shard: i for i, shard in enumerate(shard_ids)}
    owners: dict[str, list[int]] = {}
    for shard, owner in (assignment or {}).items():
        if shard in index:
            owners.setdefault(owner, []).append(index[shard])
    body = {"shards": shard_ids, "parents": {s: list(ps) for s, ps in parents.items()}, "owners": owners}
    return {"Packed": {"B": zlib.compress(json.dumps(body, separators=(",", ":")).encode(), 9)}}


def decode(item: Mapping[str, Any]) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]], dict[str, str]]:
    """The shard IDs, parents and assignment of a stored cache item, packed or not."""
    packed = item.get("Packed", {}).get("B")
    if packed is not None:
        body = json.loads(zlib.decompress(packed))
        shards = tuple(body["shards"])
        parents = {shard: tuple(ps) for shard, ps in body.get("parents", {}).items()}
        assignment = {shards[i]: owner for owner, indexes in body.get("owners", {}).items() for i in indexes}
        return shards, parents, assignment
    shards = tuple(v["S"] for v in item.get("ShardIDs", {}).get("L", []))
    parents = {
        shard: tuple(p["S"] for p in value.get("L", []))
        for shard, value in item.get("Parents", {}).get("M", {}).items()
    }
    assignment = {shard: owner["S"] for shard, owner in item.get("Assignment", {}).get("M", {}).items()}
    return shards, parents, assignment


def item_size(attributes: Mapping[str, Any]) -> int:
    """The size DynamoDB counts for these attributes (names and values), by its published rules."""
    return sum(len(name.encode()) + _value_size(value) for name, value in attributes.items())


def _value_size(value: Mapping[str, Any]) -> int:
    ((kind, content),) = value.items()
    if kind == "S":
        return len(str(content).encode())
    if kind == "B":
        return len(content)
    if kind == "N":
        return len(str(content).lstrip("-").replace(".", "").lstrip("0")) // 2 + 2
    if kind == "L":
        return 3 + sum(1 + _value_size(v) for v in content)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + _value_size(v) for k, v in content.items())
    return 1  # BOOL, NULL
