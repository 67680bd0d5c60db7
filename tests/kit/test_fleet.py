"""A fleet of clients running a handler with process() on the kit, through the events that break handlers."""

from __future__ import annotations

import itertools
import time

from kinsumer import Record
from kinsumer.testing import Fleet, LocalAWS


def test_a_fleet_of_3_through_a_join_a_leave_a_crash_and_a_split_loses_nothing_repeats_only_after_the_crash() -> None:
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
        fleet.ledger.wait_for(fleet.ledger.distinct + 100, timeout=30)  # records flowing when the crash comes
        crashed = fleet.members[0]
        fleet.crash(crashed)
        aws.kinesis.split("clicks", aws.kinesis.open_shards("clicks")[0])
        put(300)
        report = fleet.wait_handled()
        assert len(fleet.members) == 2
    assert report.put == 1500 and report.lost == ()
    assert report.unexplained_duplicates == ()
    assert all(d.clients[0] == crashed for d in report.duplicates)  # only what the crashed client handled
    assert report.shards_out_of_order == () and report.keys_out_of_order == ()
    assert report.ok, str(report)
