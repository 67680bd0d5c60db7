from hypothesis import given
from hypothesis import strategies as st

from kinsumer.aws.kinesis import ShardInfo
from kinsumer.reading.frontier import consumable_frontier


@st.composite
def lineages(draw: st.DrawFn) -> list[ShardInfo]:
    """A stream history: start with open shards, then split or merge adjacent open ones."""
    next_id = 0

    def new_id() -> str:
        nonlocal next_id
        next_id += 1
        return f"shardId-{next_id - 1:012d}"

    shards: dict[str, ShardInfo] = {}
    open_ids: list[str] = []  # in hash-key order
    for _ in range(draw(st.integers(1, 5))):
        sid = new_id()
        shards[sid] = ShardInfo(sid)
        open_ids.append(sid)
    for _ in range(draw(st.integers(0, 8))):
        pos = draw(st.integers(0, len(open_ids) - 1))
        parent = open_ids[pos]
        if draw(st.booleans()) or len(open_ids) == 1:  # split
            a, b = new_id(), new_id()
            shards[a] = ShardInfo(a, parent_shard_id=parent)
            shards[b] = ShardInfo(b, parent_shard_id=parent)
            shards[parent] = ShardInfo(
                parent, shards[parent].parent_shard_id, shards[parent].adjacent_parent_shard_id, True
            )
            open_ids[pos : pos + 1] = [a, b]
        else:  # merge with the right-hand neighbour (or left at the end)
            pos = min(pos, len(open_ids) - 2)
            left, right = open_ids[pos], open_ids[pos + 1]
            child = new_id()
            shards[child] = ShardInfo(child, parent_shard_id=left, adjacent_parent_shard_id=right)
            for p in (left, right):
                old = shards[p]
                shards[p] = ShardInfo(p, old.parent_shard_id, old.adjacent_parent_shard_id, True)
            open_ids[pos : pos + 2] = [child]
    return list(shards.values())


@st.composite
def states(draw: st.DrawFn) -> tuple[list[ShardInfo], set[str], set[str]]:
    """A lineage, the shards trimmed past retention (oldest first), and finished ones."""
    shards = draw(lineages())
    closed = [s.shard_id for s in shards if s.closed]
    finished = set(draw(st.lists(st.sampled_from(closed), unique=True))) if closed else set()
    trim = draw(st.integers(0, len(shards)))
    trimmed = {s.shard_id for s in shards[:trim] if s.shard_id in finished}
    return [s for s in shards if s.shard_id not in trimmed], finished, trimmed


@given(states())
def test_no_child_before_both_parents_are_finished(state: tuple[list[ShardInfo], set[str], set[str]]) -> None:
    listed, finished, _trimmed = state
    listed_ids = {s.shard_id for s in listed}
    for shard_id in consumable_frontier(listed, finished):
        shard = next(s for s in listed if s.shard_id == shard_id)
        assert shard_id not in finished
        for parent in shard.parents:
            assert parent in finished or parent not in listed_ids


@given(states())
def test_frontier_is_sorted_and_complete(state: tuple[list[ShardInfo], set[str], set[str]]) -> None:
    listed, finished, _ = state
    frontier = consumable_frontier(listed, finished)
    assert frontier == sorted(frontier)
    listed_ids = {s.shard_id for s in listed}
    ready = [
        s.shard_id
        for s in listed
        if s.shard_id not in finished and all(p in finished or p not in listed_ids for p in s.parents)
    ]
    assert set(frontier) == set(ready)


@given(lineages())
def test_processing_the_frontier_repeatedly_reaches_every_shard_in_lineage_order(shards: list[ShardInfo]) -> None:
    """Finishing whatever the frontier offers (closed shards only) visits parents before children."""
    finished: list[str] = []
    while True:
        frontier = [
            s for s in consumable_frontier(shards, set(finished)) if next(x for x in shards if x.shard_id == s).closed
        ]
        if not frontier:
            break
        finished.extend(frontier)
    position = {sid: i for i, sid in enumerate(finished)}
    for s in shards:
        if s.closed:
            assert s.shard_id in position
            for p in s.parents:
                assert position[p] < position[s.shard_id]


def test_from_api_reads_parents_and_closure() -> None:
    shard = ShardInfo.from_api(
        {
            "ShardId": "shardId-000000000004",
            "ParentShardId": "shardId-000000000001",
            "AdjacentParentShardId": "shardId-000000000002",
            "SequenceNumberRange": {"StartingSequenceNumber": "1", "EndingSequenceNumber": "9"},
        }
    )
    assert shard.parents == ("shardId-000000000001", "shardId-000000000002")
    assert shard.closed
    assert not ShardInfo.from_api({"ShardId": "a", "SequenceNumberRange": {"StartingSequenceNumber": "1"}}).closed


def test_a_generator_of_shards_is_read_once_correctly() -> None:
    shards = [ShardInfo("a"), ShardInfo("b", parent_shard_id="a")]
    assert consumable_frontier((s for s in shards), set()) == ["a"]
