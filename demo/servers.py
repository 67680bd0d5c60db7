"""Local AWS-compatible servers on 127.0.0.1, for the demo, the benchmarks and the tests.

``moto_server()`` runs moto's server (DynamoDB, Kinesis and SQS; moto[server], which ``make`` installs) in
a child process on a free port; :class:`LocalServer` stops it however the block ends. Clients
made by :meth:`LocalServer.client` use fixed fake credentials, so nothing can reach real AWS.
The tests start kinesalite with ``tests/support/kinesalite.py``.
"""

from __future__ import annotations

import contextlib
import pathlib
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import IO, Any

import boto3
import botocore.config

__all__ = ["LocalServer", "ServerError", "client", "free_port", "moto_server"]

REGION = "us-east-1"
_STOP_TIMEOUT = 5.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def client(endpoint: str, service: str, **config: Any) -> Any:
    """A boto3 client for ``service`` at a local ``endpoint``, with fake credentials.

    Extra keyword arguments are botocore Config options.
    """
    return boto3.client(  # type: ignore[call-overload]
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="local",
        aws_secret_access_key="local",
        config=botocore.config.Config(**{"max_pool_connections": 64, **config}),
    )


class ServerError(Exception):
    """A local server did not start; the message says why and shows its last output."""


class LocalServer:
    """A server process listening on 127.0.0.1 at ``endpoint``."""

    def __init__(self, process: subprocess.Popen[Any], endpoint: str) -> None:
        self.process = process
        self.endpoint = endpoint

    def client(self, service: str, **config: Any) -> Any:
        """A boto3 client for ``service`` on this server (see :func:`client`)."""
        return client(self.endpoint, service, **config)

    def stop(self, grace: float = _STOP_TIMEOUT) -> None:
        """Terminate the process (kill it if it does not exit within ``grace`` seconds; at once if 0). Idempotent."""
        if self.process.poll() is None:
            if grace > 0:
                self.process.terminate()
                try:
                    self.process.wait(grace)
                    return
                except subprocess.TimeoutExpired:
                    pass
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _answers(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
    try:
        with opener.open(url, timeout=1.0) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def _output_tail(log: IO[bytes]) -> str:
    log.seek(0)
    return log.read().decode(errors="replace")[-2000:]


@contextlib.contextmanager
def moto_server(timeout: float = 30.0) -> Iterator[LocalServer]:
    """Run moto's server on a free port of 127.0.0.1 for the duration of the block, each DynamoDB and
    each Kinesis request atomic as on AWS (:mod:`demo.atomic_moto`)."""
    port = free_port()
    command = [sys.executable, "-m", "demo.atomic_moto", "-H", "127.0.0.1", "-p", str(port)]
    with tempfile.TemporaryFile() as log:
        # its own session: a Ctrl-C in the terminal reaches only us, and we stop it last
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=pathlib.Path(__file__).resolve().parent.parent,  # where ``demo`` is a package
        )
        server = LocalServer(process, f"http://127.0.0.1:{port}")
        with server:
            deadline = time.monotonic() + timeout
            while not _answers(f"{server.endpoint}/moto-api/"):
                if process.poll() is not None or time.monotonic() > deadline:
                    why = f"exited with {process.returncode}" if process.poll() is not None else "did not answer"
                    raise ServerError(
                        f"moto server {why} within {timeout:g} s; is moto[server] installed (`make "
                        f".venv/.installed` installs it into .venv)? Its last output:\n{_output_tail(log)}"
                    )
                time.sleep(0.1)
            yield server
