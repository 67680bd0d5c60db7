"""The scale tier: 128 shards, client processes joining and leaving cleanly (kinesalite, DynamoDB on moto).

Default Config. A client captures every shard; a second joins and the shards are split between
them; it leaves cleanly and the first takes them all back. No shard is taken from a live owner
(its heartbeat never comes late enough for that), nothing is lost or delivered twice, and each
client runs a bounded number of threads, whatever its shards.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import pytest

from demo.servers import LocalServer
from tests.helpers import Producer, wait_until
from tests.procs.harness import ClientProcess, Deployment, ProcessAudit

pytestmark = pytest.mark.server

SHARDS = 128
#: A few dozen: the loop, the heartbeat, the coordinator, the commit clock and their pools, not one per shard.
MAX_THREADS = 60
#: The log lines of a shard taken from its owner while the owner was live (on the owner's side).
TAKEN = ("could not store the release", "is owned by another client now", "took shardId")


def owned(client: ClientProcess) -> set[str]:
    """The shards ``client`` holds now, from its gained and lost events."""
    held: Counter[str] = Counter()
    for event in client.events():
        if event.kind in ("gained", "lost"):
            held[event.fields[0]] += 1 if event.kind == "gained" else -1
    return {shard for shard, n in held.items() if n > 0}


def threads(client: ClientProcess) -> int:
    assert client.process is not None
    with open(f"/proc/{client.process.pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("Threads:"))


def test_128_shards_are_captured_split_on_a_join_and_taken_back_on_a_clean_leave(
    kinesalite: LocalServer, deploy: Callable[..., Deployment], processes: list[ClientProcess]
) -> None:
    deployment = deploy(SHARDS, kinesis=kinesalite)
    producer = Producer(kinesalite.client("kinesis"), deployment.stream, total=None, batch=64, pause=0.1, keys=4096)
    producer.start()
    first = ClientProcess(deployment, "client-a", {}).start()
    processes.append(first)
    wait_until(lambda: len(owned(first)) == SHARDS, 90, f"client-a to capture {SHARDS} shards")
    alone = threads(first)

    second = ClientProcess(deployment, "client-b", {}).start()
    processes.append(second)
    joined = time.monotonic()
    split = lambda: len(owned(first)) == len(owned(second)) == SHARDS // 2  # noqa: E731 - modulo on 2 clients
    wait_until(split, 90, "the shards split between the two clients")
    join_seconds = time.monotonic() - joined
    busy = max(threads(first), threads(second))

    left = time.monotonic()
    second.stop()
    wait_until(lambda: len(owned(first)) == SHARDS, 90, "client-a to take every shard back")
    leave_seconds = time.monotonic() - left
    produced = producer.stop()
    wait_until(lambda: not ProcessAudit([first, second]).lost(produced), 90, "every record delivered")
    first.stop()

    audit = ProcessAudit([first, second])
    assert not audit.lost(produced)
    assert not audit.duplicates()  # a clean join and a clean leave: none allowed
    assert not audit.shard_order_violations()
    logs = first.stderr() + second.stderr()
    assert not [line for line in logs.splitlines() if any(text in line for text in TAKEN)]
    assert alone <= MAX_THREADS and busy <= MAX_THREADS, (alone, busy)
    print(f"{SHARDS} shards: {len(produced)} records; threads {alone} alone, {busy} at most with two clients; "
          f"split {join_seconds:.1f} s after the join, taken back {leave_seconds:.1f} s after the leave")  # fmt: skip
