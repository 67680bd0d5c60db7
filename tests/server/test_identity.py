"""A fixed client_id held by another live process: refused at run(), or, taken over later, fatal."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from demo.servers import LocalServer
from kinsumer import ClientIdInUse, Kinsumer
from tests.server.conftest import SERVER_CONFIG

pytestmark = pytest.mark.server


def consumer(server: LocalServer, stream: str, app: str, client_id: str) -> Kinsumer:
    config = attrs.evolve(SERVER_CONFIG, client_id=client_id)
    return Kinsumer(stream, app, "n", config, kinesis=server.client("kinesis"), dynamodb=server.client("dynamodb"))


def put_row(server: LocalServer, app: str, client_id: str, host: str, pid: int, age: float) -> None:
    """A heartbeat row as another process writes it, ``age`` seconds old."""
    server.client("dynamodb").put_item(
        TableName=f"{app}_clients",
        Item={
            "ID": {"S": client_id},
            "Name": {"S": "other"},
            "LastUpdate": {"N": str(int((time.time() - age) * 1000))},
            "Host": {"S": host},
            "Pid": {"N": str(pid)},
            "Instance": {"S": "another-instance"},
        },
    )


def row(server: LocalServer, app: str, client_id: str) -> dict[str, Any]:
    item = server.client("dynamodb").get_item(
        TableName=f"{app}_clients", Key={"ID": {"S": client_id}}, ConsistentRead=True
    )
    return dict(item.get("Item", {}))


def test_run_refuses_a_client_id_another_host_heartbeats_with(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(1)
    put_row(moto_server, app, "fixed", "other-host", 4242, age=0.5)
    k = consumer(moto_server, stream, app, "fixed")
    with pytest.raises(ClientIdInUse) as info:
        k.run()
    assert (info.value.client_id, info.value.host, info.value.pid) == ("fixed", "other-host", 4242)
    assert "host 'other-host', pid 4242" in str(info.value) and "client_record_max_age" in str(info.value)
    assert row(moto_server, app, "fixed")["Host"] == {"S": "other-host"}  # its row is left as it was


def test_run_takes_a_stale_row_of_its_client_id(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(1)
    put_row(moto_server, app, "fixed", "other-host", 4242, age=60)  # older than client_record_max_age
    k = consumer(moto_server, stream, app, "fixed")
    k.run()
    try:
        assert row(moto_server, app, "fixed")["Host"] != {"S": "other-host"}
    finally:
        k.stop()


def test_two_consumers_of_one_process_cannot_share_a_client_id(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(1)
    first = consumer(moto_server, stream, app, "fixed")
    first.run()
    try:
        with pytest.raises(ClientIdInUse):
            consumer(moto_server, stream, app, "fixed").run()
        assert first.status().state == "running"
    finally:
        first.stop()
    again = consumer(moto_server, stream, app, "fixed")  # once the first stopped, the id is free
    again.run()
    again.stop()


def test_a_client_whose_row_another_process_took_stops_with_client_id_in_use(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    """As if this client was paused past its max age and a second process with its id started meanwhile."""
    stream = new_stream(1)
    k = consumer(moto_server, stream, app, "fixed")
    k.run()
    try:
        put_row(moto_server, app, "fixed", "other-host", 4242, age=0)
        with pytest.raises(ClientIdInUse, match="was taken over by another process"):
            k.next(timeout=30)  # the next heartbeat (every 0.5 s) finds the row taken
    finally:
        k.stop()
    assert row(moto_server, app, "fixed")["Host"] == {"S": "other-host"}  # the stop left the other's row alone
