"""A fleet of clients running a handler with process() on the kit, through the events that break handlers."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable

import attrs
import pytest

from kinsumer import Failure, Record, StatReceiver
from kinsumer.testing import FAST_CONFIG, Fleet, LocalAWS, PerClient
from kinsumer.testing._client import CUT_OFF


def test_a_fleet_of_3_through_a_join_a_leave_a_crash_and_a_split_loses_nothing_repeats_only_after_the_crash(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="kinsumer")
    aws = LocalAWS()
    aws.kinesis.add_stream("clicks", shards=4)
    numbers = itertools.count()

    def put(count: int) -> None:
        for _ in range(count):
            n = next(numbers)
            aws.kinesis.put("clicks", str(n), f"key-{n % 13}")

    def slow(record: Record) -> None:
        time.sleep(0.002)  # records stay in flight: a crash finds some handled and not yet checkpointed

    with Fleet(aws, "clicks", "app", slow) as fleet:
        fleet.start(3)
        put(300)
        fleet.wait_handled()
        fleet.join()
        put(300)
        fleet.leave(fleet.members[0])
        put(600)
        # records flowing when the crash comes
        fleet.ledger.wait_for(fleet.ledger.distinct + 100, timeout=30, check=fleet.check)
        crashed = fleet.members[0]
        fleet.crash(crashed)
        aws.kinesis.split("clicks", aws.kinesis.open_shards("clicks")[0])
        put(300)
        report = fleet.wait_handled()
        assert len(fleet.members) == 2
    # the crashed client met its cut-off calls as it died (its stop() could not deregister it, at least), and
    # what it logged of them was dropped: the crash is the test's doing
    assert fleet._quiet.dropped > 0
    assert not [r for r in caplog.records if CUT_OFF in r.getMessage()]
    assert report.put == 1500 and report.lost == ()
    assert report.unexplained_duplicates == ()
    # what the crashed client handled; on a loaded machine a handoff may also time out (1 s), and say so
    assert all(d.clients[0] == crashed for d in report.duplicates if d.reason == "crash")
    assert set(report.duplicates_by_reason) <= {"crash", "handoff timed out", "taken"}
    assert report.shards_out_of_order == () and report.keys_out_of_order == ()
    assert report.ok, str(report)


def test_a_handoff_that_times_out_allows_the_record_in_the_handler_to_be_handled_again_and_says_so() -> None:
    aws = LocalAWS()
    aws.kinesis.add_stream("clicks", shards=1)
    seen: set[str] = set()
    stuck, again = threading.Event(), threading.Event()

    def handler(record: Record) -> None:
        first = record.sequence_number not in seen
        seen.add(record.sequence_number)
        if record.data == b"stuck" and first:
            stuck.set()
            again.wait(30)  # held past the handoff's 1 s, until the next owner handled it too
        elif record.data == b"stuck":
            again.set()

    with Fleet(aws, "clicks", "app", handler) as fleet:
        first = fleet.join()
        for n in range(20):
            aws.kinesis.put("clicks", str(n), "k")
        fleet.wait_handled()
        aws.kinesis.put("clicks", "stuck", "k")
        assert stuck.wait(30)
        fleet.join()  # a client with nothing to read until the first one leaves
        fleet.leave(first)  # its handoff times out; the second client handles the record again
        report = fleet.wait_handled()
    (duplicate,) = report.duplicates
    assert duplicate.clients == ("client-2", "client-1")  # the first one's call returned last
    assert duplicate.reason == "handoff timed out" and report.ok, str(report)


class Broken(BaseException):
    """Not an Exception: no retry or dead letter catches it, so it ends the client's process()."""


