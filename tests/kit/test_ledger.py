"""The ledger's checks catch what they promise to: a record lost, a duplicate no crash explains, records of a
shard or of a key handled out of order; and they let pass a duplicate after a crash."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest

from kinsumer import Checkpoint, Failure, Record
from kinsumer.delivery.progress import ShardProgress
from kinsumer.testing import Ledger, LocalKinesis, StoredRecord

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def stream(count: int) -> tuple[LocalKinesis, list[StoredRecord]]:
    kinesis = LocalKinesis()
    kinesis.add_stream("s")
    for n in range(count):
        kinesis.put("s", str(n), f"key-{n % 2}")
    return kinesis, kinesis.records("s")


def as_record(stored: StoredRecord) -> Record:
    return Record(stored.data, stored.partition_key, stored.sequence_number, stored.shard_id, NOW, NOW)


def handle(ledger: Ledger, client: str, *records: StoredRecord) -> None:
    handler = ledger.wrap(client, lambda record: None)
    for r in records:
        handler(as_record(r))


def test_every_record_once_in_order_is_ok() -> None:
    _, put = stream(4)
    ledger = Ledger()
    handle(ledger, "a", *put)
    report = ledger.report(put)
    assert report.ok and (report.put, report.handled) == (4, 4)


def test_a_record_never_handled_is_lost() -> None:
    _, put = stream(4)
    ledger = Ledger()
    handle(ledger, "a", put[0], put[1], put[3])
    report = ledger.report(put)
    assert not report.ok
    assert report.lost == ((put[2].shard_id, put[2].sequence_number, 0),)


def test_a_duplicate_is_allowed_only_after_the_client_that_handled_it_first_crashed() -> None:
    _, put = stream(4)
    clean = Ledger()
    handle(clean, "a", put[0], put[1])
    handle(clean, "b", put[1], put[2], put[3])  # a clean handoff that handled put[1] twice: a bug
    report = clean.report(put)
    assert [(d.clients, d.allowed) for d in report.duplicates] == [(("a", "b"), False)]
    assert not report.ok and report.unexplained_duplicates == report.duplicates
    crashed = Ledger()
    handle(crashed, "a", put[0], put[1])
    crashed.crash("a")
    handle(crashed, "a", put[2])  # a crashed client's handler is never called, and nothing it does counts
    handle(crashed, "b", put[1], put[2], put[3])
    report = crashed.report(put)
    assert [(d.clients, d.allowed) for d in report.duplicates] == [(("a", "b"), True)]
    assert report.ok


def test_records_first_handled_out_of_their_order_are_reported_by_shard_and_by_key() -> None:
    _, put = stream(4)
    ledger = Ledger()
    handle(ledger, "a", put[0], put[2], put[1], put[3])  # put[2] (key-0) before put[1] (key-1): the shard's order
    assert ledger.report(put).shards_out_of_order == (put[0].shard_id,)
    assert ledger.report(put).keys_out_of_order == ()
    swapped = Ledger()
    handle(swapped, "a", put[2], put[0], put[1], put[3])  # key-0's two records swapped
    assert swapped.report(put).keys_out_of_order == ("key-0",)


def test_kpl_aggregates_count_as_their_user_records() -> None:
    kinesis = LocalKinesis()
    kinesis.add_stream("s")
    kinesis.put_aggregated("s", [(f"{n}", f"key-{n}") for n in range(5)])
    (aggregate,) = kinesis.records("s")
    ledger = Ledger()
    handler = ledger.wrap("a", lambda record: None)
    for i in range(4):
        handler(Record(b"", f"key-{i}", aggregate.sequence_number, aggregate.shard_id, NOW, NOW, sub_sequence_number=i))
    report = ledger.report([aggregate])
    assert report.put == 5 and report.lost == ((aggregate.shard_id, aggregate.sequence_number, 4),)


def test_each_repeat_says_why_it_is_allowed_after_a_timed_out_handoff_or_a_taken_shard() -> None:
    _, put = stream(3)
    shard = put[0].shard_id
    for reason, end in (("handoff timed out", "timed out"), ("taken", "taken"), (None, "clean")):
        ledger = Ledger()
        ledger.gained("a", shard)
        handle(ledger, "a", put[0], put[1])
        if end == "timed out":
            ledger.handoff("a", shard, clean=False)
        elif end == "taken":
            ledger.taken("a", shard)
        else:
            ledger.handoff("a", shard, clean=True)
        ledger.lost("a", shard)
        ledger.gained("b", shard)
        handle(ledger, "b", put[1], put[2])  # b starts from a's last checkpoint, before put[1]
        (duplicate,) = ledger.report(put).duplicates
        assert (duplicate.clients, duplicate.reason, duplicate.allowed) == (("a", "b"), reason, reason is not None)
        assert ledger.report(put).duplicates_by_reason == {reason or "unexplained": 1}
        assert ledger.report(put).captures_by_end == {reason or "clean": 1, "open": 1}


def test_a_repeat_is_not_explained_by_a_later_capture_of_the_same_client() -> None:
    _, put = stream(2)
    shard = put[0].shard_id
    ledger = Ledger()
    ledger.gained("a", shard)
    handle(ledger, "a", put[0])
    ledger.lost("a", shard)  # a clean end
    ledger.gained("a", shard)
    handle(ledger, "a", put[0], put[1])  # a handles put[0] again in its next capture: a bug
    ledger.crash("a")  # the crash ends the second capture, not the first
    assert [d.reason for d in ledger.report(put).duplicates] == [None]


def test_a_late_return_of_a_timed_out_handoff_is_allowed() -> None:
    _, put = stream(1)
    shard = put[0].shard_id
    ledger = Ledger()
    ledger.gained("a", shard)

    def slow(record: Record) -> None:  # a's call is still running when its handoff times out
        ledger.handoff("a", shard, clean=False)
        ledger.lost("a", shard)
        ledger.gained("b", shard)
        handle(ledger, "b", put[0])  # b handles the record again, and returns first

    ledger.wrap("a", slow)(as_record(put[0]))
    (duplicate,) = ledger.report(put).duplicates
    assert (duplicate.clients, duplicate.reason) == (("b", "a"), "handoff timed out")


def test_stranded_records_were_handled_only_in_captures_that_ended_without_a_clean_handoff() -> None:
    _, put = stream(4)
    shard = put[0].shard_id
    ledger = Ledger()
    ledger.gained("a", shard)
    handle(ledger, "a", put[0], put[1], put[2])
    ledger.crash("a")
    ledger.gained("b", shard)
    handle(ledger, "b", put[2], put[3])  # a's checkpoint was after put[1]: put[0] and put[1] are stranded
    report = ledger.report(put)
    assert report.stranded == tuple((r.shard_id, r.sequence_number, 0) for r in put[:2])
    assert report.by_key() == {"key-0": 2, "key-1": 2}
    assert report.by_key(without=report.stranded) == {"key-0": 1, "key-1": 1}
    assert report.ok


def test_records_the_dead_letter_sink_took_are_handled_not_lost() -> None:
    _, put = stream(3)
    ledger = Ledger()
    handle(ledger, "a", put[0], put[2])
    sink = ledger.wrap_sink("a", lambda failure: None)
    sink(Failure(as_record(put[1]), 3, "raised", "ValueError: bad"))
    report = ledger.report(put)
    assert report.lost == () and report.handled == 2
    assert report.dead_lettered == ((put[1].shard_id, put[1].sequence_number, 0),)


def test_the_hooks_come_in_order_per_client_and_shard_or_the_report_says_how_not() -> None:
    _, put = stream(2)
    shard = put[0].shard_id

    def hooks(ledger: Ledger, client: str) -> dict[str, Callable[[str], object]]:
        return {name: ledger.wrap_hook(client, name, None) for name in ("on_assigned", "on_revoked", "on_lost")}

    good = Ledger()
    good.gained("a", shard)
    a = hooks(good, "a")
    a["on_assigned"](shard)
    handle(good, "a", *put)
    a["on_revoked"](shard)
    good.lost("a", shard)
    assert good.report(put).hook_violations == () and good.report(put).ok
    assert good.report(put).revoked_by_key == {"key-0": 1, "key-1": 1}  # what on_revoked had to write out

    early = Ledger()
    early.gained("a", shard)
    a = hooks(early, "a")
    handle(early, "a", put[0])
    a["on_assigned"](shard)
    handle(early, "a", put[1])
    a["on_assigned"](shard)
    a["on_revoked"](shard)
    a["on_lost"](shard)
    a["on_lost"](shard)
    problems = [v.problem for v in early.report(put).hook_violations]
    assert problems == [
        "on_lost without on_assigned", "on_lost without on_assigned", "on_assigned called twice for one capture",
        "a record handled before on_assigned",
    ]  # fmt: skip
    assert not early.report(put).ok

    late = Ledger()
    late.gained("a", shard)
    a = hooks(late, "a")
    a["on_assigned"](shard)

    def revoking_too_soon(record: Record) -> None:
        a["on_revoked"](shard)  # while this record is still in the handler

    late.wrap("a", revoking_too_soon)(as_record(put[0]))
    handle(late, "a", put[1])
    assert [v.problem for v in late.report(put).hook_violations] == [
        "a record handled after on_revoked",
    ]
    inside = Ledger()
    inside.gained("a", shard)
    b = hooks(inside, "a")
    b["on_assigned"](shard)

    def revoking_inside(record: Record) -> None:
        b["on_revoked"](shard)

    inside.wrap("a", revoking_inside)(as_record(put[0]))
    assert [v.problem for v in inside.report(put).hook_violations] == [
        "on_revoked called before the capture's last record was done",
    ]


@pytest.mark.parametrize("overlap", [False, True])
def test_hooks_of_one_shard_must_not_overlap_across_a_clients_captures(overlap: bool) -> None:
    """on_lost runs on a thread of its own: a capture that comes back to the client while it still runs gets its
    on_assigned after it returned, or the report says so (state kept per shard would be reset under it)."""
    _, put = stream(2)
    shard = put[0].shard_id
    ledger, order, later = Ledger(), [], []
    on_assigned = ledger.wrap_hook("a", "on_assigned", lambda shard_id: order.append("assigned"))

    def on_lost_body(shard_id: str) -> None:
        if overlap:  # the next capture is announced while this hook still runs
            later.pop()()
        order.append("lost")

    def second_capture() -> None:
        on_assigned(shard)
        handle(ledger, "a", put[1])

    on_lost = ledger.wrap_hook("a", "on_lost", on_lost_body)
    ledger.gained("a", shard)
    on_assigned(shard)
    handle(ledger, "a", put[0])
    ledger.lost("a", shard)
    ledger.gained("a", shard)  # the shard back
    later.append(second_capture)
    on_lost(shard)
    if not overlap:
        later.pop()()
    problems = [v.problem for v in ledger.report(put).hook_violations]
    if overlap:
        assert order == ["assigned", "assigned", "lost"]
        assert problems == ["on_assigned while the on_lost of the capture before had not returned"]
    else:
        assert order == ["assigned", "lost", "assigned"] and problems == []


def test_a_crashed_clients_hooks_are_neither_called_nor_recorded() -> None:
    _, put = stream(1)
    shard = put[0].shard_id
    calls: list[str] = []
    ledger = Ledger()
    ledger.gained("a", shard)
    on_assigned = ledger.wrap_hook("a", "on_assigned", calls.append)
    on_lost = ledger.wrap_hook("a", "on_lost", calls.append)
    on_assigned(shard)
    ledger.crash("a")
    on_lost(shard)
    assert calls == [shard]
    assert ledger.report(put).hook_violations == ()


def test_with_manual_checkpoints_a_repeat_past_the_checkpoints_called_is_not_checkpointed_and_one_before_a_fault() -> (
    None
):
    """A capture releases its shard at the contiguous prefix of the records checkpointed (a handoff waits for the
    others, then gives up on them): records past it are delivered again, "not checkpointed"; a record within it
    handled again is a fault. A checkpoint called after the release does not count."""
    _, put = stream(4)
    shard = put[0].shard_id
    ledger = Ledger()
    progress = ShardProgress(shard, None)
    late: list[Checkpoint] = []

    def a(record: Record, checkpoint: Checkpoint) -> None:
        if record.sequence_number != put[1].sequence_number:  # put[1]'s is held back, so put[2]'s is not enough
            checkpoint()
        else:
            late.append(checkpoint)

    ledger.gained("a", shard)
    handler = ledger.wrap_manual("a", a)
    for n, stored in enumerate(put[:3]):
        handler(as_record(stored), Checkpoint(shard, stored.sequence_number, None, progress, n, "s"))
    progress.release()  # the handoff ends: it stores the checkpoint after put[0]
    late[0]()  # too late: it does nothing
    ledger.handoff("a", shard, clean=False)
    ledger.lost("a", shard)
    ledger.gained("b", shard)
    b = ledger.wrap_manual("b", lambda record, checkpoint: checkpoint())
    b_progress = ShardProgress(shard, None)
    for n, stored in enumerate(put):  # b starts at put[0] again: a fault for put[0], allowed for put[1] and put[2]
        b(as_record(stored), Checkpoint(shard, stored.sequence_number, None, b_progress, n, "s"))
    report = ledger.report(put)
    assert {d.key[1]: d.reason for d in report.duplicates} == {
        put[0].sequence_number: None, put[1].sequence_number: "not checkpointed",
        put[2].sequence_number: "not checkpointed",
    }  # fmt: skip
    assert report.duplicates_by_reason == {"unexplained": 1, "not checkpointed": 2}
    assert not report.ok and report.not_checkpointed == ()  # b checkpointed each: all is committed
    assert report.stranded == ()  # a timed-out handoff stranded nothing: put[0] came again, the others were due


def test_records_a_manual_handler_never_checkpointed_are_reported_so_and_not_as_stranded() -> None:
    _, put = stream(3)
    shard = put[0].shard_id
    ledger = Ledger()
    ledger.gained("a", shard)
    handler = ledger.wrap_manual("a", lambda record, checkpoint: None)
    progress = ShardProgress(shard, None)
    for n, stored in enumerate(put):
        handler(as_record(stored), Checkpoint(shard, stored.sequence_number, None, progress, n, "s"))
    ledger.handoff("a", shard, clean=False)
    ledger.lost("a", shard)
    report = ledger.report(put)
    assert report.ok and report.stranded == ()  # nothing lost: the shard's next owner delivers them again
    assert report.not_checkpointed == tuple((r.shard_id, r.sequence_number, 0) for r in put)
    assert str(report).endswith(", 3 not checkpointed")
