"""A client's hooks of one shard never overlap across its captures: ``on_lost`` runs on a thread of its own and
the handoff does not wait for it, so the shard may come back to the client while it still runs; the new
capture's ``on_assigned`` waits for it (state a handler keeps per shard is not reset under it)."""

from __future__ import annotations

import threading

from kinsumer import StatReceiver
from kinsumer.handling.hooks import Lifecycle
from tests.helpers import wait_until


def test_on_assigned_of_a_shard_waits_for_the_end_hook_of_its_capture_before() -> None:
    calls: list[str] = []
    release = threading.Event()

    def on_lost(shard_id: str) -> None:
        calls.append(f"lost {shard_id} begins")
        release.wait(10)
        calls.append(f"lost {shard_id} ends")

    lifecycle = Lifecycle(lambda s: calls.append(f"assigned {s}"), None, on_lost, StatReceiver())
    ended = lifecycle.start("on_lost", "s1", lambda: None)
    assert ended is not None
    wait_until(lambda: "lost s1 begins" in calls, 10, "on_lost to begin")
    other = threading.Thread(target=lifecycle.call, args=("on_assigned", "s2"))
    other.start()  # another shard: no wait
    other.join(10)
    again = threading.Thread(target=lifecycle.call, args=("on_assigned", "s1"))
    again.start()  # the shard back, while its on_lost runs
    assert not ended.wait(0.2) and "assigned s1" not in calls  # still waiting (the hook holds)
    release.set()
    again.join(10)
    assert not again.is_alive()
    assert calls == ["lost s1 begins", "assigned s2", "lost s1 ends", "assigned s1"]


def test_on_assigned_with_no_end_hook_under_way_does_not_wait() -> None:
    calls: list[str] = []
    lifecycle = Lifecycle(calls.append, None, lambda s: None, StatReceiver())
    ended = lifecycle.start("on_lost", "s1", lambda: None)
    assert ended is not None and ended.wait(10)
    lifecycle.call("on_assigned", "s1")  # on this thread: returns at once
    assert calls == ["s1"]
