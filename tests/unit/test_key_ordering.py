"""process()'s scheduler with ``ordering="key"``, as its workers drive it, against the checkpoint tracker.

A model of the taker and the workers (``Processor`` and ``ShardJobs``: one taker parks records in
shard order, workers claim a lane, handle its records one at a time, take more or release it; a
shard's own lane stops taking more once its careful part is over) runs the real
:class:`~kinsumer.handling.scheduler.Scheduler` and one
:class:`~kinsumer.delivery.tracker.CheckpointTracker` per shard through any order of steps
hypothesis picks. Whatever the order: each key's records go to a handler strictly in order,
a record of a shard in careful mode goes alone and after every earlier record of its shard, the
checkpoint never passes a record not done, and every record is done in the end.
"""

from __future__ import annotations

from typing import NamedTuple

from hypothesis import given, settings
from hypothesis import strategies as st

from kinsumer.delivery.tracker import CheckpointTracker
from kinsumer.handling.scheduler import LANE_SEPARATOR, Scheduler


class Item(NamedTuple):
    shard: str
    index: int  # its place in the shard (its token)
    key: str


class Model:
    def __init__(self, streams: dict[str, list[str]], careful: dict[str, int], workers: int, limit: int) -> None:
        self.records = {shard: [Item(shard, i, key) for i, key in enumerate(keys)] for shard, keys in streams.items()}
        self.careful_until = careful  # a shard's first records in careful mode (the episode's window)
        self.taken = dict.fromkeys(streams, 0)
        self.done: set[Item] = set()
        self.in_flight: dict[int, tuple[str, Item]] = {}  # worker -> (lane, record)
        self.closing: dict[int, str] = {}  # worker -> the lane it holds, about to release it
        self.idle = list(range(workers))
        self.trackers = {shard: CheckpointTracker[Item]() for shard in streams}
        self.scheduler: Scheduler[Item] = Scheduler(limit, key_of=lambda item: item.key)

    def careful(self, shard: str) -> bool:
        """The shard's episode is on until its window's last record is done."""
        until = self.careful_until.get(shard, 0)
        return until > 0 and Item(shard, until - 1, self.records[shard][until - 1].key) not in self.done

    def serial(self, item: Item) -> bool:
        return self.careful(item.shard)

    # ------------------------------------------------------------ steps

    def take(self, shard: str, claim_now: bool) -> None:
        """The taker takes the shard's next record and parks it (or, as an idle worker, claims it at once)."""
        item = self.records[shard][self.taken[shard]]
        self.taken[shard] += 1
        assert self.trackers[shard].deliver(item) == item.index
        lane = self.scheduler.lane(shard, item, self.serial(item))
        if claim_now and self.idle and self.scheduler.claim_now(lane, item):
            self.hand(self.idle.pop(0), lane, item)
        else:
            self.scheduler.put(lane, item)

    def claim(self) -> None:
        claimed = self.scheduler.claim(1)
        if claimed is not None:
            lane, (item,) = claimed
            self.hand(self.idle.pop(0), lane, item)

    def finish(self, worker: int, more: bool) -> None:
        """The worker's record is done; its job takes the lane's next record (``more``) or ends."""
        lane, item = self.in_flight.pop(worker)
        self.done.add(item)
        tracker = self.trackers[item.shard]
        tracker.ack(item.index)
        checkpoint = tracker.checkpoint
        if checkpoint is not None:
            assert all(r in self.done for r in self.records[item.shard][: checkpoint.index + 1])
        if LANE_SEPARATOR not in lane and not self.careful(item.shard):
            self.closing[worker] = lane  # the shard's own lane, its careful part over: released at a later step
            return
        if more:  # else the job ends early (as when its shard is being given up)
            following = self.scheduler.more(lane, 1)
            if following:
                self.hand(worker, lane, following[0])
                return
        self.close(worker, lane)

    def close(self, worker: int, lane: str) -> None:
        self.closing.pop(worker, None)
        self.scheduler.release(lane, self.serial)
        self.idle.append(worker)

    def hand(self, worker: int, lane: str, item: Item) -> None:
        """The record goes to a handler: every earlier record of its key is done; in careful mode every
        earlier record of its shard is done and none of the shard is in a handler."""
        earlier = self.records[item.shard][: item.index]
        assert all(r in self.done for r in earlier if r.key == item.key), f"{item} before an earlier record of its key"
        if self.serial(item):
            assert all(r in self.done for r in earlier), f"{item} in careful mode before an earlier record"
            assert all(other.shard != item.shard for _, other in self.in_flight.values()), f"{item} not alone"
        self.in_flight[worker] = (lane, item)

    def left_to_take(self) -> list[str]:
        return [shard for shard, items in self.records.items() if self.taken[shard] < len(items)]


