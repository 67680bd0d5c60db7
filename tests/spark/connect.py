"""A Spark Connect server on 127.0.0.1, from the pyspark package, for the tests that go through Connect.

pip's pyspark ships ``jars/spark-connect_*.jar`` and ``bin/spark-submit`` (no ``sbin/start-connect-server.sh``):
:func:`connect_server` runs ``SparkConnectServer`` with spark-submit in a process group of its own, waits until
its gRPC port accepts connections, and stops the group (the JVM and its Python workers) however the block ends.

The server's Python workers run the data source: they must import kinsumer (``PYTHONPATH``) and find their AWS
settings in their own environment, which is the server's (``env``).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from typing import IO, Any

from demo.servers import ServerError, free_port
from demo.spark_cluster import cluster_env

__all__ = ["ConnectServer", "connect_server"]

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
_STOP_TIMEOUT = 10.0


class ConnectServer:
    """A running Spark Connect server: clients connect to ``url``."""

    def __init__(self, process: subprocess.Popen[Any], port: int, log: IO[bytes]) -> None:
        self.process = process
        self.port = port
        self.url = f"sc://127.0.0.1:{port}"
        self._log = log

    def log_tail(self, chars: int = 4000) -> str:
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-chars:]

    def accepts(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        """SIGTERM to the server's process group (SIGKILL if it has not exited in time). Idempotent."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(_STOP_TIMEOUT)
        with contextlib.suppress(ProcessLookupError):  # the group's Python workers too, if any is left
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


@contextlib.contextmanager
def connect_server(
    env: Mapping[str, str | None] | None = None,
    conf: Mapping[str, str] | None = None,
    cores: int = 2,
    timeout: float = 120.0,
) -> Iterator[ConnectServer]:
    """A Spark Connect server (``local[cores]``) on a free port of 127.0.0.1 for the duration of the block.

    ``env`` changes the server's environment (and so its Python workers'); None unsets. ``conf``: more
    Spark settings.
    """
    port = free_port()
    settings = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.connect.grpc.port.maxRetries": "0",  # the port asked for, or fail: never another one
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": str(cores),
        "spark.log.level": "WARN",
        **(conf or {}),
    }
    environment = cluster_env(env)  # SPARK_HOME: the pyspark package
    spark_submit = pathlib.Path(environment["SPARK_HOME"]) / "bin" / "spark-submit"
    command = [str(spark_submit), "--class", SERVER_CLASS, "--master", f"local[{cores}]"]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    command.append("spark-internal")  # no application jar: the class is in the package's jars/
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(  # its own process group: stopping it stops its Python workers too
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=environment,
            start_new_session=True,
        )  # fmt: skip
        server = ConnectServer(process, port, log)
        try:
            deadline = time.monotonic() + timeout
            while not server.accepts():
                if process.poll() is not None or time.monotonic() > deadline:
                    why = f"exited with {process.returncode}" if process.poll() is not None else "did not listen"
                    raise ServerError(
                        f"the Spark Connect server {why} within {timeout:g} s on port {port}:\n{server.log_tail()}"
                    )
                time.sleep(0.2)
            yield server
        finally:
            server.stop()
