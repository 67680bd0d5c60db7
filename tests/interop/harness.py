"""The interop tier's tools: the records a test writes (and where they landed), the ledger of what each
library delivered, a client of the Go library as a child process, a kinsumer client in this process.

Every record is JSON ``{"id": n}`` with a unique ``n``. The Go library's ``Next()`` gives the data alone,
so the ledger places each delivered id by the shard and sequence number PutRecords answered for it.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import IO, Any

import attrs

from demo.servers import LocalServer
from kinsumer import Config, Kinsumer
from tests.helpers import shard_hash_keys, wait_until

__all__ = [
    "GO_AGE", "GO_SHARD_CHECK", "KINSUMER_ROUND", "READ_DEADLINE", "Fleet", "GoClient", "KinsumerClient", "Ledger",
    "Placement", "Writer", "checkpoints", "go_client_ids", "kinsumer_config", "names", "owners", "produce", "says_go",
    "wait_for",
]  # fmt: skip

#: The Go clients' shardCheckFrequency: they heartbeat (and look for shard changes) this often.
GO_SHARD_CHECK = 1.0
#: How long a Go client's row counts as live after its last heartbeat: the Go library's own
#: maxAgeForClientRecord, 5 x shardCheckFrequency. kinsumer's ``go_client_max_age`` is set to it.
GO_AGE = 5 * GO_SHARD_CHECK
#: The Go clients' Config: the shortest throttle the library accepts (200 ms), commits every 250 ms.
GO_FLAGS = ("-throttle", "200ms", "-commit", "250ms", "-shard-check", f"{GO_SHARD_CHECK:g}s", "-leader", "1s")
#: kinsumer's membership round in these tests: its shard check (0.5 s) twice, the one that finds a
#: client gone and the one that captures the shard.
KINSUMER_ROUND = 1.0
#: Seconds a test waits for a stream's records to be read, the slowest step of every case.
READ_DEADLINE = 60.0


def kinsumer_config(**changes: Any) -> Config:
    """kinsumer's Config for these tests: short rounds, and a Go client counted live for :data:`GO_AGE`
    after its last heartbeat (its ``go_client_max_age`` matches the Go clients' own age). ``changes``:
    other fields (``beside_go="wait"``). Built inside each test, so that a field kinsumer lacks fails the
    test (TypeError), not the tier's collection."""
    fields: dict[str, Any] = {
        "shard_check_frequency": 0.5,
        "client_record_max_age": 2.0,
        "commit_frequency": 0.25,
        "leader_action_frequency": 1.0,
        "handoff_timeout": 5.0,
        "go_client_max_age": GO_AGE,
    }
    return Config(**{**fields, **changes})


@attrs.frozen
class Placement:
    """Where PutRecords put one record."""

    shard_id: str
    sequence_number: int


def produce(kinesis: Any, stream: str, first_id: int, count: int) -> dict[int, Placement]:
    """Write records ``first_id`` .. ``first_id + count - 1`` spread evenly over the open shards (an explicit
    hash key each), in batches of 500, retrying the entries PutRecords failed; returns where each landed."""
    keys = sorted(shard_hash_keys(kinesis, stream).items())
    entries: list[tuple[int, dict[str, Any]]] = []
    for rid in range(first_id, first_id + count):
        shard, key = keys[rid % len(keys)]
        entries.append((rid, {"Data": json.dumps({"id": rid}).encode(), "PartitionKey": shard, "ExplicitHashKey": key}))
    placed: dict[int, Placement] = {}
    for start in range(0, len(entries), 500):
        batch = entries[start : start + 500]
        while batch:
            answer = kinesis.put_records(StreamName=stream, Records=[entry for _, entry in batch])
            failed = []
            for (rid, entry), result in zip(batch, answer["Records"], strict=True):
                if "ErrorCode" in result:
                    failed.append((rid, entry))
                else:
                    placed[rid] = Placement(result["ShardId"], int(result["SequenceNumber"]))
            batch = failed
    return placed


@attrs.frozen
class Delivered:
    """One delivery: ``order`` counts the deliveries of the whole test as the test saw them."""

    order: int
    client: str
    record_id: int


class Ledger:
    """Every record a test wrote (:meth:`place`) and every delivery of it, by either library, in the order
    the test saw them; and the checks on them. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.placed: dict[int, Placement] = {}
        self.deliveries: list[Delivered] = []
        #: What a client delivered that the test never wrote (a line it could not read, a misplaced record).
        self.strangers: list[str] = []

    def place(self, placed: Mapping[int, Placement]) -> None:
        with self._lock:
            self.placed.update(placed)

    def add(self, client: str, record_id: int) -> None:
        with self._lock:
            self.deliveries.append(Delivered(len(self.deliveries), client, record_id))

    def stranger(self, what: str) -> None:
        with self._lock:
            self.strangers.append(what)

    def of(self, client: str) -> list[int]:
        """The ids ``client`` delivered, in order."""
        with self._lock:
            return [d.record_id for d in self.deliveries if d.client == client]

    def count(self, client: str) -> int:
        return len(self.of(client))

    def ids(self) -> set[int]:
        with self._lock:
            return {d.record_id for d in self.deliveries}

    def has_all(self) -> bool:
        """Every record written was delivered (at least once)."""
        with self._lock:
            return len(self.placed) == len({d.record_id for d in self.deliveries} & self.placed.keys())

    def lost(self) -> set[int]:
        with self._lock:
            return self.placed.keys() - {d.record_id for d in self.deliveries}

    def duplicates(self) -> dict[int, int]:
        """Ids delivered more than once (by anyone), with how many times."""
        with self._lock:
            counts = Counter(d.record_id for d in self.deliveries)
        return {rid: n for rid, n in counts.items() if n > 1}

    def by_both(self, one: str, other: str) -> set[int]:
        """Ids delivered by ``one`` and by ``other``."""
        return set(self.of(one)) & set(self.of(other))

    def order_violations(self) -> list[str]:
        """Per-shard order, broken: each client's deliveries of a shard must come in increasing sequence
        numbers, and so must each shard's first deliveries across clients (a shard's next owner goes on from
        where the last one was, never before a record the shard's previous owner delivered for the first
        time; a crashed owner's records it delivers again are not first deliveries)."""
        with self._lock:
            deliveries = list(self.deliveries)
            placed = dict(self.placed)
        broken: list[str] = []
        last_of: dict[tuple[str, str], Delivered] = {}
        first_seen: set[int] = set()
        last_first: dict[str, Delivered] = {}
        for d in deliveries:
            where = placed.get(d.record_id)
            if where is None:
                continue  # a stranger: reported by the test
            mine = last_of.get((d.client, where.shard_id))
            if mine is not None and where.sequence_number <= placed[mine.record_id].sequence_number:
                broken.append(f"{d.client} delivered {d.record_id} after {mine.record_id} on {where.shard_id}")
            last_of[(d.client, where.shard_id)] = d
            if d.record_id in first_seen:
                continue
            first_seen.add(d.record_id)
            before = last_first.get(where.shard_id)
            if before is not None and where.sequence_number <= placed[before.record_id].sequence_number:
                broken.append(
                    f"{d.record_id} ({d.client}) first delivered after {before.record_id} ({before.client}) "
                    f"on {where.shard_id}"
                )
            last_first[where.shard_id] = d
        return broken

    def summary(self, clients: Iterable[str]) -> str:
        """What each client delivered, what was lost and delivered twice, for a failure's message."""
        named = ", ".join(f"{c}: {self.count(c)}" for c in clients)
        return (
            f"written {len(self.placed)}; delivered by {named}; lost {len(self.lost())}; "
            f"delivered more than once {len(self.duplicates())}; strangers {len(self.strangers)}"
        )


def go_client_ids(dynamodb: Any, app: str, name: str) -> list[str]:
    """The IDs of the client rows named ``name`` in the application's clients table (a Go client's ID is a
    UUID it makes at start and writes there only)."""
    items = dynamodb.scan(TableName=f"{app}_clients", ConsistentRead=True)["Items"]
    return [item["ID"]["S"] for item in items if item.get("Name", {}).get("S") == name]


def owners(dynamodb: Any, app: str) -> dict[str, str | None]:
    """Each checkpoint row's owner (its ``OwnerID``; None when it has none, or a NULL one), by shard ID."""
    items = dynamodb.scan(TableName=f"{app}_checkpoints", ConsistentRead=True)["Items"]
    return {item["Shard"]["S"]: item.get("OwnerID", {}).get("S") for item in items}


def checkpoints(dynamodb: Any, app: str) -> dict[str, int | None]:
    """Each checkpoint row's ``SequenceNumber`` (None when it has none), by shard ID."""
    items = dynamodb.scan(TableName=f"{app}_checkpoints", ConsistentRead=True)["Items"]
    return {
        item["Shard"]["S"]: int(item["SequenceNumber"]["S"]) if "S" in item.get("SequenceNumber", {}) else None
        for item in items
    }


def names(text: str, go: GoClient, ids: Iterable[str]) -> bool:
    """``text`` names the Go client ``go``: its name, or one of its ``ids`` (:func:`go_client_ids`)."""
    return go.name in text or any(i in text for i in ids)


def says_go(text: str, go: GoClient, ids: Iterable[str]) -> bool:
    """``text`` names the Go client ``go`` (:func:`names`), or at least says a client of the Go library is there."""
    return names(text, go, ids) or re.search(r"\bGo\b", text) is not None


class GoClient:
    """One run of the interop driver (``go_client/main.go``): a client of the Go library in a child process,
    each record it delivers read off its stdout into the ledger as it comes. Its stderr goes to ``log``.
    ``records``/``after``: the driver's ``-records``/``-after`` (0: until :meth:`terminate`)."""

    def __init__(
        self,
        binary: pathlib.Path,
        kinesis: LocalServer,
        dynamodb: LocalServer,
        stream: str,
        app: str,
        name: str,
        ledger: Ledger,
        log: pathlib.Path,
        records: int = 0,
        after: str = "stop",
    ) -> None:
        self.name, self.ledger, self.log = name, ledger, log
        self.command = [
            str(binary), "-kinesis", kinesis.endpoint, "-dynamodb", dynamodb.endpoint, "-stream", stream,
            "-app", app, "-name", name, "-records", str(records), "-after", after, *GO_FLAGS,
        ]  # fmt: skip
        self.process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> GoClient:
        with self.log.open("a") as log:  # the child keeps its own copy of the descriptor
            self.process = subprocess.Popen(
                self.command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, text=True,
                env={k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
            )  # fmt: skip
        assert self.process.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self.process.stdout,), name=f"test-{self.name}")
        self._reader.start()
        return self

    def _read(self, stdout: IO[str]) -> None:
        for line in stdout:
            try:
                self.ledger.add(self.name, int(json.loads(line)["id"]))
            except (ValueError, KeyError, TypeError):
                self.ledger.stranger(f"{self.name}: {line!r}")

    def delivered(self) -> int:
        return self.ledger.count(self.name)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait(self, timeout: float) -> int:
        """Its exit code, once it exited and its output was read; fails the test after ``timeout`` s."""
        assert self.process is not None and self._reader is not None
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} did not exit within {timeout:g} s; its log:\n{self.log_tail()}"
            ) from None
        self._reader.join(timeout)
        return code

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM (the driver then calls Stop(): a clean leave) and its exit code."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def kill(self) -> float:
        """SIGKILL: a crash, no Stop(). Returns when it was sent (monotonic), once its output was read."""
        assert self.process is not None
        self.process.kill()
        killed = time.monotonic()
        self.wait(30)
        return killed

    def close(self) -> None:
        """Kill it if it still runs (the test's end), and read the rest of its output."""
        if self.running():
            self.kill()
        elif self.process is not None and self._reader is not None:
            self._reader.join(30)

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else "(no log)"


