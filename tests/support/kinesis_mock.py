"""kinesis-mock (npm ``kinesis-local``, LocalStack's Kinesis) in a node process on 127.0.0.1.

The server for enhanced fan-out: it implements RegisterStreamConsumer and SubscribeToShard
(an event stream over plain HTTP) and routes new records to the children after a split.
Installed by ``make test`` (``npm ci`` in ``tests/kinesis_mock``); ``server.js`` there binds
it to 127.0.0.1 and runs it from its package folder (it reads ``server.json`` from there).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import time

import botocore.exceptions

from demo.servers import LocalServer, ServerError, free_port

__all__ = ["KINESIS_MOCK_DIR", "start_kinesis_mock"]

#: Where its npm install is: tests/kinesis_mock, or $KINSUMER_KINESIS_MOCK_DIR (as KINESALITE_DIR).
KINESIS_MOCK_DIR = pathlib.Path(
    os.environ.get("KINSUMER_KINESIS_MOCK_DIR") or pathlib.Path(__file__).resolve().parents[1] / "kinesis_mock"
)
_START_TIMEOUT = 60.0


def start_kinesis_mock(
    log_path: pathlib.Path, directory: pathlib.Path = KINESIS_MOCK_DIR, shard_limit: int = 200
) -> LocalServer:
    """Start kinesis-mock on free ports of 127.0.0.1 (it answers once ListStreams does); output to ``log_path``.

    ``shard_limit``: the open shards of all its streams, at most."""
    if not (directory / "node_modules" / "kinesis-local").is_dir():
        raise ServerError(f"kinesis-mock is not installed: run 'make test' (npm ci in {directory})")
    port = free_port()
    env = {
        **os.environ,
        "KINESIS_MOCK_PLAIN_PORT": str(port),
        "KINESIS_MOCK_TLS_PORT": str(free_port()),
        "CREATE_STREAM_DURATION": "0ms",
        "DELETE_STREAM_DURATION": "0ms",
        "REGISTER_STREAM_CONSUMER_DURATION": "0ms",
        "DEREGISTER_STREAM_CONSUMER_DURATION": "0ms",
        "SPLIT_SHARD_DURATION": "0ms",
        "MERGE_SHARDS_DURATION": "0ms",
        "SHARD_LIMIT": str(shard_limit),
        "LOG_LEVEL": "WARN",
    }
    with log_path.open("a") as log:  # the child keeps its own copy of the descriptor
        process = subprocess.Popen(["node", str(directory / "server.js")], stdout=log, stderr=log, env=env)
    server = LocalServer(process, f"http://127.0.0.1:{port}")
    kinesis = server.client("kinesis")
    deadline = time.monotonic() + _START_TIMEOUT
    while True:
        try:
            kinesis.list_streams()
            return server
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            if process.poll() is not None or time.monotonic() > deadline:
                server.stop()
                raise ServerError(
                    f"kinesis-mock did not start ({exc}); its log: {log_path.read_text()[-2000:]}"
                ) from exc
            time.sleep(0.1)