def test_wait_handled_raises_the_error_that_ended_a_client_s_process_at_once_instead_of_timing_out() -> None:
    """A client whose process() raised keeps its shards (its heartbeat goes on) and handles nothing more: the
    wait says why at once. Before, it waited its whole timeout and said only how many records were handled,
    which made a diagnostic script's own AttributeError (in a monkeypatched give_back) look like a stall."""
    aws = LocalAWS()
    aws.kinesis.add_stream("clicks", shards=1)

    def handler(record: Record) -> None:
        if record.data == b"5":
            raise Broken("the handler's bug")

    fleet = Fleet(aws, "clicks", "app", handler)
    with fleet:
        fleet.join()
        for n in range(10):
            aws.kinesis.put("clicks", str(n), "k")
        with pytest.raises(Broken):  # the wait itself: not a TimeoutError once its 20 s are over
            fleet.wait_handled(timeout=20)


class Gained(StatReceiver):
    def __init__(self) -> None:
        self.shards: list[str] = []

    def shard_gained(self, shard_id: str) -> None:
        self.shards.append(shard_id)


def test_hooks_come_in_order_through_a_join_a_leave_and_a_split_dead_letters_count_and_your_stats_still_get_calls() -> (
    None
):
    aws = LocalAWS()
    aws.kinesis.add_stream("clicks", shards=2)
    stats = Gained()
    calls: list[tuple[str, str]] = []
    failures: list[Failure] = []

    def handler(record: Record) -> None:
        if record.data == b"bad":
            raise ValueError("bad")

    def hook(name: str) -> Callable[[str], None]:
        return lambda shard_id: calls.append((name, shard_id))

    options = {"on_assigned": hook("assigned"), "on_revoked": hook("revoked"), "dead_letter": failures.append}
    config = attrs.evolve(FAST_CONFIG, stats=stats)
    with Fleet(aws, "clicks", "app", handler, config=config, max_attempts=1, backoff=0.01, **options) as fleet:
        fleet.start(2)
        for n in range(100):
            aws.kinesis.put("clicks", "bad" if n % 25 == 0 else str(n), f"key-{n % 7}")
        fleet.wait_handled()
        fleet.join()
        fleet.leave(fleet.members[0])
        aws.kinesis.split("clicks", aws.kinesis.open_shards("clicks")[0])
        for n in range(100):
            aws.kinesis.put("clicks", str(n), f"key-{n % 7}")
        report = fleet.wait_handled()
    report = fleet.report()
    assert report.put == 200 and len(report.dead_lettered) == len(failures) == 4
    assert report.hook_violations == () and report.ok, str(report)
    assert {name for name, _ in calls} == {"assigned", "revoked"}  # yours are called (on_lost: none given)
    assert len(stats.shards) >= 4  # every client's captures reach your receiver


def test_hooks_come_in_order_with_several_workers_by_key_through_a_join_a_leave_a_crash_and_a_split() -> None:
    """With concurrency > 1 and ordering="key", a capture's records go to several workers at once: on_assigned
    still comes before any of them is handled, and on_revoked (or on_lost) after the last, per capture."""
    aws = LocalAWS()
    aws.kinesis.add_stream("clicks", shards=4)
    numbers = itertools.count()

    def put(count: int) -> None:
        aws.kinesis.put_records(StreamName="clicks", Records=[
            {"Data": str(n).encode(), "PartitionKey": f"key-{n % 17}"} for n in itertools.islice(numbers, count)
        ])  # fmt: skip

    def handler(record: Record) -> None:
        time.sleep(0.001)  # records in flight on several workers when a handoff comes

    def nothing(shard_id: str) -> None:
        pass

    options = {"on_assigned": nothing, "on_revoked": nothing, "on_lost": nothing}
    with Fleet(aws, "clicks", "app", handler, concurrency=4, ordering="key", **options) as fleet:
        fleet.start(2)
        put(400)
        fleet.wait_handled()
        fleet.join()
        put(400)
        # records flowing as it leaves
        fleet.ledger.wait_for(fleet.ledger.distinct + 100, timeout=30, check=fleet.check)
        fleet.leave(fleet.members[0])
        put(400)
        fleet.ledger.wait_for(fleet.ledger.distinct + 100, timeout=30, check=fleet.check)  # and as one crashes
        fleet.crash(fleet.members[0])
        aws.kinesis.split("clicks", aws.kinesis.open_shards("clicks")[0])
        put(400)
        report = fleet.wait_handled()
    assert report.put == 1600 and report.lost == ()
    assert report.hook_violations == () and report.ok, str(report)
    assert set(report.duplicates_by_reason) <= {"crash", "handoff timed out", "taken"}


