"""Shards moved by a leave and by a join, for each assignment: the library's own functions
(what every coordinator computes), over random client IDs."""

from __future__ import annotations

import random
import uuid

import attrs

from kinsumer.coordination.assignment import assigned_shards, balanced_assignment

__all__ = ["Movement", "movement"]


@attrs.frozen
class Movement:
    assignment: str
    event: str  # "leave" or "join"
    mean: float
    most: int


def _modulo(shards: list[str], clients: list[str], current: dict[str, str]) -> dict[str, str]:
    live = sorted(clients)
    return {s: c for i, c in enumerate(live) for s in assigned_shards(shards, i, len(live))}


def _balanced(shards: list[str], clients: list[str], current: dict[str, str]) -> dict[str, str]:
    return balanced_assignment(shards, clients, current)


def movement(shards: int, clients: int, trials: int = 2000, seed: int = 1) -> list[Movement]:
    """For ``clients`` live clients on ``shards`` shards: one random client leaves, or one joins."""
    rng = random.Random(seed)
    ids = [f"shardId-{i:012d}" for i in range(shards)]
    results = []
    for name, assign in (("modulo", _modulo), ("balanced", _balanced)):
        for event in ("leave", "join"):
            counts = []
            for _ in range(trials):
                live = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(clients)]
                before = assign(ids, live, {})
                if event == "leave":
                    leaver = rng.choice(live)
                    after = assign(ids, [c for c in live if c != leaver], before)
                else:
                    after = assign(ids, [*live, str(uuid.UUID(int=rng.getrandbits(128)))], before)
                counts.append(sum(1 for s in ids if before[s] != after[s]))
            results.append(Movement(name, event, sum(counts) / trials, max(counts)))
    return results