shard_keys = st.lists(st.sampled_from("abcd"), min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(
    streams=st.dictionaries(st.sampled_from(["s0", "s1", "s2"]), shard_keys, min_size=1, max_size=3),
    workers=st.integers(1, 4),
    limit=st.integers(1, 6),
    data=st.data(),
)
def test_any_completion_order_keeps_each_key_in_order_and_the_checkpoint_behind_unfinished_records(
    streams: dict[str, list[str]], workers: int, limit: int, data: st.DataObject
) -> None:
    careful = {shard: data.draw(st.integers(0, len(keys)), label=f"careful {shard}") for shard, keys in streams.items()}
    model = Model(streams, careful, workers, limit)
    for _ in range(400):
        steps = []
        if model.left_to_take() and model.scheduler.parked < limit:
            steps.append("take")
        if model.idle:
            steps.append("claim")
        if model.in_flight:
            steps.append("finish")
        if model.closing:
            steps.append("close")
        if not steps or len(model.done) == sum(map(len, streams.values())):
            break
        step = data.draw(st.sampled_from(steps))
        if step == "take":
            model.take(data.draw(st.sampled_from(model.left_to_take())), data.draw(st.booleans()))
        elif step == "claim":
            model.claim()
        elif step == "close":
            worker = data.draw(st.sampled_from(sorted(model.closing)))
            model.close(worker, model.closing[worker])
        else:
            model.finish(data.draw(st.sampled_from(sorted(model.in_flight))), data.draw(st.booleans()))
    # then to the end, in a fixed order: nothing may be stuck
    for _ in range(10_000):
        if model.in_flight:
            model.finish(min(model.in_flight), True)
        elif model.closing:
            worker = min(model.closing)
            model.close(worker, model.closing[worker])
        elif model.idle and model.scheduler.parked:
            model.claim()
            if not model.in_flight:
                break  # parked records no worker can claim: stuck
        elif model.left_to_take():
            model.take(model.left_to_take()[0], False)
        else:
            break
    everything = {item for items in model.records.values() for item in items}
    assert model.done == everything, f"never done: {sorted(everything - model.done)}"
    for shard, tracker in model.trackers.items():
        assert tracker.outstanding == 0 and tracker.checkpoint == model.records[shard][-1]


def test_a_shard_after_its_careful_part_goes_key_by_key_and_each_key_in_order() -> None:
    """The shard's own lane hands out its careful records one by one; what came meanwhile then spreads to
    the keys' lanes in order, so two keys go side by side."""
    model = Model({"s": list("ababa")}, {"s": 1}, workers=2, limit=10)
    for _ in range(4):
        model.take("s", False)
    model.claim()
    ((lane, first),) = model.in_flight.values()
    assert lane == "s" and first.index == 0
    model.claim()
    assert len(model.in_flight) == 1  # the rest waits behind the careful record, in the shard's own lane
    model.finish(0, True)  # the episode is over: the lane is released and its records spread by key
    model.take("s", False)  # taken before the release: behind the others in the shard's lane
    model.close(0, "s")
    model.claim()
    model.claim()
    assert sorted(item.index for _, item in model.in_flight.values()) == [1, 2]  # "b" and "a", side by side
    assert {lane for lane, _ in model.in_flight.values()} == {f"s{LANE_SEPARATOR}b", f"s{LANE_SEPARATOR}a"}
