"""Injected faults in the client processes: throttling, 5xx, connection resets, expired iterators."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from demo.servers import LocalServer
from tests.helpers import Producer, wait_until
from tests.procs.harness import ClientProcess, Deployment, ProcessAudit

pytestmark = pytest.mark.server

FAULTS = {
    "GetRecords": {"ProvisionedThroughputExceededException": 0.20, "ExpiredIteratorException": 0.05},
    "dynamodb": {"InternalServerError": 0.05},
    "reset": 0.02,  # of every call, Kinesis and DynamoDB
}


def test_clients_under_injected_faults_lose_nothing_and_raise_nothing(
    deploy: Callable[..., Deployment], moto_server: LocalServer, processes: list[ClientProcess]
) -> None:
    deployment = deploy(4)
    producer = Producer(moto_server.client("kinesis"), deployment.stream, total=6_000, batch=60, pause=0.1)
    producer.start()
    clients = [
        ClientProcess(
            deployment,
            f"client-{i}",
            faults={**FAULTS, "seed": i},
            config={
                "shard_check_frequency": 0.5,
                "client_record_max_age": 2.0,
                "commit_frequency": 0.25,
                "leader_action_frequency": 1.0,
                "max_records_per_call": 50,
            },
        ).start()
        for i in range(3)
    ]
    processes.extend(clients)
    producer.join(120)
    produced = producer.stop()
    wait_until(lambda: not ProcessAudit(clients).lost(produced), 120, "every record delivered")
    for proc in clients:
        proc.stop()  # exit 0 and no error file: nothing reached next*()

    audit = ProcessAudit(clients)
    assert not audit.lost(produced)
    assert not audit.shard_order_violations()
    injected = Counter(e.fields[1] for p in clients for e in p.events("injected"))
    retried = Counter(e.fields[1] for p in clients for e in p.events("retried"))
    # a fault that hits a call while its client or reader is stopping is abandoned, not retried
    retried.update(e.fields[1] for p in clients for e in p.events("abandoned"))
    print(f"injected {dict(injected)}; retried or abandoned {dict(retried)}; duplicates {len(audit.duplicates())}")
    # each kind was exercised (counts vary with timing: ~10 expired iterators, ~30 throttles per run)
    for code in ("ProvisionedThroughputExceededException", "ExpiredIteratorException", "InternalServerError"):
        assert injected[code] >= 1, (code, injected)
    assert injected["ConnectionReset"] >= 1
    # every injected fault was retried (or, while stopping, abandoned) by kinsumer; connection
    # resets are counted under their botocore name
    assert retried["ProvisionedThroughputExceededException"] == injected["ProvisionedThroughputExceededException"]
    assert retried["ExpiredIteratorException"] == injected["ExpiredIteratorException"]
    assert retried["InternalServerError"] == injected["InternalServerError"]
    assert retried["ConnectionClosedError"] == injected["ConnectionReset"]
    assert not audit.duplicates()  # faults alone never cost a duplicate
