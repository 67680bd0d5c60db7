"""One process per fixed client_id: a second live process is refused; a restart after a crash is not."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from demo import servers
from tests.helpers import produce_per_shard, wait_until
from tests.procs.harness import FAST, ClientProcess, Deployment, ProcessAudit

pytestmark = pytest.mark.server


def client_row(deployment: Deployment, client_id: str) -> dict[str, str]:
    """The heartbeat row of ``client_id`` (attribute -> value), empty if there is none."""
    db = servers.client(deployment.dynamodb, "dynamodb")
    item = db.get_item(TableName=f"{deployment.app}_clients", Key={"ID": {"S": client_id}}, ConsistentRead=True)
    return {name: next(iter(value.values())) for name, value in item.get("Item", {}).items()}


def test_a_second_live_process_with_the_same_client_id_is_refused(
    deploy: Callable[..., Deployment], processes: list[ClientProcess]
) -> None:
    deployment = deploy(2)
    first = ClientProcess(deployment, "first", config={**FAST, "client_id": "shared-id"})
    processes.append(first.start())
    wait_until(lambda: bool(first.events("running")), 60, "the first process running")
    row = client_row(deployment, "shared-id")
    pid = row["Pid"]
    assert pid == str(first.process.pid if first.process else None)

    twin = ClientProcess(deployment, "twin", config={**FAST, "client_id": "shared-id"})
    processes.append(twin.start())
    assert twin.process is not None
    code = twin.process.wait(60)
    assert code != 0
    message = twin.stderr()
    assert "ClientIdInUse" in message and "'shared-id' is in use by another live process" in message
    assert f"host {row['Host']!r}, pid {pid}" in message and "leave client_id unset" in message
    assert not twin.events("running")
    assert client_row(deployment, "shared-id")["Pid"] == pid  # the refused process left the row alone

    kinesis = servers.client(deployment.kinesis, "kinesis")
    produced = produce_per_shard(kinesis, deployment.stream, 50)
    wait_until(lambda: len(first.deliveries()) >= len(produced), 60, "every record delivered by the first")
    first.stop()
    audit = ProcessAudit([first, twin])
    assert not audit.lost(produced) and not audit.duplicates()


def test_a_restart_after_a_crash_takes_its_client_id_back_at_once(
    deploy: Callable[..., Deployment], processes: list[ClientProcess]
) -> None:
    """Same host, the old pid no longer runs: its fresh heartbeat does not stand in the way."""
    deployment = deploy(2)
    crashed = ClientProcess(deployment, "crashed", config={**FAST, "client_id": "worker"})
    processes.append(crashed.start())
    wait_until(lambda: bool(crashed.events("running")), 60, "the first run")
    crashed.kill()
    old_pid = client_row(deployment, "worker")["Pid"]
    assert old_pid != str(os.getpid())

    restarted = ClientProcess(deployment, "restarted", config={**FAST, "client_id": "worker"})
    processes.append(restarted.start())
    wait_until(lambda: bool(restarted.events("running")) or not restarted.alive, 60, "the restart running")
    assert restarted.alive, restarted.stderr()[-2000:]
    kinesis = servers.client(deployment.kinesis, "kinesis")
    produced = produce_per_shard(kinesis, deployment.stream, 50)
    wait_until(lambda: {d.record_id for d in restarted.deliveries()} >= set(produced), 60, "the restart delivering")
    restarted.stop()
    assert client_row(deployment, "worker") == {}  # its clean stop deregistered the row it claimed
