"""KCL's lease items, read (:mod:`kinsumer.coordination.kcl_leases`), and the import's plan (:mod:`~.kcl_plan`).

The items are built as KCL's serializers write them: 1.x ``KinesisClientLeaseSerializer``, 2.x/3.x
``DynamoDBLeaseSerializer``, multi-stream ``DynamoDBMultiStreamLeaseSerializer`` (see the module's docstring).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinsumer.coordination.checkpoints_table import CheckpointRow
from kinsumer.coordination.clients_table import ClientRow
from kinsumer.coordination.kcl_leases import (
    ImportedPosition,
    KclCheckpoint,
    KclLease,
    KclStreamIdentifier,
    LeaseSelection,
    MalformedLease,
    checkpoint_item,
    imported_position,
    is_lease_item,
    positions_without_lease,
    renewed_leases,
    select_leases,
)
from kinsumer.coordination.kcl_plan import (
    ImportPlan,
    LeaseScan,
    check_shards,
    live_problem,
    plan_notes,
    plan_problems,
    plan_shards,
    renewed_problem,
)
from kinsumer.coordination.streams import StreamScope
from kinsumer.reading.position import StartPosition

SEQ = "49590338271490256608559692538361571095921575989136588898"
IMPORTED_AT = 1_764_064_800_000  # 2025-11-25T10:00:00Z
IDENTITY = "arn:aws:kinesis:us-east-1:123456789012:stream/clicks@1700000000123"


def kcl_lease_item(
    shard_id: str,
    checkpoint: str,
    sub: int | None = 0,
    *,
    version: int = 2,
    owner: str | None = None,
    counter: int = 1,
    parents: tuple[str, ...] = (),
    children: tuple[str, ...] = (),
    pending: tuple[str, int] | None = None,
    hash_range: tuple[int, int] | None = None,
    stream: str | None = None,
    checkpoint_owner: str | None = None,
    throughput: float | None = None,
) -> dict[str, Any]:
    """A lease item as KCL ``version`` writes it (``toDynamoRecord``): ``stream``, a serialized StreamIdentifier,
    makes it multi-stream (2.3+); ``sub`` None: a 1.x before KPL support, which wrote no sub-sequence."""
    item: dict[str, Any] = {"leaseKey": {"S": f"{stream}:{shard_id}" if stream else shard_id},
                            "leaseCounter": {"N": str(counter)}}  # fmt: skip
    if owner is not None:
        item["leaseOwner"] = {"S": owner}
    item["ownerSwitchesSinceCheckpoint"] = {"N": "0"}
    item["checkpoint"] = {"S": checkpoint}
    if sub is not None:
        item["checkpointSubSequenceNumber"] = {"N": str(sub)}
    if parents:
        item["parentShardId"] = {"SS": list(parents)}
    if children:
        item["childShardIds"] = {"SS": list(children)}
    if pending is not None:
        item["pendingCheckpoint"] = {"S": pending[0]}
        item["pendingCheckpointSubSequenceNumber"] = {"N": str(pending[1])}
        if version >= 2:
            item["pendingCheckpointState"] = {"B": b"application state"}
    if hash_range is not None:
        item["startingHashKey"], item["endingHashKey"] = {"S": str(hash_range[0])}, {"S": str(hash_range[1])}
    if version >= 3:
        if throughput is not None:
            item["throughputKBps"] = {"N": str(throughput)}
        if checkpoint_owner is not None:
            item["checkpointOwner"] = {"S": checkpoint_owner}
        item["entityType"] = {"S": "LEASE"}  # 3.5+
    if stream is not None:
        item["streamName"], item["shardId"] = {"S": stream}, {"S": shard_id}
    return item


def shard(n: int) -> str:
    return f"shardId-{n:012d}"


# ------------------------------------------------------------------ reading lease items


@pytest.mark.parametrize("version", [1, 2, 3])
def test_a_single_stream_lease_reads_as_kcl_wrote_it(version: int) -> None:
    item = kcl_lease_item(
        shard(4), SEQ, 7, version=version, owner="worker-1", counter=42, parents=(shard(1), shard(0)),
        children=(shard(9),), pending=("49590338271490256608559692538361571095921575989136588999", 2),
        hash_range=(0, 2**127), checkpoint_owner="worker-0", throughput=12.5,
    )  # fmt: skip
    assert is_lease_item(item)
    lease = KclLease.from_item(item)
    assert lease.lease_key == lease.shard_id == shard(4) and lease.stream is None
    assert lease.checkpoint == KclCheckpoint(SEQ, 7) and str(lease.checkpoint) == f"{SEQ}:7"
    assert (lease.lease_counter, lease.owner) == (42, "worker-1")
    assert lease.parent_shard_ids == (shard(0), shard(1)) and lease.child_shard_ids == (shard(9),)
    assert lease.pending_checkpoint == KclCheckpoint("49590338271490256608559692538361571095921575989136588999", 2)
    assert lease.hash_key_range == (0, 2**127)
    assert lease.checkpoint_owner == ("worker-0" if version == 3 else None)


def test_a_lease_of_kcl_1x_before_kpl_support_has_sub_sequence_0_and_an_unowned_lease_no_owner() -> None:
    lease = KclLease.from_item(kcl_lease_item(shard(0), SEQ, None, version=1))
    assert lease.checkpoint == KclCheckpoint(SEQ, 0) and lease.owner is None and lease.parent_shard_ids == ()
    assert lease.pending_checkpoint is None and lease.hash_key_range is None


@pytest.mark.parametrize("version", [2, 3])
def test_a_multi_stream_lease_names_its_stream_by_attributes_and_by_key(version: int) -> None:
    identifier = "123456789012:clicks:1700000000"
    item = kcl_lease_item(shard(3), "TRIM_HORIZON", version=version, stream=identifier)
    assert item["leaseKey"]["S"] == f"{identifier}:{shard(3)}"  # MultiStreamLease.getLeaseKey
    lease = KclLease.from_item(item)
    assert lease.shard_id == shard(3) and lease.stream == KclStreamIdentifier("123456789012", "clicks", 1700000000)
    assert str(lease.stream) == identifier
    bare = {k: v for k, v in item.items() if k not in ("streamName", "shardId")}  # the key alone says it too
    assert KclLease.from_item(bare) == lease


def test_items_of_kcl_3x_other_entities_are_not_leases() -> None:
    for entity in ("WORKER_METRIC_STATS", "LEADER", "STREAM", "CLIENT_VERSION_MIGRATION", "TABLE_MIGRATION"):
        assert not is_lease_item({"leaseKey": {"S": "worker-1"}, "entityType": {"S": entity}})
    assert is_lease_item(kcl_lease_item(shard(0), SEQ, version=2))  # no entityType: a lease


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"checkpoint": None}, "has no checkpoint"),
        ({"checkpoint": {"S": "EARLIEST"}}, "a value KCL never writes"),
        ({"checkpointSubSequenceNumber": {"N": "-1"}}, "a value KCL never writes"),
        ({"leaseCounter": {"S": "7"}}, "leaseCounter"),
        ({"parentShardId": {"S": "shardId-000000000000"}}, "parentShardId of type S, not SS"),
        ({"leaseOwner": {"N": "3"}}, "leaseOwner of type N, not S"),
        ({"leaseKey": {"S": "123:clicks:1700000000:" + shard(1)}, "streamName": {"S": "123:clicks:0"}}, "stream"),
    ],
)
def test_an_item_kcl_never_writes_is_refused_naming_the_lease(change: dict[str, Any], problem: str) -> None:
    item = {**kcl_lease_item(shard(1), SEQ, 0), **change}
    item = {k: v for k, v in item.items() if v is not None}
    with pytest.raises(MalformedLease, match=problem) as caught:
        KclLease.from_item(item)
    assert "is this a KCL lease table" in str(caught.value)


# ------------------------------------------------------------------ what each checkpoint maps to


def row_of(position: ImportedPosition, key: str = shard(0)) -> CheckpointRow:
    """The row :func:`checkpoint_item` writes, as kinsumer reads it."""
    item = checkpoint_item(key, position, stream=IDENTITY, parents=(), last_update_ns=10**18, finished_at=IMPORTED_AT)
    return CheckpointRow.from_item(item)


def test_each_sentinel_maps_to_where_kcl_would_start() -> None:
    def mapped(sequence: str, at: int | None = None) -> ImportedPosition | None:
        return imported_position(KclCheckpoint(sequence), imported_at=IMPORTED_AT, at_timestamp=at)

    assert mapped("TRIM_HORIZON") == ImportedPosition(start_at=0)
    assert row_of(ImportedPosition(start_at=0)).resume_at == StartPosition.at_timestamp(
        dt.datetime.fromtimestamp(0, dt.UTC)
    )  # every record: the trim horizon
    assert mapped("LATEST") == ImportedPosition(start_at=IMPORTED_AT)  # the import's time
    assert mapped("AT_TIMESTAMP") is None  # KCL's timestamp is in its configuration: the caller refuses
    assert mapped("AT_TIMESTAMP", at=1_700_000_000_000) == ImportedPosition(start_at=1_700_000_000_000)
    finished = mapped("SHARD_END")
    assert finished == ImportedPosition(finished=True) and row_of(finished).finished
    assert str(finished) == "finished" and str(mapped("TRIM_HORIZON")) == "start at TRIM_HORIZON"
    assert str(mapped("LATEST")) == "start at 2025-11-25T10:00:00.000+00:00"


def test_a_checkpoint_maps_to_itself_with_its_sub_sequence_and_the_row_holds_exactly_that() -> None:
    position = imported_position(KclCheckpoint(SEQ, 3), imported_at=IMPORTED_AT, at_timestamp=None)
    assert position == ImportedPosition(checkpoint=(SEQ, 3)) and str(position) == f"after {SEQ}:3"
    item = checkpoint_item(
        "clicks/" + shard(2), position, stream=IDENTITY, parents=(shard(0),), last_update_ns=1_764_064_800_123_456_789,
        finished_at=IMPORTED_AT,
    )  # fmt: skip
    assert item == {
        "Shard": {"S": "clicks/" + shard(2)}, "Stream": {"S": IDENTITY}, "LastUpdate": {"N": "1764064800123456789"},
        "ParentShardIds": {"L": [{"S": shard(0)}]}, "SequenceNumber": {"S": SEQ}, "SubSequenceNumber": {"N": "3"},
    }  # no OwnerID: the row is free  # fmt: skip
    row = CheckpointRow.from_item(item)
    assert row.resume_at == StartPosition.after(SEQ, 3) and row.owner_id is None and not row.foreign(IDENTITY)
    assert position.agrees_with(row)


def test_a_position_is_exactly_one_thing() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        ImportedPosition()
    with pytest.raises(ValueError, match="exactly one"):
        ImportedPosition(checkpoint=(SEQ, None), finished=True)


#: A shard's Kinesis records in order: (sequence number, None for a plain record or the user records of an aggregate).
shards_records = st.lists(
    st.tuples(st.integers(1, 10**40), st.one_of(st.none(), st.integers(1, 6))), min_size=1, max_size=8,
    unique_by=lambda r: r[0],
).map(sorted)  # fmt: skip


def user_records(records: list[tuple[int, int | None]]) -> list[tuple[int, int | None]]:
    """(sequence number, sub-sequence: None for a plain record) of each user record, in order."""
    return [(seq, sub) for seq, users in records for sub in ([None] if users is None else range(users))]


def kcl_reads(records: list[tuple[int, int | None]], checkpoint: KclCheckpoint) -> list[tuple[int, int | None]]:
    """What KCL delivers after ``checkpoint``: an AT_SEQUENCE_NUMBER iterator at its sequence number
    (KinesisDataFetcher), deaggregated (a plain record is user record 0), every record at or before the
    checkpoint dropped (ProcessTask.filterAndGetMaxExtendedSequenceNumber)."""
    at = (int(checkpoint.sequence_number), checkpoint.sub_sequence_number)
    return [(seq, sub) for seq, sub in user_records(records) if seq >= at[0] and (seq, sub or 0) > at]


def kinsumer_reads(records: list[tuple[int, int | None]], start: StartPosition) -> list[tuple[int, int | None]]:
    """What kinsumer delivers from ``start``: its iterator, then the user records ``start`` already covers dropped."""
    assert start.sequence_number is not None
    first = int(start.sequence_number) + (1 if start.kind == "AFTER_SEQUENCE_NUMBER" else 0)
    return [(s, sub) for s, sub in user_records(records) if s >= first and not start.is_done(str(s), sub)]


@given(shards_records, st.data())
def test_any_checkpoint_kcl_can_write_makes_kinsumer_deliver_exactly_what_kcl_would(
    records: list[tuple[int, int | None]], data: st.DataObject
) -> None:
    seq, sub = data.draw(st.sampled_from(user_records(records)))  # a user record the application checkpointed
    checkpoint = KclCheckpoint(str(seq), sub or 0)
    lease = KclLease.from_item(kcl_lease_item(shard(0), checkpoint.sequence_number, checkpoint.sub_sequence_number))
    position = imported_position(lease.checkpoint, imported_at=IMPORTED_AT, at_timestamp=None)
    assert position is not None
    start = row_of(position).resume_at
    assert start is not None
    assert kinsumer_reads(records, start) == kcl_reads(records, checkpoint)


# ------------------------------------------------------------------ shards without a lease, live leases


def test_a_shard_without_a_lease_is_done_above_a_leased_one_and_starts_at_the_trim_horizon_below() -> None:
    # 0 split into 2 and 3; 3 and 1 merged into 4; 5 is unrelated; 6 is 2's child
    parents = {shard(0): (), shard(1): (), shard(2): (shard(0),), shard(3): (shard(0),), shard(4): (shard(3), shard(1)),
               shard(5): (), shard(6): (shard(2),)}  # fmt: skip
    found = positions_without_lease(parents, {shard(4), shard(2)})
    assert {s: p for s, (p, _) in found.items()} == {
        shard(0): ImportedPosition(finished=True),  # its children have leases: KCL deleted its lease after its end
        shard(1): ImportedPosition(finished=True),
        shard(3): ImportedPosition(finished=True),
        shard(6): ImportedPosition(start_at=0),  # KCL makes a child's lease at TRIM_HORIZON
    }  # shard 5 is left to kinsumer's initial_position
    assert "done" in found[shard(0)][1] and "descends" in found[shard(6)][1]


def test_a_lease_counts_as_renewed_when_its_owner_moved_its_counter_or_it_appeared_owned() -> None:
    def lease(n: int, counter: int, owner: str | None = "w") -> KclLease:
        return KclLease.from_item(kcl_lease_item(shard(n), SEQ, owner=owner, counter=counter))

    before = {shard(n): lease(n, 5) for n in range(3)} | {shard(3): lease(3, 5, owner=None)}
    after = {shard(0): lease(0, 5), shard(1): lease(1, 6), shard(2): lease(2, 5), shard(3): lease(3, 9, owner=None),
             shard(4): lease(4, 1)}  # fmt: skip
    assert [x.shard_id for x in renewed_leases(before, after)] == [shard(1), shard(4)]
    message = renewed_problem(renewed_leases(before, after), 10)
    assert f"{shard(1)} (owner w)" in message and "within 10 s" in message and "stop every worker" in message


# ------------------------------------------------------------------ which leases are the stream's


def multi(n: int, identifier: str) -> KclLease:
    return KclLease.from_item(kcl_lease_item(shard(n), SEQ, stream=identifier))


def test_a_single_stream_tables_leases_are_the_streams_and_a_multi_stream_tables_are_picked_by_identifier() -> None:
    single = [KclLease.from_item(kcl_lease_item(shard(n), SEQ)) for n in range(2)]
    assert select_leases(single, stream_name="clicks", account_id="1", created_ms=5) == LeaseSelection(tuple(single))
    created_ms = 1_700_000_000_123
    mine, old, other = "123456789012:clicks:1700000000", "123456789012:clicks:1600000000", "123456789012:views:1"
    leases = [multi(0, mine), multi(1, mine), multi(0, old), multi(0, other), multi(0, "999:clicks:1700000000")]
    picked = select_leases(leases, stream_name="clicks", account_id="123456789012", created_ms=created_ms)
    assert picked.problem is None and str(picked.identifier) == mine and len(picked.leases) == 2
    assert set(picked.others) == {old, other, "999:clicks:1700000000"}
    in_ms = [multi(0, "123456789012:clicks:1700000000123"), multi(0, old)]  # an epoch in ms picks it as well
    assert str(select_leases(in_ms, stream_name="clicks", account_id=None, created_ms=created_ms).identifier) == (
        "123456789012:clicks:1700000000123"
    )
    ambiguous = select_leases([multi(0, old), multi(0, "123456789012:clicks:1")], stream_name="clicks",
                              account_id=None, created_ms=created_ms)  # fmt: skip
    assert ambiguous.leases == () and "several incarnations" in (ambiguous.problem or "")
    assert "--kcl-stream-identifier" in (ambiguous.problem or "")
    chosen = select_leases(leases, stream_name="clicks", account_id=None, created_ms=created_ms, chosen=old)
    assert str(chosen.identifier) == old and chosen.problem is None
    wrong = select_leases(leases, stream_name="clicks", account_id=None, created_ms=created_ms, chosen=other)
    assert wrong.problem is not None and "no lease of KCL stream" in wrong.problem
    none = select_leases(leases, stream_name="orders", account_id=None, created_ms=created_ms)
    assert none.problem is not None and "no lease of stream orders" in none.problem and mine in none.problem
    mixed = select_leases([*single, multi(0, mine)], stream_name="clicks", account_id=None, created_ms=created_ms)
    assert "single-stream leases" in (mixed.problem or "")


# ------------------------------------------------------------------ the plan


def stored(row: CheckpointRow) -> tuple[CheckpointRow, int]:
    return row, 1_764_064_700_000_000_000


def test_the_plan_says_what_becomes_of_each_shard_and_what_refuses_it() -> None:
    listing = {shard(n): () for n in range(8)} | {shard(8): (shard(0),)}
    leases = [
        KclLease.from_item(kcl_lease_item(shard(0), "SHARD_END", version=1)),
        KclLease.from_item(kcl_lease_item(shard(1), SEQ, 2, pending=("4959", 0))),
        KclLease.from_item(kcl_lease_item(shard(2), "LATEST")),
        KclLease.from_item(kcl_lease_item(shard(3), "AT_TIMESTAMP")),
        KclLease.from_item(kcl_lease_item(shard(4), SEQ, 0, version=3, checkpoint_owner="w0")),
        KclLease.from_item(kcl_lease_item(shard(5), SEQ, 0)),
        KclLease.from_item(kcl_lease_item(shard(6), "TRIM_HORIZON")),
        KclLease.from_item(kcl_lease_item(shard(9), SEQ, 1)),  # of a shard past retention
    ]
    rows = {
        shard(4): stored(CheckpointRow(shard(4), SEQ, 0, stream=IDENTITY)),  # as the import writes it
        shard(5): stored(CheckpointRow(shard(5), "1", None, stream=IDENTITY)),  # kinsumer's own progress
        shard(6): stored(CheckpointRow(shard(6), owner_id="c1", owner_name="worker-a")),
        shard(2): stored(CheckpointRow(shard(2), start_at=IMPORTED_AT - 5000, stream=IDENTITY)),  # an earlier import
    }
    scope = StreamScope("clicks", IDENTITY)
    shards = plan_shards(LeaseSelection(tuple(leases)), listing, rows, scope, imported_at=IMPORTED_AT,
                         at_timestamp=None, overwrite=False)  # fmt: skip
    changes = {s.shard_id: (s.change, s.position) for s in shards}
    assert changes == {
        shard(0): ("new", ImportedPosition(finished=True)),
        shard(1): ("new", ImportedPosition(checkpoint=(SEQ, 2))),
        shard(2): ("unchanged", ImportedPosition(start_at=IMPORTED_AT - 5000)),  # an earlier import's time kept
        shard(3): ("none", None),  # AT_TIMESTAMP without --at-timestamp
        shard(4): ("unchanged", ImportedPosition(checkpoint=(SEQ, 0))),
        shard(5): ("conflict", ImportedPosition(checkpoint=(SEQ, 0))),
        shard(6): ("held", ImportedPosition(start_at=0)),
        shard(7): ("none", None),  # no lease: kinsumer's initial_position
        shard(8): ("new", ImportedPosition(start_at=0)),  # a child of a leased shard, without a lease yet
    }
    selection = LeaseSelection(tuple(leases))
    notes = plan_notes(selection, shards, listing, LeaseScan({}, other_entities=2), IMPORTED_AT)
    text = "\n".join(notes)
    assert "LATEST (shardId-000000000002)" in text and "pending checkpoint 4959:0" in text
    assert "graceful handoff from w0" in text and f"no lease ({shard(7)})" in text
    assert f"no longer lists (past its retention) are left out: {shard(9)}" in text and "2 items" in text
    problems = plan_problems("billing", "clicks", "billing-kcl", selection, shards, listing)
    assert len(problems) == 3
    assert f"the leases of {shard(3)} say AT_TIMESTAMP" in problems[0] and "--at-timestamp" in problems[0]
    assert f"(worker-a) hold the rows of {shard(6)}" in problems[1] and "kinsumer reset --app billing" in problems[1]
    assert f"the rows of {shard(5)} hold kinsumer's own progress" in problems[2] and "--overwrite" in problems[2]
    again = plan_shards(selection, listing, rows, scope, imported_at=IMPORTED_AT, at_timestamp=1, overwrite=True)
    assert {s.shard_id: s.change for s in again}[shard(5)] == "replace"
    assert {s.shard_id: s.position for s in again}[shard(3)] == ImportedPosition(start_at=1)
    plan = ImportPlan("billing-kcl", "billing", "clicks", IDENTITY, True, None, IMPORTED_AT, tuple(shards),
                      tuple(notes), tuple(problems))  # fmt: skip
    lines = plan.describe().splitlines()
    assert lines[1].split() == ["SHARD", "KCL", "LEASE", "KINSUMER", "NOW", "KINSUMER", "AFTER", "CHANGE"]
    assert lines[2].split() == [shard(0), "SHARD_END", "no", "row", "finished", "new"]
    assert lines[3].split() == [shard(1), f"{SEQ}:2", "no", "row", "after", f"{SEQ}:2", "new"]
    assert [s.shard_id for s in plan.writes] == [shard(0), shard(1), shard(8)]
    assert sum(line.startswith("refused: ") for line in lines) == 3


def test_a_table_of_another_stream_and_live_clients_are_refused() -> None:
    leases = (KclLease.from_item(kcl_lease_item(shard(7), SEQ)),)
    problems = plan_problems("billing", "clicks", "other-kcl", LeaseSelection(leases), [], {shard(0): ()})
    assert problems == [
        f"none of the 1 leases of other-kcl is of a shard of clicks ({shard(7)}...): is it the lease table of "
        "clicks's KCL application?"
    ]
    empty = plan_notes(LeaseSelection(), [], {shard(0): ()}, LeaseScan({}), IMPORTED_AT)
    assert empty == ["the lease table holds no lease of the stream: there is nothing to import"]
    live = live_problem("billing", [ClientRow("c1", "worker-a", 0, host="h1")])
    assert live.startswith("clients of billing are running: worker-a (c1, on h1)")


def test_the_check_compares_each_row_with_the_lease_read_again() -> None:
    leases = [KclLease.from_item(kcl_lease_item(shard(n), SEQ, n)) for n in range(2)]
    listing = {shard(0): (), shard(1): ()}
    scope = StreamScope("clicks", IDENTITY)
    shards = plan_shards(LeaseSelection(tuple(leases)), listing, {}, scope, imported_at=IMPORTED_AT,
                         at_timestamp=None, overwrite=False)  # fmt: skip
    plan = ImportPlan("t", "billing", "clicks", IDENTITY, True, None, IMPORTED_AT, tuple(shards))
    written = {s.key: stored(row_of(s.position, s.key)) for s in shards if s.position is not None}
    moved = {lease.lease_key: lease for lease in leases} | {
        shard(1): KclLease.from_item(kcl_lease_item(shard(1), SEQ, 5))  # a KCL worker checkpointed meanwhile
    }
    check = check_shards(plan, moved, written)
    assert [(s.shard_id, s.agrees) for s in check.shards] == [(shard(0), True), (shard(1), False)]
    assert check.differing == (shard(1),)
    lines = check.describe().splitlines()
    assert lines[1].split() == [shard(0), f"{SEQ}:0", "after", f"{SEQ}:0", "ok"]
    assert lines[2].split() == [shard(1), f"{SEQ}:5", "after", f"{SEQ}:1", "DIFFERS"]
    assert lines[-1] == f"1 shards differ: {shard(1)}"
    assert check_shards(plan, {lease.lease_key: lease for lease in leases}, written).differing == ()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["a/b"], "LEASE_TABLE must be a DynamoDB table name"),
        (["kcl", "--at-timestamp", "yesterday"], "--at-timestamp must be ISO 8601"),
        (["kcl", "--failover-time", "0"], "--failover-time must be >= 0.001"),
    ],
)
def test_the_command_refuses_bad_options_before_any_call(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from kinsumer.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["import-kcl", *argv, "--app", "billing", "--stream", "clicks", "--endpoint-url", "http://127.0.0.1:9"])
    assert exited.value.code == 2 and message in capsys.readouterr().err
