"""``process()``'s shard lifecycle hooks: what it calls as its client gains and gives up shards.

- ``on_assigned(shard_id)``: a capture of the shard is about to hand out its first record: called on the
  thread that will hand it out, before the handler sees the record.
- ``on_revoked(shard_id)``: the shard is given up cleanly (a rebalance, ``stop()``, or it was read to
  its end): called once its last handed record is done, before its final checkpoint and release,
  so state flushed there agrees with the checkpoint. The handoff waits for it, within
  ``handoff_timeout`` in all.
- ``on_lost(shard_id)``: the shard went without a clean handoff (another client took it, or the
  handoff timed out with records in handlers): what was built from it must be dropped; its
  records past the checkpoint are delivered again where it went.

Revoked or lost is called only for a capture whose assigned was called (a shard that never handed
out a record is not announced). Revoked and lost run on a thread of their own each: a hook that
hangs holds its thread, never the shard loop. A client that captures a shard again calls its
``on_assigned`` only once the end hook of its capture before has returned (``on_lost`` is not waited
for by the handoff, and the shard may come back at once), waiting at most :data:`END_HOOK_WAIT`
seconds: state the hooks keep per shard is never reset under an end hook still running. A hook that
raises is logged and counted (:meth:`~kinsumer.StatReceiver.hook_failed`), and changes nothing else.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Literal

import attrs

from ..failure import describe
from ..stats import StatReceiver
from ..waiting import wait_event

__all__ = ["END_HOOK_WAIT", "Hook", "Lifecycle"]

log = logging.getLogger("kinsumer.process")

Hook = Literal["on_assigned", "on_revoked", "on_lost"]

#: Seconds a capture's ``on_assigned`` waits at most for the end hook of the client's capture of the shard before.
END_HOOK_WAIT = 30.0


@attrs.frozen
class Lifecycle:
    """The hooks of a ``process()`` call, and how they are called."""

    on_assigned: Callable[[str], Any] | None
    on_revoked: Callable[[str], Any] | None
    on_lost: Callable[[str], Any] | None
    stats: StatReceiver
    #: The end hooks under way, by shard: set when each returns.
    _ending: dict[str, threading.Event] = attrs.field(factory=dict, init=False)
    _ending_lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)

    def call(self, hook: Hook, shard_id: str) -> None:
        """Call ``hook`` (if given) here; an exception it raises is logged and counted. ``on_assigned`` comes
        after the shard's end hook under way, if there is one (see the module's description)."""
        function = getattr(self, hook)
        if function is None:
            return
        with self._ending_lock:
            ending = self._ending.get(shard_id) if hook == "on_assigned" else None
        if ending is not None and not wait_event(ending, END_HOOK_WAIT):
            log.warning("on_assigned(%r) goes on while the end hook of its capture before still runs after %g s",
                        shard_id, END_HOOK_WAIT)  # fmt: skip
        try:
            function(shard_id)
        except Exception as exc:  # the user's hook: logged and counted, nothing else
            self.stats.hook_failed(shard_id, hook, type(exc).__name__)
            log.warning("%s(%r) raised %s", hook, shard_id, describe(exc), exc_info=exc)

    def start(self, hook: Hook, shard_id: str, done: Callable[[], None]) -> threading.Event | None:
        """Call ``hook`` on a thread of its own; the event is set (and ``done()`` called) when it returns.
        None if there is no such hook."""
        if getattr(self, hook) is None:
            return None
        finished = threading.Event()
        with self._ending_lock:
            self._ending[shard_id] = finished

        def run() -> None:
            try:
                self.call(hook, shard_id)
            finally:
                finished.set()
                with self._ending_lock:
                    if self._ending.get(shard_id) is finished:
                        del self._ending[shard_id]
                done()

        threading.Thread(target=run, name=f"kinsumer-{hook}-{shard_id}", daemon=True).start()
        return finished
