"""How the shard cache and the published assignment are stored in their DynamoDB item. Pure, no I/O.

A DynamoDB item holds at most 400 KB, and every client reads the whole item with a consistent read: one
read unit per 4 KB, within one item's partition's 3,000 read units a second. Written as lists and maps, the
frontier of a stream's shards, their parents and the published assignment take 45 bytes a shard, 80 with an
assignment, more with parents (each shard ID and client ID spelled out, once per shard): 12 read units at
1,000 shards, and past 400 KB at 3,000 to 9,000. So a cache larger than :data:`PLAIN_LIMIT` (3 KB: with its
key, version and stream, one read unit) is written packed, in one binary attribute ``Packed``: a format byte
(:data:`FORMAT`), then the zlib-compressed

- shard IDs: when they share a prefix and a digit count and increase (``shardId-000000001234``, as Kinesis
  names them), the prefix, the width and the numbers' differences as varints (a run of 1s for a fresh
  stream); else each ID spelled out;
- parents: the parents' IDs (likewise), then each shard's count of parents and their indexes among them;
- assignment: the owners' IDs, then each shard's owner as its index among them (1 byte up to 255 owners):
  the balanced assignment hands out, and keeps, runs of neighbouring shards, which zlib folds; and the
  owners of keys that are not shard IDs (other streams' shards, kept in the home stream's item).

Simulated (``scripts/simulate.py``, docs/performance.md): 10,000 shards balanced over 200 clients, 77 KB (20
read units a read; 3,003 units in the busiest second, past the partition's 3,000, so reads were throttled) in
the earlier packed form, whose JSON spelled out each shard ID and each client's list of shard indexes, are now
2.4 KB: 1 unit a read, 200 in the busiest second (5.3 KB with 36-character client IDs, as ``uuid4`` makes
them); 1,000 shards, 45 KB plain (12 units), are 162 bytes. Once a read costs a unit, reading less often or
less of it (an item per client, or reading only when the frontier changed) would save little and cost more
items, more writes on each change and more ways to go stale. A cache up to :data:`PLAIN_LIMIT` is written as
it always was (``ShardIDs``, ``Parents``, ``Assignment``), which every version reads.

The reader takes every form written before: plain, and ``Packed`` holding zlib-compressed JSON (a zlib
stream starts with ``0x78``; the format byte never does). Mixed versions during a rolling upgrade: a client
of a version before this format that reads a cache in it fails on it (zlib refuses the format byte) and
stops with that error, writing nothing: it never misreads the cache nor overwrites it. A later format gets
a new format byte, which this reader refuses in the same way, with a :class:`~kinsumer.errors.KinsumerError`
saying so.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..errors import KinsumerError

__all__ = ["FORMAT", "PLAIN_LIMIT", "decode", "encode", "item_size"]

#: Bytes (as :func:`item_size` counts them) up to which the cache is written as lists and maps.
PLAIN_LIMIT = 3 * 1024
#: The most a DynamoDB item may hold.
MAX_ITEM_BYTES = 400 * 1024
#: The first byte of ``Packed`` in the format written now (the JSON one before it starts with zlib's 0x78).
FORMAT = 2

_NUMBERED = re.compile(r"(.*?)([0-9]+)")


def encode(
    shard_ids: Sequence[str], parents: Mapping[str, tuple[str, ...]], assignment: Mapping[str, str] | None
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
    return {"Packed": {"B": bytes([FORMAT]) + zlib.compress(_pack(list(shard_ids), parents, assignment or {}), 9)}}


def decode(item: Mapping[str, Any]) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]], dict[str, str]]:
    """The shard IDs, parents and assignment of a stored cache item, in any form written.

    Raises :class:`~kinsumer.errors.KinsumerError` for a packed form this version does not know."""
    packed = item.get("Packed", {}).get("B")
    if packed is not None:
        packed = bytes(packed)
        if packed[:1] == bytes([FORMAT]):
            return _unpack(zlib.decompress(packed[1:]))
        if packed[:1] == b"\x78":
            return _decode_json(packed)
        raise KinsumerError(
            f"the shard cache is packed in format {packed[0] if packed else None}, which this version of kinsumer "
            "does not read (a newer version wrote it): upgrade this client"
        )
    shards = tuple(v["S"] for v in item.get("ShardIDs", {}).get("L", []))
    parents = {
        shard: tuple(p["S"] for p in value.get("L", []))
        for shard, value in item.get("Parents", {}).get("M", {}).items()
    }
    assignment = {shard: owner["S"] for shard, owner in item.get("Assignment", {}).get("M", {}).items()}
    return shards, parents, assignment


def _decode_json(packed: bytes) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]], dict[str, str]]:
    """The packed form before :data:`FORMAT`: zlib-compressed JSON with each owner's indexes into the shards."""
    body = json.loads(zlib.decompress(packed))
    shards = tuple(body["shards"])
    parents = {shard: tuple(ps) for shard, ps in body.get("parents", {}).items()}
    assignment = {shards[i]: owner for owner, indexes in body.get("owners", {}).items() for i in indexes}
    return shards, parents, assignment


