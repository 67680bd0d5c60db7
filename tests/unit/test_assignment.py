from hypothesis import given
from hypothesis import strategies as st

from kinsumer.coordination.assignment import assigned_shards, client_index

shard_ids = st.lists(st.integers(0, 10_000).map(lambda n: f"shardId-{n:012d}"), unique=True, max_size=80)
client_ids = st.lists(st.uuids().map(str), unique=True, min_size=1, max_size=12)


@given(shard_ids, client_ids)
def test_every_frontier_shard_has_exactly_one_owner(shards: list[str], clients: list[str]) -> None:
    owners: dict[str, list[str]] = {s: [] for s in shards}
    for client in clients:
        index, count = client_index(clients, client)
        for shard in assigned_shards(shards, index, count):
            owners[shard].append(client)
    assert all(len(o) == 1 for o in owners.values()), owners


@given(shard_ids, client_ids)
def test_loads_differ_by_at_most_one(shards: list[str], clients: list[str]) -> None:
    loads = [len(assigned_shards(shards, *client_index(clients, c))) for c in clients]
    assert max(loads) - min(loads) <= 1


@given(client_ids, st.uuids().map(str))
def test_a_client_missing_from_the_scan_still_gets_a_place(clients: list[str], me: str) -> None:
    index, count = client_index(clients, me)
    assert count == len(set(clients) | {me})
    assert sorted(set(clients) | {me})[index] == me


@given(shard_ids, client_ids)
def test_assignment_does_not_depend_on_input_order(shards: list[str], clients: list[str]) -> None:
    me = clients[0]
    forward = assigned_shards(shards, *client_index(clients, me))
    backward = assigned_shards(list(reversed(shards)), *client_index(list(reversed(clients)), me))
    assert forward == backward
