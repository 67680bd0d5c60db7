"""The streams of one application (:mod:`kinsumer.coordination.streams`): keys, agreement, the combined list."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kinsumer.coordination.assignment import assigned_shards
from kinsumer.coordination.streams import StreamScope, agreed_streams, combined_keys, split_key

names = st.from_regex(r"[A-Za-z0-9_.-]{1,12}", fullmatch=True)
shard_ids = st.integers(0, 10**12).map(lambda n: f"shardId-{n:012d}")


@given(st.lists(names, min_size=1, max_size=5, unique=True), st.lists(shard_ids, max_size=20, unique=True))
def test_every_key_belongs_to_exactly_one_stream_and_gives_its_shard_back(
    streams: list[str], shards: list[str]
) -> None:
    home = streams[0]
    scopes = [StreamScope(name, home=name == home) for name in streams]
    for scope in scopes:
        for shard_id in shards:
            key = scope.key(shard_id)
            assert [s.name for s in scopes if s.shard_id(key) is not None] == [scope.name]
            assert scope.shard_id(key) == shard_id
            assert split_key(key, home) == (scope.name, shard_id)
    assert [scopes[0].key(s) for s in shards] == shards  # the home stream's keys are the shard IDs
    assert len({scope.cache_key for scope in scopes}) == len(scopes)
    assert scopes[0].cache_key == "ShardCache"


@given(st.lists(names, min_size=1, max_size=5, unique=True), st.lists(st.lists(names, max_size=5), max_size=4))
def test_the_agreed_streams_are_those_every_client_lists_in_this_clients_order(
    mine: list[str], others: list[list[str]]
) -> None:
    agreed = agreed_streams(mine, [mine, *others])
    assert list(agreed) == [s for s in mine if all(s in theirs for theirs in others)]
    # every client computes the same set (each in its own order)
    for theirs in others:
        assert set(agreed_streams(theirs, [mine, *others])) == set(agreed)


@given(
    st.dictionaries(names, st.lists(shard_ids, max_size=10, unique=True), min_size=1, max_size=4),
    st.integers(1, 6),
)
def test_the_clients_divide_every_streams_shards_between_them_once(listing: dict[str, list[str]], clients: int) -> None:
    home = min(listing)
    scopes = {name: StreamScope(name, home=name == home) for name in listing}
    keys = combined_keys((scopes[name], shards) for name, shards in listing.items())
    assert keys == sorted(keys) and len(set(keys)) == sum(len(s) for s in listing.values())
    # the same list whatever order the streams come in: every client assigns from the same list
    assert keys == combined_keys((scopes[name], listing[name]) for name in reversed(list(listing)))
    taken = [key for index in range(clients) for key in assigned_shards(keys, index, clients)]
    assert sorted(taken) == keys
