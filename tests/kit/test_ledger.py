"""The ledger's checks catch what they promise to: a record lost, a duplicate no crash explains, records of a
shard or of a key handled out of order; and they let pass a duplicate after a crash."""

from __future__ import annotations

import datetime as dt

from kinsumer import Record
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
