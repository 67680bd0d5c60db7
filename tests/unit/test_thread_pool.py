"""The shard loop's pool of threads (kinsumer.reading.shard_loop.ThreadPool): bounded, and a call submitted
``first`` runs before the calls already waiting for a thread (a lease's capture or release before reads)."""

from __future__ import annotations

import threading

from kinsumer.reading.shard_loop import ThreadPool


def test_a_call_submitted_first_runs_before_those_waiting_and_the_pool_never_exceeds_its_threads() -> None:
    pool = ThreadPool(1, "test-pool")  # one thread: the calls waiting run one by one, in the pool's order
    release, started = threading.Event(), threading.Event()
    order: list[str] = []
    lock = threading.Lock()
    running = 0
    most = 0

    def call(name: str, block: bool = False) -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        if block:
            started.set()
            assert release.wait(10)
        with lock:
            order.append(name)
            running -= 1

    try:
        busy = [pool.submit(lambda: call("busy", block=True))]
        assert started.wait(10)  # the thread is taken: what comes next waits in the pool's queue
        reads = [pool.submit(lambda i=i: call(f"read{i}")) for i in range(3)]
        lease = pool.submit(lambda: call("release"), first=True)
        release.set()
        for future in [*busy, *reads, lease]:
            future.result(timeout=10)
    finally:
        pool.shutdown()
    assert most == 1
    assert order == ["busy", "release", "read0", "read1", "read2"]
