"""The balanced assignment: balance, and how few shards a leave or a join moves. Pure."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from kinsumer.coordination.assignment import assigned_shards, balanced_assignment

client_ids = st.lists(st.uuids().map(str), min_size=1, max_size=12, unique=True)
shard_counts = st.integers(min_value=0, max_value=60)


def shards(count: int) -> list[str]:
    return [f"shardId-{i:012d}" for i in range(count)]


def moved(before: dict[str, str], after: dict[str, str]) -> int:
    return sum(1 for shard, owner in after.items() if before.get(shard) != owner)


def counts(assignment: dict[str, str], clients: list[str]) -> list[int]:
    return [sum(1 for owner in assignment.values() if owner == c) for c in clients]


@given(client_ids, shard_counts)
def test_every_shard_has_one_live_owner_and_the_split_is_balanced(clients: list[str], count: int) -> None:
    result = balanced_assignment(shards(count), clients, {})
    assert sorted(result) == shards(count)
    assert set(result.values()) <= set(clients)
    per_client = counts(result, clients)
    assert max(per_client) - min(per_client) <= 1


@given(client_ids, shard_counts, st.data())
def test_a_leave_moves_only_the_leavers_shards(clients: list[str], count: int, data: st.DataObject) -> None:
    before = balanced_assignment(shards(count), clients, {})
    if len(clients) < 2:
        return
    leaver = data.draw(st.sampled_from(clients))
    rest = [c for c in clients if c != leaver]
    after = balanced_assignment(shards(count), rest, before)
    assert moved(before, after) == sum(1 for owner in before.values() if owner == leaver)
    assert moved(before, after) <= math.ceil(count / len(rest)) + 1
    per_client = counts(after, rest)
    assert max(per_client) - min(per_client) <= 1


@given(client_ids, shard_counts, st.uuids().map(str))
def test_a_join_moves_only_what_the_newcomer_takes(clients: list[str], count: int, newcomer: str) -> None:
    before = balanced_assignment(shards(count), clients, {})
    after = balanced_assignment(shards(count), [*clients, newcomer], before)
    taken = sum(1 for owner in after.values() if owner == newcomer)
    assert moved(before, after) == taken <= math.ceil(count / (len(clients) + 1))
    per_client = counts(after, [*clients, newcomer])
    assert max(per_client) - min(per_client) <= 1


@given(client_ids, shard_counts, st.lists(st.booleans(), min_size=8, max_size=8))
def test_churn_keeps_balance_and_the_same_inputs_give_the_same_result(
    clients: list[str], count: int, leaves: list[bool]
) -> None:
    live, current, spare = list(clients), {}, 0
    for leave in leaves:
        if leave and len(live) > 1:
            live.pop(0)
        else:
            live.append(f"spare-{spare}")
            spare += 1
        current = balanced_assignment(shards(count), live, current)
        assert current == balanced_assignment(shards(count), list(reversed(live)), dict(reversed(current.items())))
        per_client = counts(current, live)
        assert sorted(current) == shards(count) and max(per_client) - min(per_client) <= 1


def test_new_shards_are_spread_and_finished_ones_forgotten() -> None:
    before = balanced_assignment(shards(4), ["a", "b"], {})
    after = balanced_assignment(shards(6)[2:], ["a", "b"], before)  # 0 and 1 finished; 4 and 5 are their children
    assert sorted(after) == shards(6)[2:]
    assert all(after[s] == before[s] for s in shards(4)[2:])
    assert counts(after, ["a", "b"]) == [2, 2]


def test_modulo_moves_most_shards_when_a_client_leaves() -> None:
    """What the balanced assignment is for: modulo, 8 shards, 5 clients, the first one leaving."""
    clients = ["a", "b", "c", "d", "e"]

    def modulo(live: list[str]) -> dict[str, str]:
        return {s: c for i, c in enumerate(live) for s in assigned_shards(shards(8), i, len(live))}

    before = modulo(clients)
    assert moved(before, modulo(clients[1:])) == 8
    assert moved(before, balanced_assignment(shards(8), clients[1:], before)) == 2  # a's two shards
