"""The shard cache's item stays a valid DynamoDB item (400 KB at most) at 10,000 shards."""

from __future__ import annotations

import random
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from kinsumer.aws.kinesis import ShardInfo
from kinsumer.coordination import cache_item
from kinsumer.coordination.assignment import balanced_assignment
from kinsumer.coordination.cache_item import MAX_ITEM_BYTES, PLAIN_LIMIT, decode, encode, item_size
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


@settings(max_examples=100, deadline=None)
@given(
    st.integers(0, 4000),
    st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=60, unique=True),
    st.integers(0, 2**32 - 1),
)
def test_whatever_its_size_a_cache_reads_back_as_written(count: int, clients: list[str], seed: int) -> None:
    # a seeded Random, not st.randoms(): drawing thousands of values from hypothesis's own data overran
    # its entropy budget now and then (FailedHealthCheck data_too_large), though nothing failed
    rng = random.Random(seed)
    shards = sorted(shard_id(n) for n in rng.sample(range(10 * count + 1), count))
    parents = {s: tuple(shard_id(rng.randrange(10**6)) for _ in range(rng.choice((0, 1, 2)))) for s in shards}
    assignment = {s: rng.choice(clients) for s in shards if rng.random() < 0.9}
    item = encode(shards, parents, assignment)
    assert decode(item) == (tuple(shards), parents, assignment)
    assert item_size(item) <= max(PLAIN_LIMIT, MAX_ITEM_BYTES // 2)


def test_the_size_is_counted_as_dynamodb_counts_it() -> None:
    # names and values; a list or map costs 3 bytes plus 1 per element; numbers about half their digits
    assert item_size({"ab": {"S": "xyz"}}) == 5
    assert item_size({"L": {"L": [{"S": "a"}, {"S": "bc"}]}}) == 1 + 3 + (1 + 1) + (1 + 2)
    assert item_size({"M": {"M": {"k": {"B": b"12345"}}}}) == 1 + 3 + 1 + 1 + 5
    assert cache_item.item_size({"n": {"N": "123456"}}) == 1 + 3 + 2
