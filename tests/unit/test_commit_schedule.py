"""The commit clock's schedule: a stateful model of a committer driving it."""

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kinsumer.coordination.commit_schedule import CommitSchedule

PERIOD = 1.0
SHARDS = st.sampled_from([f"shard-{i}" for i in range(6)])


class ScheduleModel(RuleBasedStateMachine):
    """A committer that wakes at next_due() (or is late) and commits what is due."""

    def __init__(self) -> None:
        super().__init__()
        self.schedule = CommitSchedule(PERIOD)
        self.now = 0.0
        self.owned_since: dict[str, float] = {}
        self.last_commit: dict[str, float] = {}

    @rule(shard=SHARDS)
    def capture(self, shard: str) -> None:
        if shard not in self.owned_since:
            self.schedule.add(shard, self.now)
            self.owned_since[shard] = self.now

    @precondition(lambda self: self.owned_since)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        shard = data.draw(st.sampled_from(sorted(self.owned_since)))
        self.schedule.remove(shard)
        del self.owned_since[shard]
        self.last_commit.pop(shard, None)

    @rule(late=st.floats(0, 0.5))
    def wake_and_commit(self, late: float) -> None:
        """Sleep until the next commit is due (plus ``late``) and commit everything due."""
        due_at = self.schedule.next_due()
        self.now = max(self.now, (due_at if due_at is not None else self.now) + late)
        due = self.schedule.due(self.now)
        assert due == sorted(due, key=lambda s: (self._due_time(s), s)), "most overdue first"
        for shard in due:
            assert shard in self.owned_since, "only owned shards commit"
            previous = self.last_commit.get(shard, self.owned_since[shard])
            assert self.now - previous >= PERIOD - 1e-9, "never sooner than a period after the last"
            self.schedule.started(shard, self.now)
            self.last_commit[shard] = self.now

    def _due_time(self, shard: str) -> float:
        return self.last_commit.get(shard, self.owned_since[shard]) + PERIOD

    @invariant()
    def every_owned_shard_is_scheduled_within_a_period(self) -> None:
        assert len(self.schedule) == len(self.owned_since)
        for shard in self.owned_since:
            assert shard in self.schedule
            assert self._due_time(shard) <= max(self.now, self.owned_since[shard]) + PERIOD + 1e-9
        next_due = self.schedule.next_due()
        assert next_due == (min(map(self._due_time, self.owned_since)) if self.owned_since else None)


TestCommitSchedule = ScheduleModel.TestCase


def test_started_after_removal_does_not_bring_a_shard_back() -> None:
    schedule = CommitSchedule(PERIOD)
    schedule.add("a", 0.0)
    schedule.remove("a")
    schedule.started("a", 5.0)  # a commit that was under way when the shard was released
    assert "a" not in schedule and schedule.next_due() is None
