"""A process blocked in ``next()`` on an idle stream; SIGINT is handed to a thread other than main.

    python -m tests.procs.blocked_next ENDPOINT STREAM APP

CPython runs signal handlers in the main thread only, and the operating system may hand a
process's signal to any thread. Here a helper thread waits until the main thread sleeps inside
``next()``, then sends SIGINT to itself. The main thread must notice it by itself: it prints
``interrupted`` once KeyboardInterrupt reaches it, stops the consumer and exits 130.
"""

from __future__ import annotations

import signal
import sys
import threading
import time

from demo import servers
from kinsumer import Config, Kinsumer


def main_thread_waits_in_next() -> bool:
    """The main thread's stack is inside the consumer's ``next()``, under a wait."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    names = []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return "next" in names and "wait" in names


def interrupt_from_a_helper_thread() -> None:
    deadline = time.monotonic() + 60
    while not main_thread_waits_in_next():
        if time.monotonic() > deadline:
            print("the main thread never waited in next()", file=sys.stderr, flush=True)
            return
        time.sleep(0.01)
    print("signalling", file=sys.stderr, flush=True)
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # to this thread, not the main one


def main() -> int:
    endpoint, stream, app = sys.argv[1:4]
    k = Kinsumer(
        stream, app, "blocked", Config(shard_check_frequency=0.5, client_record_max_age=2.0),
        kinesis=servers.client(endpoint, "kinesis"), dynamodb=servers.client(endpoint, "dynamodb"),
    )  # fmt: skip
    k.run()
    threading.Thread(target=interrupt_from_a_helper_thread, daemon=True).start()
    try:
        k.next()  # no timeout, and nothing arrives
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr, flush=True)
        k.stop()
        return 130
    k.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