class KinsumerClient:
    """A kinsumer client in this process: a thread calling ``next_record()`` into the ledger, up to
    ``limit`` records (then it asks for no more: the last one stays in hand, and counts as processed at
    :meth:`stop`, a clean leave in auto-checkpoint mode)."""

    def __init__(
        self,
        kinesis: LocalServer,
        dynamodb: LocalServer,
        stream: str,
        app: str,
        name: str,
        config: Config,
        ledger: Ledger,
        limit: int | None = None,
    ) -> None:
        self.name, self.ledger, self.limit = name, ledger, limit
        self.kinsumer = Kinsumer(
            stream, app, name, config, kinesis=kinesis.client("kinesis"), dynamodb=dynamodb.client("dynamodb")
        )
        self.error: BaseException | None = None
        self.misplaced: list[str] = []
        self._thread = threading.Thread(target=self._consume, name=f"test-{name}", daemon=True)
        self._stopped = False

    def start(self) -> KinsumerClient:
        self.kinsumer.run()
        self._thread.start()
        return self

    def _consume(self) -> None:
        try:
            while self.limit is None or self.delivered() < self.limit:
                record = self.kinsumer.next_record()
                if record is None:
                    return
                try:
                    rid = int(json.loads(record.data)["id"])
                except (ValueError, KeyError, TypeError):
                    self.ledger.stranger(f"{self.name}: {record.data!r}")
                    continue
                self.ledger.add(self.name, rid)
                where = self.ledger.placed.get(rid)
                if where is not None and (where.shard_id, where.sequence_number) != (
                    record.shard_id, int(record.sequence_number),
                ):  # fmt: skip
                    self.misplaced.append(f"{rid}: {record.shard_id}/{record.sequence_number}, written to {where}")
        except BaseException as exc:  # reported by the test
            self.error = exc

    def delivered(self) -> int:
        return self.ledger.count(self.name)

    def captured(self) -> set[str]:
        """The shards it holds now (captured, not waiting for their previous owner)."""
        return {s.shard_id for s in self.kinsumer.status().shards if s.captured}

    def stop(self) -> None:
        """A clean stop; fails the test if it does not end, or its thread failed."""
        self.close()
        assert not self._thread.is_alive(), f"{self.name} did not stop"
        assert self.error is None, f"{self.name} failed: {self.error!r}"

    def close(self) -> None:
        """A clean stop, once (the test's end); no check."""
        if not self._stopped:
            self._stopped = True
            self.kinsumer.stop()
        if self._thread.ident is not None:
            self._thread.join(30)


