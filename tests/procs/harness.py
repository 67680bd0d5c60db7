"""Running kinsumer clients as processes and auditing what they delivered."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
from collections import defaultdict
from typing import Any

import attrs

from tests.helpers import wait_until

REPO = pathlib.Path(__file__).resolve().parents[2]

#: Membership rounds every 0.5 s; a silent client is dead after 2 s.
FAST = {
    "shard_check_frequency": 0.5,
    "client_record_max_age": 2.0,
    "commit_frequency": 0.25,
    "leader_action_frequency": 1.0,
    "handoff_timeout": 5.0,
}
#: The "tuned" configuration of docs/configuration.md: a 1 s heartbeat, dead after 2 s.
TUNED = {
    "shard_check_frequency": 0.5,
    "client_record_max_age": 2.0,
    "commit_frequency": 0.5,
    "leader_action_frequency": 5.0,
}


@attrs.frozen
class Delivery:
    record_id: int
    shard_id: str
    sequence_number: int
    key: str
    counter: int
    at: float  # wall-clock time of the delivery
    client: str


@attrs.frozen
class Event:
    at: float
    kind: str
    fields: tuple[str, ...]
    client: str


@attrs.define
class Deployment:
    """Where the clients connect and write."""

    kinesis: str
    dynamodb: str
    stream: str
    app: str
    out: pathlib.Path


class ClientProcess:
    """One ``tests.procs.client`` process, under the test's control."""

    def __init__(self, deployment: Deployment, name: str, config: dict[str, Any] | None = None, **spec: Any) -> None:
        self.name = name
        self.deployment = deployment
        self.spec = {
            "kinesis": deployment.kinesis,
            "dynamodb": deployment.dynamodb,
            "stream": deployment.stream,
            "app": deployment.app,
            "name": name,
            "out": str(deployment.out),
            "config": {"client_id": name, **(config if config is not None else FAST)},
            **spec,
        }
        self.process: subprocess.Popen[bytes] | None = None
        self._starts = 0  # processes started under this name: each says when it listens for SIGTERM

    @property
    def client_id(self) -> str:
        return str(self.spec["config"]["client_id"])

    def start(self) -> ClientProcess:
        self._starts += 1
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        with self._path(".stderr").open("ab") as stderr:  # the child keeps its own copy
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.procs.client", "--spec", json.dumps(self.spec)],
                cwd=REPO,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        return self

    def _path(self, suffix: str) -> pathlib.Path:
        return self.deployment.out / f"{self.name}{suffix}"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL: a crash. Nothing is released or deregistered."""
        self.signal(signal.SIGKILL)
        assert self.process is not None
        self.process.wait(10)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM: a clean stop; the process must exit 0 and report no error.

        A process just started is sent it once it handles it (before, SIGTERM would end it as a crash).
        """
        process = self.process
        assert process is not None
        listening = lambda: process.poll() is not None or len(self.events("listening")) >= self._starts  # noqa: E731
        wait_until(listening, timeout, f"{self.name} to handle SIGTERM")
        if process.poll() is None:
            self.signal(signal.SIGTERM)
        code = process.wait(timeout)
        assert code == 0, f"{self.name} exited with {code}: {self.error() or self.stderr()[-2000:]}"

    def ensure_dead(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    @property
    def exit_code(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def dead_letters(self) -> list[tuple[int, str, int, str]]:
        """What ``process()``'s sink got: (id, reason, attempts, shard)."""
        path = self._path(".dead")
        if not path.exists():
            return []
        out = []
        for raw in path.read_text().splitlines():
            parts = raw.split()
            if len(parts) == 4:
                out.append((int(parts[0]), parts[1], int(parts[2]), parts[3]))
        return out

    def error(self) -> str:
        path = self._path(".error")
        return path.read_text() if path.exists() else ""

    def stderr(self) -> str:
        path = self._path(".stderr")
        return path.read_text(errors="replace") if path.exists() else ""

    def deliveries(self) -> list[Delivery]:
        path = self._path(".deliveries")
        if not path.exists():
            return []
        out = []
        for raw in path.read_text().splitlines():
            parts = raw.split()
            if len(parts) != 6:
                continue  # a line cut by SIGKILL
            rid, shard, seq, key, counter, at = parts
            out.append(Delivery(int(rid), shard, int(seq), key, int(counter), float(at), self.name))
        return out

    def events(self, kind: str | None = None) -> list[Event]:
        path = self._path(".events")
        if not path.exists():
            return []
        out = []
        for raw in path.read_text().splitlines():
            parts = raw.split()
            if len(parts) >= 2 and (kind is None or parts[1] == kind):
                out.append(Event(float(parts[0]), parts[1], tuple(parts[2:]), self.name))
        return out


class ProcessAudit:
    """Every delivery of every process of a test, and the checks on them."""

    def __init__(self, clients: list[ClientProcess]) -> None:
        self.deliveries = sorted((d for c in clients for d in c.deliveries()), key=lambda d: d.at)

    def ids(self) -> set[int]:
        return {d.record_id for d in self.deliveries}

    def lost(self, produced: list[int]) -> list[int]:
        return sorted(set(produced) - self.ids())

    def duplicates(self) -> dict[int, list[Delivery]]:
        by_id: dict[int, list[Delivery]] = defaultdict(list)
        for d in self.deliveries:
            by_id[d.record_id].append(d)
        return {rid: ds for rid, ds in by_id.items() if len(ds) > 1}

    def first_deliveries(self) -> list[Delivery]:
        seen: set[int] = set()
        first = []
        for d in self.deliveries:
            if d.record_id not in seen:
                seen.add(d.record_id)
                first.append(d)
        return first

    def shard_order_violations(self) -> list[tuple[Delivery, Delivery]]:
        last: dict[str, Delivery] = {}
        bad = []
        for d in self.first_deliveries():
            prev = last.get(d.shard_id)
            if prev is not None and d.sequence_number <= prev.sequence_number:
                bad.append((prev, d))
            last[d.shard_id] = d
        return bad

    def key_order_violations(self) -> list[tuple[Delivery, Delivery]]:
        last: dict[str, Delivery] = {}
        bad = []
        for d in self.first_deliveries():
            prev = last.get(d.key)
            if prev is not None and d.counter <= prev.counter:
                bad.append((prev, d))
            last[d.key] = d
        return bad

    def count(self) -> int:
        return len(self.deliveries)
