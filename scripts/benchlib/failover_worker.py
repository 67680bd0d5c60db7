"""One kinsumer client of the failover benchmark, as its own process.

Usage: python failover_worker.py ENDPOINT STREAM APP NAME default|tuned OUT. Appends
"<unix time> <shard id>" to OUT for every record delivered, until killed or terminated.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from types import FrameType

from demo import servers
from kinsumer import Config, Kinsumer

TUNED = Config(shard_check_frequency=0.5, client_record_max_age=2.0, commit_frequency=0.5, leader_action_frequency=5.0)


def main() -> None:
    endpoint, stream, app, name, variant, out = sys.argv[1:7]
    config = TUNED if variant == "tuned" else Config()
    k = Kinsumer(
        stream,
        app,
        name,
        config,
        kinesis=servers.client(endpoint, "kinesis"),
        dynamodb=servers.client(endpoint, "dynamodb"),
    )

    def terminate(signum: int, frame: FrameType | None) -> None:
        threading.Thread(target=k.stop).start()  # not in the handler: it may interrupt a held lock

    signal.signal(signal.SIGTERM, terminate)
    k.run()
    with open(out, "a", buffering=1) as log:
        while (record := k.next_record()) is not None:
            log.write(f"{time.time():.3f} {record.shard_id}\n")


if __name__ == "__main__":
    main()
