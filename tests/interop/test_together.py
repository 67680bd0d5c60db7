"""The Go library and kinsumer on one application at once: a rolling deploy (kinsumer started while a
Go client runs) and a rollback (a Go client started while kinsumer runs). kinsumer never reads beside
a live Go client: nothing is delivered by both, nothing is lost, and it never idles without saying why."""

from __future__ import annotations

import logging
import time

import pytest

from kinsumer import ConfigError
from tests.interop.harness import GO_AGE, READ_DEADLINE, Fleet, kinsumer_config, names, says_go, wait_for


def test_a_rolling_deploy_refuses_or_waits_beside_a_live_go_client_and_takes_over_once_it_stops(
    fleet: Fleet,
) -> None:
    ledger = fleet.ledger
    fleet.write(0, 500)
    go = fleet.go("go-deployed")
    wait_for(lambda: go.delivered() >= 500 and bool(fleet.go_ids(go)), READ_DEADLINE, "the Go client to read 500", go)
    go_ids = fleet.go_ids(go)

    # the default, beside_go="refuse": run() raises, naming the live Go client
    refused = fleet.kinsumer("kinsumer-refused", kinsumer_config(), start=False)
    with pytest.raises(ConfigError) as raised:
        refused.start()
    assert names(str(raised.value), go, go_ids), f"the error does not name {go.name} ({go_ids}): {raised.value}"

    # beside_go="wait": it starts, reads nothing while the Go client is live, and says why
    kin = fleet.kinsumer("kinsumer-waiting", kinsumer_config(beside_go="wait"))

    def says_why() -> bool:
        health = kin.kinsumer.health()
        return not health.ready and any(says_go(r.message, go, go_ids) for r in health.reasons)

    wait_for(says_why, 30, lambda: f"health() to say a Go client is live (it says {kin.kinsumer.health()})", go)
    fleet.write(500, 500)
    wait_for(
        lambda: go.delivered() >= 1000, READ_DEADLINE, lambda: f"the Go client to read 1,000 ({fleet.observed()})", go
    )
    assert kin.delivered() == 0, fleet.observed("kinsumer read beside a live Go client")
    assert not kin.captured(), f"kinsumer holds {kin.captured()} beside a live Go client"
    assert says_why(), kin.kinsumer.health()

    # the Go client stops cleanly (its shards released, its row deleted): kinsumer takes over
    assert go.terminate() == 0, go.log_tail()
    stopped = time.monotonic()
    fleet.write(1000, 1000)
    shards = fleet.shards
    wait_for(
        lambda: kin.captured() == shards, GO_AGE + READ_DEADLINE,
        lambda: f"kinsumer to take every shard ({fleet.observed()}; owners {fleet.owners()})",
    )  # fmt: skip
    took = time.monotonic() - stopped
    wait_for(ledger.has_all, READ_DEADLINE, lambda: f"kinsumer to read the rest ({fleet.observed()})")
    kin.stop()
    print(fleet.observed(f"every shard taken {took:.1f} s after the Go client's Stop()"))
    fleet.check()
    assert ledger.by_both(go.name, kin.name) == set()
    assert set(ledger.of(kin.name)) == set(range(1000, 2000))
    assert took < GO_AGE, f"kinsumer took the shards {took:.1f} s after a clean Stop(), as late as after a crash"


def test_a_go_client_joining_a_running_kinsumer_gets_every_shard_and_the_rest(
    fleet: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    """A rollback: kinsumer reads, then a Go client starts while records are being written. kinsumer
    warns, naming the Go client, hands its shards over and takes none back while it is live; the Go
    client reads the rest. A clean handoff in auto-checkpoint mode delivers nothing twice."""
    ledger = fleet.ledger
    fleet.write(0, 1000)
    kin = fleet.kinsumer("kinsumer-running", kinsumer_config())
    shards = fleet.shards
    wait_for(
        lambda: kin.delivered() >= 1000 and kin.captured() == shards, READ_DEADLINE,
        lambda: f"kinsumer to read 1,000 ({fleet.observed()})",
    )  # fmt: skip

    writer = fleet.write_in_background(1000, 1000, batch=40, pause=0.1)  # about 2.5 s of writes
    go = fleet.go("go-joining")
    joined = time.monotonic()
    wait_for(lambda: bool(fleet.go_ids(go)), 30, "the Go client's row", go)
    go_ids = fleet.go_ids(go)

    def warned() -> bool:
        return any(
            r.levelno >= logging.WARNING and r.name.startswith("kinsumer") and names(r.getMessage(), go, go_ids)
            for r in list(caplog.records)
        )

    wait_for(warned, 30, lambda: f"kinsumer to warn naming {go.name} ({go_ids})", go)
    wait_for(
        lambda: all(fleet.owners().get(s) in go_ids for s in shards), GO_AGE + 30,
        lambda: f"the Go client to own every shard (owners {fleet.owners()}, {fleet.observed()})", go,
    )  # fmt: skip
    took = time.monotonic() - joined
    writer.finish()
    wait_for(ledger.has_all, READ_DEADLINE, lambda: f"the Go client to read the rest ({fleet.observed()})", go)
    assert not kin.captured(), f"kinsumer took {kin.captured()} back beside a live Go client"
    assert go.terminate() == 0, go.log_tail()
    kin.stop()
    print(fleet.observed(f"the Go client owned every shard {took:.1f} s after it started"))
    fleet.check()
    assert ledger.by_both(go.name, kin.name) == set()
    assert go.delivered() > 0
