from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kinsumer.delivery.tracker import CheckpointTracker


class TrackerModel(RuleBasedStateMachine):
    """The tracker against a plain model: delivered list + acknowledged set."""

    def __init__(self) -> None:
        super().__init__()
        self.tracker = CheckpointTracker("100")
        self.delivered: list[tuple[int, str]] = []  # (token, sequence number)
        self.acked: set[int] = set()
        self.next_seq = 101

    @rule(gap=st.integers(1, 5))
    def deliver(self, gap: int) -> None:
        self.next_seq += gap
        seq = str(self.next_seq)
        self.delivered.append((self.tracker.deliver(seq), seq))

    @precondition(lambda self: self.delivered)
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        token, _ = data.draw(st.sampled_from(self.delivered))
        self.tracker.ack(token)
        self.acked.add(token)

    @rule(token=st.integers(-5, 10_000))
    def ack_unknown_token_is_harmless(self, token: int) -> None:
        if token in {t for t, _ in self.delivered}:
            return
        before = self.tracker.checkpoint
        assert self.tracker.ack(token) is False
        assert self.tracker.checkpoint == before

    def expected_checkpoint(self) -> str:
        checkpoint = "100"
        for token, seq in self.delivered:
            if token not in self.acked:
                break
            checkpoint = seq
        return checkpoint

    @invariant()
    def checkpoint_is_the_contiguous_prefix(self) -> None:
        assert self.tracker.checkpoint == self.expected_checkpoint()

    @invariant()
    def outstanding_counts_records_after_the_checkpoint(self) -> None:
        covered = 0
        for token, _ in self.delivered:
            if token not in self.acked:
                break
            covered += 1
        assert self.tracker.outstanding == len(self.delivered) - covered


TestTrackerModel = TrackerModel.TestCase


@given(st.permutations(range(50)))
def test_any_acknowledgement_order_ends_at_the_last_record(order: list[int]) -> None:
    tracker = CheckpointTracker()
    tokens = [tracker.deliver(str(1000 + i)) for i in range(50)]
    for i in order:
        tracker.ack(tokens[i])
    assert tracker.checkpoint == "1049"
    assert tracker.outstanding == 0


def test_double_ack_is_idempotent() -> None:
    tracker = CheckpointTracker()
    a, b = tracker.deliver("1"), tracker.deliver("2")
    assert tracker.ack(b) is False
    assert tracker.ack(b) is False
    assert tracker.ack(a) is True
    assert tracker.ack(a) is False
    assert tracker.checkpoint == "2"