def wait_for(condition: Callable[[], bool], timeout: float, what: str | Callable[[], str], *logs: GoClient) -> float:
    """Wait for ``condition`` with a deadline (:func:`~tests.helpers.wait_until`); returns how long it took.
    On a timeout the failure says ``what`` (called then, if a callable: the state at the deadline) and shows
    the logs of the Go clients ``logs``."""
    started = time.monotonic()
    try:
        wait_until(condition, timeout, "a condition")
    except AssertionError:
        said = what() if callable(what) else what
        tails = "".join(f"\n--- {g.name}'s log:\n{g.log_tail()}" for g in logs)
        raise AssertionError(f"timed out after {timeout:g} s waiting for {said}{tails}") from None
    return time.monotonic() - started


class Writer(threading.Thread):
    """Writes records in the background, ``batch`` at a time with ``pause`` s between batches (records being
    written while a client joins); :meth:`finish` waits for it and re-raises what it failed on."""

    def __init__(self, kinesis: Any, stream: str, ledger: Ledger, first_id: int, count: int, batch: int, pause: float):
        super().__init__(name="test-writer", daemon=True)
        self.kinesis, self.stream, self.ledger = kinesis, stream, ledger
        self.first_id, self.count, self.batch, self.pause = first_id, count, batch, pause
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for first in range(self.first_id, self.first_id + self.count, self.batch):
                size = min(self.batch, self.first_id + self.count - first)
                self.ledger.place(produce(self.kinesis, self.stream, first, size))
                time.sleep(self.pause)  # the pace of the writes, not a wait for a condition
        except BaseException as exc:  # reported by finish()
            self.error = exc

    def finish(self, timeout: float = 60.0) -> None:
        self.join(timeout)
        assert not self.is_alive(), "the writer did not finish"
        if self.error is not None:
            raise self.error