class Counting:
    def __init__(self, client: str) -> None:
        self.client, self.handled = client, 0

    def handle(self, record: Record) -> None:
        self.handled += 1

    def on_revoked(self, shard_id: str) -> None:
        pass


def test_per_client_makes_a_handler_and_hooks_for_each_client_and_says_what_is_wrong_with_one() -> None:
    aws = LocalAWS()
    aws.kinesis.add_stream("clicks", shards=2)
    made: list[Counting] = []

    def make(client: str) -> Counting:
        made.append(Counting(client))
        return made[-1]

    with Fleet(aws, "clicks", "app", PerClient(make)) as fleet:
        fleet.start(2)
        for n in range(50):
            aws.kinesis.put("clicks", str(n), f"key-{n}")
        report = fleet.wait_handled()
    assert [c.client for c in made] == ["client-1", "client-2"] and sum(c.handled for c in made) == 50
    assert fleet.report().ok and fleet.report().revoked_by_key == report.by_key()  # on_revoked was recorded
    with pytest.raises(TypeError, match=r"PerClient: make\('client-1'\) returned 1, which has no handle"):
        Fleet(aws, "clicks", "app", PerClient(lambda client: 1)).join()
    with pytest.raises(ValueError, match="on_revoked: given as an option and by the PerClient's object too"):
        Fleet(aws, "clicks", "app", PerClient(Counting), on_revoked=print).join()


class SlowCounts:
    """Counts per shard written out in on_revoked (the docs' example), with a handler slower than the handoff's
    time: a handoff with a record in the handler times out."""

    def __init__(self, store: Counter[str], lock: threading.Lock) -> None:
        self.store, self.lock, self.counts = store, lock, dict[str, Counter[str]]()

    def on_assigned(self, shard_id: str) -> None:
        self.counts[shard_id] = Counter()

    def handle(self, record: Record) -> None:
        time.sleep(0.06)
        self.counts.setdefault(record.shard_id, Counter())[record.partition_key] += 1

    def on_revoked(self, shard_id: str) -> None:
        with self.lock:
            self.store.update(self.counts.pop(shard_id, Counter()))

    def on_lost(self, shard_id: str) -> None:
        self.counts.pop(shard_id, None)


def test_handoffs_that_time_out_under_a_slow_handler_explain_every_repeat_and_the_written_counts() -> None:
    aws = LocalAWS()
    stream = aws.stream("clicks", 4)
    store: Counter[str] = Counter()
    lock = threading.Lock()
    config = attrs.evolve(FAST_CONFIG, handoff_timeout=0.02)
    with Fleet(aws, "clicks", "app", PerClient(lambda client: SlowCounts(store, lock)), config=config) as fleet:
        fleet.start(2)
        for n in range(8):
            stream.put_all((f"{n}-{i}", f"key-{i % 11}") for i in range(12))
            # records in handlers when it changes
            fleet.ledger.wait_for(fleet.ledger.distinct + 3, timeout=30, check=fleet.check)
            if n % 2 == 0:
                fleet.join()
            else:
                fleet.leave(fleet.members[0])
        fleet.wait_handled(timeout=60)
    report = fleet.report()
    print(report, report.captures_by_end)
    assert report.put == 96 and report.ok, str(report)
    assert set(report.duplicates_by_reason) <= {"handoff timed out", "taken"}  # no crash here: nothing else
    assert dict(store) == dict(report.revoked_by_key)  # on_lost dropped what a timed-out capture counted
