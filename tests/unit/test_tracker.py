from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kinsumer.delivery.tracker import CheckpointTracker
from kinsumer.reading.position import Position, StartPosition, position_order


class TrackerModel(RuleBasedStateMachine):
    """The tracker against a plain model: delivered list + acknowledged and retracted sets.

    Records are plain Kinesis records or the user records of KPL aggregates, whose positions
    share a sequence number and count up in sub-sequence. They are registered one at a time
    or as a run, acknowledged one at a time or as a range; some are retracted (registered,
    never handed over) and never acknowledged.
    """

    def __init__(self) -> None:
        super().__init__()
        self.tracker: CheckpointTracker[Position] = CheckpointTracker(("100", None))
        self.delivered: list[tuple[int, Position]] = []  # (token, position)
        self.acked: set[int] = set()
        self.retracted: set[int] = set()
        self.next_seq = 101

    def _deliver(self, position: Position) -> None:
        if self.delivered:
            assert position_order(position) > position_order(self.delivered[-1][1])
        self.delivered.append((self.tracker.deliver(position), position))

    @rule(gaps=st.lists(st.integers(1, 5), min_size=1, max_size=8))
    def deliver_a_run(self, gaps: list[int]) -> None:
        positions = []
        for gap in gaps:
            self.next_seq += gap
            positions.append((str(self.next_seq), None))
        first = self.tracker.deliver_many(positions)
        assert first == (self.delivered[-1][0] + 1 if self.delivered else 0)
        self.delivered += [(first + i, p) for i, p in enumerate(positions)]

    @precondition(lambda self: self.delivered)
    @rule(data=st.data())
    def ack_a_range(self, data: st.DataObject) -> None:
        tokens = [t for t, _ in self.delivered]
        first = data.draw(st.sampled_from(tokens))
        last = data.draw(st.sampled_from([t for t in tokens if t >= first]))
        self.tracker.ack_range(first, last)
        self.acked |= {t for t in range(first, last + 1) if t not in self.retracted}

    @precondition(lambda self: any(t not in self.acked for t, _ in self.delivered))
    @rule(data=st.data())
    def retract(self, data: st.DataObject) -> None:
        unacked = [t for t, _ in self.delivered if t not in self.acked]
        first = data.draw(st.sampled_from(unacked))
        last = data.draw(st.sampled_from([t for t in unacked if t >= first]))
        self.tracker.retract(first, last)
        self.retracted |= {t for t in range(first, last + 1) if t not in self.acked}

    @rule(gap=st.integers(1, 5))
    def deliver_plain(self, gap: int) -> None:
        self.next_seq += gap
        self._deliver((str(self.next_seq), None))

    @rule(gap=st.integers(1, 5), users=st.integers(1, 6))
    def deliver_aggregate(self, gap: int, users: int) -> None:
        self.next_seq += gap
        for sub in range(users):
            self._deliver((str(self.next_seq), sub))

    @precondition(lambda self: self.delivered)
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        token, _ = data.draw(st.sampled_from(self.delivered))
        self.tracker.ack(token)
        if token not in self.retracted:
            self.acked.add(token)

    @rule(token=st.integers(-5, 10_000))
    def ack_unknown_token_is_harmless(self, token: int) -> None:
        if token in {t for t, _ in self.delivered}:
            return
        before = self.tracker.checkpoint
        assert self.tracker.ack(token) is False
        assert self.tracker.checkpoint == before

    def expected_checkpoint(self) -> Position:
        checkpoint: Position = ("100", None)
        for token, position in self.delivered:
            if token not in self.acked:
                break
            checkpoint = position
        return checkpoint

    @invariant()
    def checkpoint_is_the_contiguous_prefix(self) -> None:
        assert self.tracker.checkpoint == self.expected_checkpoint()

    @invariant()
    def checkpoint_stays_before_the_first_unacknowledged_record(self) -> None:
        checkpoint = self.tracker.checkpoint
        assert checkpoint is not None
        unacked = [p for t, p in self.delivered if t not in self.acked]
        if unacked:
            assert position_order(checkpoint) < position_order(unacked[0])

    @invariant()
    def outstanding_counts_records_neither_acknowledged_nor_retracted(self) -> None:
        assert self.tracker.outstanding == len(self.delivered) - len(self.acked) - len(self.retracted)


TestTrackerModel = TrackerModel.TestCase


def resume(shard: list[Position], start: StartPosition) -> list[Position]:
    """The user records a reader hands on from ``start``: what GetShardIterator, then the skip, give."""
    assert start.sequence_number is not None
    after = start.kind == "AFTER_SEQUENCE_NUMBER"
    sequence_number = start.sequence_number
    records = [p for p in shard if int(p[0]) > int(sequence_number) or (not after and p[0] == sequence_number)]
    return [p for p in records if not start.is_done(p[0], p[1])]


@given(
    kinesis_records=st.lists(st.integers(0, 4), min_size=1, max_size=12),
    data=st.data(),
)
def test_a_restart_from_the_checkpoint_resumes_at_the_first_unprocessed_record(
    kinesis_records: list[int], data: st.DataObject
) -> None:
    """Each element is a Kinesis record: 0 = plain, n = an aggregate of n user records."""
    shard: list[Position] = []
    for i, users in enumerate(kinesis_records):
        seq = str(1000 + 10 * i)
        shard += [(seq, None)] if users == 0 else [(seq, sub) for sub in range(users)]
    tracker = CheckpointTracker()
    tokens = [tracker.deliver(p) for p in shard]
    acked = data.draw(st.sets(st.sampled_from(range(len(shard)))))
    for i in acked:
        tracker.ack(tokens[i])
    first_unprocessed = next((i for i in range(len(shard)) if i not in acked), len(shard))
    checkpoint = tracker.checkpoint
    resumed = shard if checkpoint is None else resume(shard, StartPosition.after_position(checkpoint))
    assert resumed == shard[first_unprocessed:]


@given(st.permutations(range(50)))
def test_any_acknowledgement_order_ends_at_the_last_record(order: list[int]) -> None:
    tracker = CheckpointTracker()
    tokens = [tracker.deliver((str(1000 + i // 5), i % 5)) for i in range(50)]
    for i in order:
        tracker.ack(tokens[i])
    assert tracker.checkpoint == ("1009", 4)
    assert tracker.outstanding == 0


def test_double_ack_is_idempotent() -> None:
    tracker = CheckpointTracker()
    a, b = tracker.deliver(("1", None)), tracker.deliver(("2", None))
    assert tracker.ack(b) is False
    assert tracker.ack(b) is False
    assert tracker.ack(a) is True
    assert tracker.ack(a) is False
    assert tracker.checkpoint == ("2", None)