class Fleet:
    """The clients of one test, on its stream (kinesalite) and its application (tables on moto's server):
    started through it, each stopped at the test's end (:meth:`close`); and what the test wrote and they
    delivered (:attr:`ledger`)."""

    def __init__(
        self, binary: pathlib.Path, kinesis: LocalServer, dynamodb: LocalServer, stream: str, app: str,
        logs: pathlib.Path,
    ) -> None:  # fmt: skip
        self.binary, self.kinesis, self.dynamodb, self.stream, self.app, self.logs = (
            binary, kinesis, dynamodb, stream, app, logs,
        )  # fmt: skip
        self.ledger = Ledger()
        self.kinesis_client = kinesis.client("kinesis")
        self.dynamodb_client = dynamodb.client("dynamodb")
        self.go_clients: list[GoClient] = []
        self.kinsumer_clients: list[KinsumerClient] = []

    @property
    def shards(self) -> set[str]:
        return set(shard_hash_keys(self.kinesis_client, self.stream))

    def write(self, first_id: int, count: int) -> None:
        """Write records ``first_id`` .. ``first_id + count - 1`` now (:func:`produce`)."""
        self.ledger.place(produce(self.kinesis_client, self.stream, first_id, count))

    def write_in_background(self, first_id: int, count: int, batch: int, pause: float) -> Writer:
        writer = Writer(self.kinesis_client, self.stream, self.ledger, first_id, count, batch, pause)
        writer.start()
        return writer

    def go(self, name: str, records: int = 0, after: str = "stop") -> GoClient:
        """A Go client started on the test's stream and application (see :class:`GoClient`)."""
        client = GoClient(
            self.binary, self.kinesis, self.dynamodb, self.stream, self.app, name, self.ledger,
            self.logs / f"{name}.log", records, after,
        )  # fmt: skip
        self.go_clients.append(client)
        return client.start()

    def kinsumer(self, name: str, config: Config, limit: int | None = None, start: bool = True) -> KinsumerClient:
        """A kinsumer client on the test's stream and application, started unless ``start`` is False."""
        client = KinsumerClient(self.kinesis, self.dynamodb, self.stream, self.app, name, config, self.ledger, limit)
        self.kinsumer_clients.append(client)
        return client.start() if start else client

    def go_ids(self, go: GoClient) -> list[str]:
        return go_client_ids(self.dynamodb_client, self.app, go.name)

    def owners(self) -> dict[str, str | None]:
        return owners(self.dynamodb_client, self.app)

    def observed(self, what: str = "") -> str:
        """What the test saw, on one line (printed by the tests: shown with a failure, or with ``-rP``)."""
        clients = [c.name for c in self.go_clients] + [c.name for c in self.kinsumer_clients]
        return f"observed: {self.ledger.summary(clients)}{'; ' + what if what else ''}"

    def check(self, duplicates: set[int] | None = None) -> None:
        """Nothing lost, nothing delivered that was not written, every shard's order kept, and exactly
        ``duplicates`` delivered more than once (none by default)."""
        ledger = self.ledger
        observed = self.observed()
        assert not ledger.strangers, f"{observed}: {ledger.strangers[:5]}"
        for client in self.kinsumer_clients:
            assert not client.misplaced, f"{observed}: {client.misplaced[:5]}"
        lost = ledger.lost()
        assert not lost, f"{observed}: lost {sorted(lost)[:20]}"
        assert set(ledger.duplicates()) == (duplicates or set()), (
            f"{observed}: delivered more than once {sorted(ledger.duplicates())[:20]}, "
            f"expected {sorted(duplicates or ())[:20]}"
        )
        broken = ledger.order_violations()
        assert not broken, f"{observed}: {broken[:5]}"

    def close(self) -> None:
        """Stop every client still running: the Go clients killed, the kinsumer clients stopped."""
        for go in self.go_clients:
            go.close()
        for client in self.kinsumer_clients:
            client.close()
