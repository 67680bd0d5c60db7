"""Where every enhanced fan-out subscription of the process is read: one event loop thread.

Each :class:`~.fanout.SubscriptionReader` runs its pump as a coroutine on this loop
("kinsumer-efo"); its few blocking calls (GetShardIterator to place a LATEST start, the
GetRecords check of a closed shard, a host name's look-up) run on a pool of at most
:data:`THREADS` threads ("kinsumer-efo-io") that end after a few idle seconds. So the threads
of a process do not grow with its subscriptions, whichever clients (or Spark tasks) hold them.

The hub starts on the first subscription and is never stopped: idle, it is one daemon thread
asleep in its loop. A child made by ``fork`` (a Spark worker) starts a hub of its own.
"""

from __future__ import annotations

import os
import threading

from .shard_loop import ShardLoop

__all__ = ["THREADS", "hub"]

#: Threads of the hub's pool, at most.
THREADS = 4

_lock = threading.Lock()
_hub: tuple[int, ShardLoop] | None = None  # the process that started it, and the hub


def hub() -> ShardLoop:
    """The process's hub, started on the first call."""
    global _hub  # noqa: PLW0603 - one per process
    with _lock:
        if _hub is None or _hub[0] != os.getpid():
            started = ShardLoop(THREADS, name="kinsumer-efo", pool="kinsumer-efo-io")
            started.start()
            _hub = (os.getpid(), started)
        return _hub[1]


def _forked() -> None:
    global _lock  # noqa: PLW0603 - a lock held by another thread at the fork stays held in the child
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forked)
