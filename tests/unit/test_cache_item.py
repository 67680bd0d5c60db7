"""The shard cache's item: every form reads back as written, and it stays a few read units at 10,000 shards."""

from __future__ import annotations

import json
import math
import random
import uuid
import zlib
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinsumer.aws.kinesis import ShardInfo
from kinsumer.coordination import cache_item
from kinsumer.coordination.assignment import balanced_assignment
from kinsumer.coordination.cache_item import MAX_ITEM_BYTES, PLAIN_LIMIT, decode, encode, item_size
from kinsumer.errors import KinsumerError
from kinsumer.reading.frontier import consumable_frontier


def shard_id(n: int) -> str:
    return f"shardId-{n:012d}"


def synthetic_listing(open_shards: int) -> tuple[list[str], dict[str, tuple[str, ...]]]:
    """A listing where each of ``open_shards`` open shards is the merge of two finished parents (the most
    parents a shard names), through the coordinator's own frontier: the frontier and its parents."""
    listing = [ShardInfo(shard_id(n), closed=True) for n in range(2 * open_shards)]
    listing += [
        ShardInfo(shard_id(2 * open_shards + i), shard_id(2 * i), shard_id(2 * i + 1)) for i in range(open_shards)
    ]
    frontier = consumable_frontier(listing, {s.shard_id for s in listing if s.closed})
    by_id = {s.shard_id: s for s in listing}
    return frontier, {s: by_id[s].parents for s in frontier}


def test_a_cache_of_10000_shards_with_parents_and_an_assignment_to_50_clients_fits_in_an_item() -> None:
    shards, parents = synthetic_listing(10_000)
    clients = sorted(str(uuid.UUID(int=random.Random(i).getrandbits(128))) for i in range(50))
    assignment = balanced_assignment(shards, clients, {})
    item = {"Key": {"S": "ShardCache"}, **encode(shards, parents, assignment), "Version": {"N": "123456"},
            "LastUpdate": {"N": "1795600000000"}, "Stream": {"S": "arn:aws:kinesis:us-east-1:123456789012:stream/"
            "clicks@1795600000000"}}  # fmt: skip
    size = item_size(item)
    assert size < MAX_ITEM_BYTES // 2, size  # with room to spare: half the limit
    assert "Packed" in item and "ShardIDs" not in item
    assert decode(item) == (tuple(shards), parents, assignment)
    plain = item_size({"ShardIDs": {"L": [{"S": s} for s in shards]}})
    assert plain > MAX_ITEM_BYTES // 2  # the shard IDs alone, spelled out, took half the item


def test_a_small_cache_is_written_as_earlier_versions_read_it() -> None:
    shards, parents = synthetic_listing(8)
    item = encode(shards, parents, {s: "client-a" for s in shards})
    assert set(item) == {"ShardIDs", "Parents", "Assignment"} and item_size(item) <= PLAIN_LIMIT
    assert decode(item) == (tuple(shards), parents, {s: "client-a" for s in shards})


def legacy_packed(shards: list[str], parents: dict[str, tuple[str, ...]], assignment: dict[str, str]) -> bytes:
    """``Packed`` as versions before :data:`cache_item.FORMAT` wrote it (zlib-compressed JSON)."""
    index = {shard: i for i, shard in enumerate(shards)}
    owners: dict[str, list[int]] = {}
    for shard, owner in assignment.items():
        owners.setdefault(owner, []).append(index[shard])
    body = {"shards": shards, "parents": {s: list(ps) for s, ps in parents.items()}, "owners": owners}
    return zlib.compress(json.dumps(body, separators=(",", ":")).encode(), 9)


def legacy_decode(packed: bytes) -> object:
    """What versions before :data:`cache_item.FORMAT` did first with ``Packed``."""
    return json.loads(zlib.decompress(packed))


ids = st.text(max_size=30)
numbered = st.tuples(st.sampled_from(["shardId-", "", "x9-"]), st.integers(1, 12)).flatmap(
    lambda shape: st.lists(st.integers(0, 10 ** shape[1] - 1), unique=True, max_size=200).map(
        lambda numbers: [f"{shape[0]}{n:0{shape[1]}d}" for n in sorted(numbers)]
    )
)  # as Kinesis names shards: one prefix, numbers of one width, increasing