def _pack(shards: list[str], parents: Mapping[str, tuple[str, ...]], assignment: Mapping[str, str]) -> bytes:
    out = bytearray()
    _put_strings(out, shards)
    pool = sorted({p for ps in parents.values() for p in ps})
    at = {p: i for i, p in enumerate(pool)}
    _put_strings(out, pool)
    same = len(parents) == len(shards) and set(parents) == set(shards)  # as the frontier's are
    keys = shards if same else sorted(parents)
    out.append(same)
    if not same:
        _put_strings(out, keys)
    for key in keys:
        _put_varint(out, len(parents[key]))
        for parent in parents[key]:
            _put_varint(out, at[parent])
    owners = sorted(set(assignment.values()))
    index = {owner: i + 1 for i, owner in enumerate(owners)}  # 0: no owner
    width = max(1, (len(owners).bit_length() + 7) // 8)
    _put_strings(out, owners)
    out.append(width)
    for shard in shards:
        out += index[assignment[shard]].to_bytes(width, "big") if shard in assignment else bytes(width)
    listed = set(shards)
    extra = sorted(key for key in assignment if key not in listed)
    _put_strings(out, extra)
    for key in extra:
        out += index[assignment[key]].to_bytes(width, "big")
    return bytes(out)


def _unpack(data: bytes) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]], dict[str, str]]:
    read = _Reader(data)
    shards = read.strings()
    pool = read.strings()
    keys = shards if read.byte() else read.strings()
    parents = {key: tuple(pool[read.varint()] for _ in range(read.varint())) for key in keys}
    owners = ("", *read.strings())
    width = read.byte()
    assignment = {shard: owners[i] for shard in shards if (i := read.fixed(width))}
    extra = read.strings()
    assignment.update((key, owners[read.fixed(width)]) for key in extra)
    return shards, parents, assignment


def _put_varint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)


def _put_bytes(out: bytearray, raw: bytes) -> None:
    _put_varint(out, len(raw))
    out += raw


def _numbered(strings: Sequence[str]) -> tuple[str, int, list[int]] | None:
    """(prefix, width, numbers) if every string is that prefix and an increasing number of that many digits."""
    if not strings:
        return None
    first = _NUMBERED.fullmatch(strings[0])
    if first is None:
        return None
    prefix, width = first[1], len(first[2])
    numbers: list[int] = []
    for s in strings:
        digits = s[len(prefix) :]
        if not (s.startswith(prefix) and len(digits) == width and digits.isascii() and digits.isdigit()):
            return None
        number = int(digits)
        if numbers and number <= numbers[-1]:
            return None
        numbers.append(number)
    return prefix, width, numbers


def _put_strings(out: bytearray, strings: Sequence[str]) -> None:
    """A list of strings: its length; 1, a prefix, a width and the numbers' differences; or 0 and each one."""
    _put_varint(out, len(strings))
    numbered = _numbered(strings)
    out.append(numbered is not None)
    if numbered is None:
        for s in strings:
            _put_bytes(out, s.encode())
        return
    prefix, width, numbers = numbered
    _put_bytes(out, prefix.encode())
    _put_varint(out, width)
    previous = 0
    for number in numbers:
        _put_varint(out, number - previous)
        previous = number


class _Reader:
    """Reads back what the ``_put_*`` functions wrote."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._at = 0

    def byte(self) -> int:
        self._at += 1
        return self._data[self._at - 1]

    def fixed(self, width: int) -> int:
        self._at += width
        return int.from_bytes(self._data[self._at - width : self._at], "big")

    def varint(self) -> int:
        n, shift = 0, 0
        while True:
            b = self.byte()
            n |= (b & 0x7F) << shift
            if b < 0x80:
                return n
            shift += 7

    def raw(self) -> bytes:
        length = self.varint()
        self._at += length
        return self._data[self._at - length : self._at]

    def strings(self) -> tuple[str, ...]:
        count = self.varint()
        if not self.byte():
            return tuple(self.raw().decode() for _ in range(count))
        prefix, width = self.raw().decode(), self.varint()
        return tuple(f"{prefix}{n:0{width}d}" for n in _running_sum(self.varint() for _ in range(count)))


def _running_sum(deltas: Iterator[int]) -> Iterator[int]:
    total = 0
    for delta in deltas:
        total += delta
        yield total


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
