"""A client's hooks of one shard never overlap across its captures: ``on_lost`` runs on a thread of its own and
the handoff does not wait for it, so the shard may come back to the client while it still runs; the new
capture's ``on_assigned`` waits for it (state a handler keeps per shard is not reset under it)."""

from __future__ import annotations

import threading

import pytest

from kinsumer import StatReceiver
from kinsumer.handling import hooks
from kinsumer.handling.hooks import Lifecycle
from kinsumer.waiting import wait_event
from tests.helpers import wait_until


def test_on_assigned_of_a_shard_waits_for_the_end_hook_of_its_capture_before(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    release = threading.Event()
    waiting_on: list[threading.Event] = []  # the end hooks an on_assigned began to wait for

    def noted_wait(event: threading.Event, timeout: float) -> bool:
        waiting_on.append(event)
        return wait_event(event, timeout)

    monkeypatch.setattr(hooks, "wait_event", noted_wait)

    def on_lost(shard_id: str) -> None:
        calls.append(f"lost {shard_id} begins")
        release.wait(10)
        calls.append(f"lost {shard_id} ends")

    lifecycle = Lifecycle(lambda s: calls.append(f"assigned {s}"), None, on_lost, StatReceiver())
    ended = lifecycle.start("on_lost", "s1", lambda: None)
    assert ended is not None
    wait_until(lambda: "lost s1 begins" in calls, 10, "on_lost to begin")
    lifecycle.call("on_assigned", "s2")  # another shard: no wait
    assert waiting_on == [] and calls == ["lost s1 begins", "assigned s2"]
    again = threading.Thread(target=lifecycle.call, args=("on_assigned", "s1"))
    again.start()  # the shard back, while its on_lost runs
    wait_until(lambda: waiting_on == [ended], 10, "on_assigned to wait for on_lost")
    assert "assigned s1" not in calls  # it waits: on_lost holds until released
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