@st.composite
def caches(draw: st.DrawFn) -> tuple[list[str], dict[str, tuple[str, ...]], dict[str, str]]:
    """Any shard IDs (numbered as Kinesis names them or not, in any order), parents and assignment (keys that
    are shard IDs or not: other streams' keys)."""
    shards = draw(st.one_of(numbered, st.lists(ids, max_size=40), numbered.map(lambda s: s[::-1])))
    keys = st.one_of(st.sampled_from(shards), ids) if shards else ids
    parents = draw(
        st.one_of(
            st.builds(dict, st.lists(st.tuples(st.sampled_from(shards), st.lists(ids, max_size=2).map(tuple))))
            if shards else st.just({}),
            st.fixed_dictionaries({s: st.lists(ids, max_size=2).map(tuple) for s in shards}),
            st.dictionaries(ids, st.lists(ids, max_size=3).map(tuple), max_size=10),
        )
    )  # fmt: skip
    clients = draw(st.lists(ids, min_size=1, max_size=300, unique=True))
    assignment = draw(st.dictionaries(keys, st.sampled_from(clients), max_size=300))
    return shards, parents, assignment


@settings(max_examples=150, deadline=None)
@given(caches())
def test_any_cache_reads_back_as_written_in_every_form(cache: tuple[list[str], dict[str, tuple[str, ...]],
                                                                    dict[str, str]]) -> None:  # fmt: skip
    shards, parents, assignment = cache
    with mock.patch.object(cache_item, "PLAIN_LIMIT", -1):  # packed, whatever its size
        packed = encode(shards, parents, assignment)
    assert packed["Packed"]["B"][0] == cache_item.FORMAT
    assert decode(packed) == (tuple(shards), parents, assignment)
    with pytest.raises(zlib.error):  # a version before the format fails on it, loudly: it never misreads it
        legacy_decode(packed["Packed"]["B"])
    with mock.patch.object(cache_item, "PLAIN_LIMIT", math.inf):
        plain = encode(shards, parents, assignment)
    assert "Packed" not in plain and decode(plain) == (tuple(shards), parents, assignment)
    assert encode(shards, parents, assignment) == (plain if item_size(plain) <= PLAIN_LIMIT else packed)
    if len(set(shards)) == len(shards):  # what the earlier packed form could hold: shards' owners, unique IDs
        owned = {s: owner for s, owner in assignment.items() if s in set(shards)}
        assert decode({"Packed": {"B": legacy_packed(shards, parents, owned)}}) == (tuple(shards), parents, owned)


def test_a_packed_format_this_version_does_not_know_is_refused_by_name() -> None:
    packed = encode([shard_id(n) for n in range(200)], {}, None)["Packed"]["B"]
    with pytest.raises(KinsumerError, match="format 3"):
        decode({"Packed": {"B": bytes([3]) + packed[1:]}})


def test_a_cache_of_10000_shards_assigned_to_200_clients_takes_a_few_read_units() -> None:
    # what tests/sim measures: 10,000 fresh shards (no parents), 200 clients with generated IDs, the balanced
    # assignment after joins and leaves; and at worst, shards assigned at random (no runs to fold)
    shards = [shard_id(n) for n in range(10_000)]
    rng = random.Random(7)
    clients = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(200)]
    assignment = balanced_assignment(shards, clients, {})
    for _ in range(10):
        clients.remove(rng.choice(clients))
        assignment = balanced_assignment(shards, clients, assignment)
        clients.append(str(uuid.UUID(int=rng.getrandbits(128))))
        assignment = balanced_assignment(shards, clients, assignment)
    scattered = {s: rng.choice(clients) for s in shards}
    sizes = [item_size(encode(shards, {s: () for s in shards}, a)) for a in (assignment, scattered)]
    assert sizes[0] <= 2 * 4096, sizes  # two consistent read units: 200 clients reading it at once take 400
    assert sizes[1] <= MAX_ITEM_BYTES // 20, sizes


def test_the_size_is_counted_as_dynamodb_counts_it() -> None:
    # names and values; a list or map costs 3 bytes plus 1 per element; numbers about half their digits
    assert item_size({"ab": {"S": "xyz"}}) == 5
    assert item_size({"L": {"L": [{"S": "a"}, {"S": "bc"}]}}) == 1 + 3 + (1 + 1) + (1 + 2)
    assert item_size({"M": {"M": {"k": {"B": b"12345"}}}}) == 1 + 3 + 1 + 1 + 5
    assert cache_item.item_size({"n": {"N": "123456"}}) == 1 + 3 + 2
