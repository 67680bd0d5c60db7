"""A Spark standalone cluster on 127.0.0.1: a master and workers, from the pyspark package.

pip's pyspark has no ``sbin/start-master.sh``; ``bin/spark-class`` runs the master and the
workers as plain processes, which :func:`standalone_cluster` starts and stops. Each worker
runs its executors' Python workers with this interpreter (PYSPARK_PYTHON), so they import
kinsumer as the driver does.

    with standalone_cluster(workers=2) as cluster:
        spark = SparkSession.builder.master(cluster.master_url)...
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from typing import IO, Any

from .servers import ServerError, free_port

__all__ = ["SparkCluster", "cluster_env", "standalone_cluster"]

_STOP_TIMEOUT = 10.0


def _spark_home() -> pathlib.Path:
    import pyspark  # noqa: PLC0415 - only when a cluster is wanted

    return pathlib.Path(pyspark.__file__).parent


def cluster_env(extra: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """The environment of the cluster's processes (and of a driver that joins it); None in ``extra`` unsets."""
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(_spark_home()),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOCAL_HOSTNAME="localhost",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    for name, value in (extra or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


class SparkCluster:
    """A running master and its workers."""

    def __init__(self, master_url: str, ui_url: str, processes: list[subprocess.Popen[Any]], work: pathlib.Path):
        self.master_url = master_url
        self.ui_url = ui_url
        self.processes = processes
        self.work = work  # the workers' work directories (executor logs) live here

    def state(self) -> dict[str, Any]:
        """The master's JSON status (workers, applications)."""
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"{self.ui_url}/json/", timeout=2.0) as response:
            return dict(json.loads(response.read()))

    def alive_workers(self) -> int:
        try:
            return int(self.state().get("aliveworkers", 0))
        except (urllib.error.URLError, OSError, ValueError):
            return 0

    def executor_pids(self) -> list[int]:
        """The executor JVMs the workers run now."""
        found = []
        for proc in pathlib.Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                command = (proc / "cmdline").read_bytes()
                cwd = os.readlink(proc / "cwd")  # a worker runs each executor in its work directory
            except OSError:
                continue
            if b"CoarseGrainedExecutorBackend" in command and cwd.startswith(str(self.work)):
                found.append(int(proc.name))
        return found

    def session(self, app_name: str, conf: Mapping[str, str] | None = None, executor_env: Iterable[str] = ()) -> Any:
        """A SparkSession on this cluster with the kinsumer format registered.

        ``executor_env``: names of this process's environment variables to pass to the executors
        (``spark.executorEnv.*``), such as AWS settings.
        """
        from pyspark.sql import SparkSession  # noqa: PLC0415

        import kinsumer.spark  # noqa: PLC0415 - pyspark only when a session is wanted

        for name, value in cluster_env().items():  # this driver runs like the cluster's processes
            os.environ.setdefault(name, value)
        builder = (
            SparkSession.builder.master(self.master_url)
            .appName(app_name)
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.executor.memory", "512m")
        )
        for name in executor_env:
            if name in os.environ:
                builder = builder.config(f"spark.executorEnv.{name}", os.environ[name])
        for key, value in (conf or {}).items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        kinsumer.spark.register(spark)
        return spark

    def stop(self) -> None:
        """Stop the workers, then the master (each killed if it does not exit in time). Idempotent."""
        for process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in reversed(self.processes):
            try:
                process.wait(_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def _start(args: list[str], log: IO[bytes], env: dict[str, str]) -> subprocess.Popen[Any]:
    spark_class = _spark_home() / "bin" / "spark-class"
    return subprocess.Popen(  # its own process group: stopping it stops its executors too
        [str(spark_class), *args], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
        start_new_session=True,
    )  # fmt: skip


@contextlib.contextmanager
def standalone_cluster(
    workers: int = 2,
    cores: int = 1,
    memory: str = "1g",
    timeout: float = 90.0,
    env: Mapping[str, str | None] | None = None,
) -> Iterator[SparkCluster]:
    """A master and ``workers`` workers on 127.0.0.1 for the duration of the block.

    ``env`` changes the environment of the workers (and so of the executors); None unsets.
    """
    environment = cluster_env(env)
    port, ui = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="kinsumer-spark-cluster-") as tmp, tempfile.TemporaryFile() as log:
        work = pathlib.Path(tmp)
        master_args = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)]
        processes = [_start([*master_args, "--webui-port", str(ui)], log, environment)]
        cluster = SparkCluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui}", processes, work)
        try:
            for i in range(workers):
                worker_args = [
                    "org.apache.spark.deploy.worker.Worker", cluster.master_url, "--host", "127.0.0.1",
                    "--cores", str(cores), "--memory", memory, "--webui-port", str(free_port()),
                    "--work-dir", str(work / f"worker-{i}"),
                ]  # fmt: skip
                processes.append(_start(worker_args, log, environment))
            deadline = time.monotonic() + timeout
            while cluster.alive_workers() < workers:
                if any(p.poll() is not None for p in processes) or time.monotonic() > deadline:
                    log.seek(0)
                    tail = log.read().decode(errors="replace")[-3000:]
                    raise ServerError(f"the Spark cluster did not come up within {timeout:g} s (Java 17+?):\n{tail}")
                time.sleep(0.2)
            yield cluster
        finally:
            cluster.stop()
