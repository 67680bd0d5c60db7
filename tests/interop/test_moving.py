"""Moving an application between the Go library and kinsumer, one library after the other: a clean
switch, a switch after the Go client crashed, and back to Go. 2,000 records on 4 shards each; the
first library reads 1,000, the second the rest."""

from __future__ import annotations

import time

from tests.interop.harness import (
    GO_AGE,
    KINSUMER_ROUND,
    READ_DEADLINE,
    Fleet,
    checkpoints,
    kinsumer_config,
    wait_for,
)

TOTAL, FIRST = 2000, 1000


def test_a_clean_switch_from_go_hands_every_record_to_kinsumer_once(fleet: Fleet) -> None:
    fleet.write(0, TOTAL)
    go = fleet.go("go-switching", records=FIRST)  # then a clean Stop(): its shards released, its row deleted
    assert go.wait(READ_DEADLINE) == 0, go.log_tail()
    assert go.delivered() == FIRST

    kin = fleet.kinsumer("kinsumer-next", kinsumer_config())
    took = wait_for(fleet.ledger.has_all, READ_DEADLINE, lambda: f"kinsumer to read the rest ({fleet.observed()})", go)
    kin.stop()
    print(fleet.observed(f"kinsumer read the rest in {took:.1f} s"))
    fleet.check()
    assert kin.delivered() == TOTAL - FIRST


def test_a_crash_of_go_leaves_every_shard_to_kinsumer_within_the_go_clients_age(fleet: Fleet) -> None:
    """The Go client reads 800 records and commits them, then 200 of the next (it holds after them) and is
    killed: some of those 200 are not committed yet. kinsumer, started at once, takes every shard once the
    Go client's row is older than its age (a round later at most), and goes on from the Go client's last
    commits: what it delivers twice is exactly what the Go client delivered after them."""
    ledger = fleet.ledger
    fleet.write(0, 800)
    go = fleet.go("go-crashing", records=FIRST, after="hold")
    wait_for(lambda: go.delivered() >= 800, READ_DEADLINE, "the Go client to read 800", go)

    def committed_all() -> bool:
        committed = checkpoints(fleet.dynamodb_client, fleet.app)
        last: dict[str, int] = {}
        for rid in ledger.of(go.name):
            where = ledger.placed[rid]
            last[where.shard_id] = max(last.get(where.shard_id, 0), where.sequence_number)
        return all(committed.get(shard) == seq for shard, seq in last.items())

    wait_for(committed_all, 30, lambda: f"the Go client to commit what it read ({fleet.owners()})", go)
    fleet.write(800, TOTAL - 800)
    wait_for(lambda: go.delivered() >= FIRST, READ_DEADLINE, f"the Go client to read {FIRST}", go)
    killed = go.kill()
    assert go.delivered() == FIRST
    committed = checkpoints(fleet.dynamodb_client, fleet.app)  # the Go client's last commits, final now

    def after_commit(rid: int) -> bool:
        where = ledger.placed[rid]
        last = committed.get(where.shard_id)
        return last is None or where.sequence_number > last

    uncommitted = {rid for rid in ledger.of(go.name) if after_commit(rid)}

    # beside_go="wait": the killed client's row is still live for up to its age, and "refuse" would refuse
    kin = fleet.kinsumer("kinsumer-next", kinsumer_config(beside_go="wait"))
    shards = fleet.shards
    wait_for(
        lambda: kin.captured() == shards, GO_AGE + READ_DEADLINE,
        lambda: f"kinsumer to take every shard ({fleet.observed()}; owners {fleet.owners()})", go,
    )  # fmt: skip
    took = time.monotonic() - killed
    wait_for(ledger.has_all, READ_DEADLINE, lambda: f"kinsumer to read the rest ({fleet.observed()})", go)
    kin.stop()
    print(
        fleet.observed(
            f"every shard taken {took:.1f} s after the kill; {len(uncommitted)} delivered by the Go client "
            "after its last commits"
        )
    )
    fleet.check(duplicates=uncommitted)
    assert took <= GO_AGE + KINSUMER_ROUND, (
        f"kinsumer took every shard {took:.1f} s after the kill: more than the Go client's age ({GO_AGE:g} s) "
        f"plus a round ({KINSUMER_ROUND:g} s)"
    )


def test_back_to_go_after_a_clean_stop_of_kinsumer(fleet: Fleet) -> None:
    fleet.write(0, TOTAL)
    kin = fleet.kinsumer("kinsumer-leaving", kinsumer_config(), limit=FIRST)
    wait_for(lambda: kin.delivered() >= FIRST, READ_DEADLINE, f"kinsumer to read {FIRST}")
    kin.stop()  # the last record in hand counts as processed: a clean leave
    assert kin.delivered() == FIRST

    go = fleet.go("go-next")
    took = wait_for(
        fleet.ledger.has_all, READ_DEADLINE, lambda: f"the Go client to read the rest ({fleet.observed()})", go
    )
    assert go.terminate() == 0, go.log_tail()
    print(fleet.observed(f"the Go client read the rest in {took:.1f} s"))
    fleet.check()
    assert go.delivered() == TOTAL - FIRST
