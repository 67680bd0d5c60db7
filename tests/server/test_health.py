"""``/healthz`` and ``/readyz`` of a running client on moto's server: liveness turns 503 while a handler
call hangs past its timeout, or while the heartbeat is blocked, and 200 again after; readiness waits
for ``run()`` and a captured shard; ``stop()`` closes the server."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest

from demo.servers import LocalServer
from kinsumer import Kinsumer, Record
from kinsumer.health import HealthServer
from tests.helpers import wait_until
from tests.server.conftest import SERVER_CONFIG

pytestmark = pytest.mark.server


def status_of(server: HealthServer, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(server.url + path, timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def codes(server: HealthServer, path: str) -> tuple[int, list[str]]:
    status, body = status_of(server, path)
    return status, [reason["code"] for reason in body["reasons"]]


def wait_for(server: HealthServer, path: str, status: int, what: str, timeout: float = 15) -> None:
    wait_until(lambda: status_of(server, path)[0] == status, timeout, what, poll=0.1)


@pytest.fixture
def client(moto_server: LocalServer, new_stream: Callable[[int], str], app: str) -> Iterator[Kinsumer]:
    stream = new_stream(1)
    k = Kinsumer(stream, app, "w1", SERVER_CONFIG, kinesis=moto_server.client("kinesis"),
                 dynamodb=moto_server.client("dynamodb"))  # fmt: skip
    try:
        yield k
    finally:
        k.stop()


class Hangs:
    """A handler whose first call hangs until released; the others return at once."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, record: Record) -> None:
        with self.lock:
            self.calls += 1
            first = self.calls == 1
        if first:
            self.release.wait(60)


def test_healthz_is_503_while_a_handler_hangs_past_its_timeout_and_200_after(client: Kinsumer) -> None:
    server = client.serve_health(port=0)
    assert codes(server, "/readyz") == (503, ["not_started"])
    assert status_of(server, "/healthz")[0] == 200  # not started yet is no reason to restart
    client.run()
    wait_for(server, "/readyz", 200, "readiness once a shard is captured")
    hangs = Hangs()
    processing = threading.Thread(target=client.process, args=(hangs,), kwargs={"timeout": 0.5}, daemon=True)
    processing.start()
    try:
        assert client._kinesis.put_record(StreamName=client.stream_name, Data=b"x", PartitionKey="k")
        wait_for(server, "/healthz", 503, "liveness to fail on the hung handler call")
        status, reasons = codes(server, "/healthz")
        assert status == 503 and reasons == ["handler_stuck"]
        assert not client.health().live
        hangs.release.set()  # the call returns (late: ignored)
        wait_for(server, "/healthz", 200, "liveness once the call returned")
        assert client.health().live
    finally:
        hangs.release.set()
        client.stop()
        processing.join(30)
    assert not processing.is_alive()
    with pytest.raises(urllib.error.URLError):  # stop() closed the server
        urllib.request.urlopen(server.url + "/healthz", timeout=2)


class HeartbeatGate:
    """Holds the heartbeats (PutItem on the clients table) while closed, as a DynamoDB cut off would."""

    def __init__(self, dynamodb: Any, table: str) -> None:
        self.table = table
        self.open = threading.Event()
        self.open.set()
        self.held = 0
        dynamodb.meta.events.register("before-send.dynamodb.PutItem", self._before_send)

    def _before_send(self, request: Any, **_: Any) -> None:
        if json.loads(request.body or b"{}").get("TableName") == self.table and not self.open.is_set():
            self.held += 1
            self.open.wait(60)


def test_healthz_is_503_while_the_heartbeat_is_blocked_and_200_after(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    dynamodb = moto_server.client("dynamodb")
    gate = HeartbeatGate(dynamodb, f"{app}_clients")
    k = Kinsumer(new_stream(1), app, "w1", SERVER_CONFIG, kinesis=moto_server.client("kinesis"), dynamodb=dynamodb)
    with HealthServer(k.health) as server:  # a server of one's own: closed by its with block
        try:
            k.run()
            wait_for(server, "/readyz", 200, "readiness once a shard is captured")
            gate.open.clear()
            blocked = time.monotonic()
            wait_for(server, "/healthz", 503, "liveness to fail on the late heartbeat")
            late = time.monotonic() - blocked
            assert codes(server, "/healthz") == (503, ["heartbeat_late"]) and gate.held >= 1
            assert late >= 2 * SERVER_CONFIG.shard_check_frequency  # not before the heartbeat is late
            gate.open.set()
            wait_for(server, "/healthz", 200, "liveness once heartbeats land again")
            wait_for(server, "/readyz", 200, "readiness again")
        finally:
            gate.open.set()
            k.stop()
        assert codes(server, "/healthz") == (503, ["stopped"])  # not closed by stop(): not made by k


def test_readyz_is_503_while_a_shard_is_behind_max_healthy_lag(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(1)
    kinesis = moto_server.client("kinesis")
    kinesis.put_record(StreamName=stream, Data=b"old", PartitionKey="k")
    config = attrs.evolve(SERVER_CONFIG, manual_checkpointing=True, max_healthy_lag=1.0)
    k = Kinsumer(stream, app, "w1", config, kinesis=kinesis, dynamodb=moto_server.client("dynamodb"))
    k.run()
    try:
        server = k.serve_health()
        _, checkpoint = k.next_with_checkpointer(timeout=30)  # held, not checkpointed: it ages
        assert checkpoint is not None
        wait_until(lambda: codes(server, "/readyz") == (503, ["lag"]), 15, "readiness to fail on the lag", poll=0.1)
        _, body = status_of(server, "/readyz")
        assert [(r["code"], r["shard"]) for r in body["reasons"]] == [("lag", checkpoint.shard_id)]
        assert body["live"] and status_of(server, "/healthz")[0] == 200  # lag is no reason to restart
        checkpoint()
        wait_for(server, "/readyz", 200, "readiness once the record is done")
    finally:
        k.stop()
