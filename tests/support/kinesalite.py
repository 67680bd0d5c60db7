"""kinesalite (Kinesis with real shard splits and merges) in a node process on 127.0.0.1.

Installed by ``make test`` (``npm ci`` in ``tests/kinesalite``); used by the resharding
tests and the benchmarks.
"""

from __future__ import annotations

import os
import pathlib
import subprocess

from demo.servers import LocalServer, ServerError

__all__ = ["KINESALITE_DIR", "start_kinesalite"]

#: Where its npm install is: tests/kinesalite, or $KINSUMER_KINESALITE_DIR (a git worktree can use its main
#: checkout's install instead of one of its own).
KINESALITE_DIR = pathlib.Path(
    os.environ.get("KINSUMER_KINESALITE_DIR") or pathlib.Path(__file__).resolve().parents[1] / "kinesalite"
)


def start_kinesalite(log_path: pathlib.Path, directory: pathlib.Path = KINESALITE_DIR) -> LocalServer:
    """Start kinesalite on a free port of 127.0.0.1; its stderr goes to ``log_path``.

    ``directory`` holds ``server.js`` (the wrapper that binds 127.0.0.1) and its npm install.
    """
    if not (directory / "node_modules" / "kinesalite").is_dir():
        raise ServerError(f"kinesalite is not installed: run 'make test' (npm ci in {directory})")
    with log_path.open("a") as log:  # the child keeps its own copy of the descriptor
        process = subprocess.Popen(
            ["node", str(directory / "server.js"), "0"], stdout=subprocess.PIPE, stderr=log, text=True
        )
    assert process.stdout is not None
    line = process.stdout.readline()  # "ready PORT"
    server = LocalServer(process, f"http://127.0.0.1:{line.split()[-1] if line.startswith('ready ') else 0}")
    if not line.startswith("ready "):
        server.stop()
        raise ServerError(f"kinesalite did not start: {line!r}; its log: {log_path.read_text()[-2000:]}")
    return server
