"""The test servers' moto makes each DynamoDB request atomic, as DynamoDB is.

moto's own server handles requests on threads without a lock, and two conditional writes to a new
item can both pass ``attribute_not_exists``: CI once saw two clients capture one shard in the same
millisecond. Here moto's real application races conditional writes from several threads, with the
interpreter switching threads as often as it can, and every key must have exactly one winner.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections import Counter
from collections.abc import Iterator

import pytest
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.test import Client

from demo import servers
from demo.atomic_moto import SerialServices

pytestmark = pytest.mark.server

KEYS = 60
RACERS = 4
HEADERS = {"Authorization": "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/dynamodb/aws4_request"}


def call(client: Client, operation: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    response = client.post(
        "/",
        data=json.dumps(body),
        headers={
            **HEADERS,
            "X-Amz-Target": f"DynamoDB_20120810.{operation}",
            "Content-Type": "application/x-amz-json-1.0",
        },
    )
    return response.status_code, json.loads(response.get_data() or b"{}")


@pytest.fixture
def switching_often() -> Iterator[None]:
    """Threads switch every microsecond: moto's gap between a condition and its write shows up."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def test_racing_conditional_writes_have_one_winner_per_key(switching_often: None) -> None:
    app = SerialServices(DomainDispatcherApplication(create_backend_app))
    table = f"race-{threading.get_ident()}"
    status, made = call(
        Client(app),
        "CreateTable",
        {
            "TableName": table,
            "KeySchema": [{"AttributeName": "K", "KeyType": "HASH"}],
            "AttributeDefinitions": [{"AttributeName": "K", "AttributeType": "S"}],
            "BillingMode": "PAY_PER_REQUEST",
        },
    )
    assert status == 200, made
    wins: Counter[int] = Counter()
    refused: Counter[int] = Counter()
    start = threading.Barrier(RACERS)
    counting = threading.Lock()

    def race(me: str) -> None:
        client = Client(app)
        start.wait()
        for key in range(KEYS):
            status, answer = call(
                client,
                "UpdateItem",
                {
                    "TableName": table,
                    "Key": {"K": {"S": str(key)}},
                    "UpdateExpression": "SET O = :me",
                    "ConditionExpression": "attribute_not_exists(O)",
                    "ExpressionAttributeValues": {":me": {"S": me}},
                },
            )
            assert status == 200 or "ConditionalCheckFailed" in str(answer.get("__type")), answer
            with counting:
                (wins if status == 200 else refused)[key] += 1

    racers = [threading.Thread(target=race, args=(f"racer-{i}",)) for i in range(RACERS)]
    for thread in racers:
        thread.start()
    for thread in racers:
        thread.join()
    assert dict(wins) == dict.fromkeys(range(KEYS), 1)
    assert dict(refused) == dict.fromkeys(range(KEYS), RACERS - 1)


def test_a_client_stalled_mid_request_holds_up_no_other_client() -> None:
    """A client paused (SIGSTOP) after sending half a request must not hold the DynamoDB lock: the
    server reads the whole body before it takes it."""
    with servers.moto_server() as server:
        host, port = server.endpoint.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as stalled:
            stalled.sendall(
                b"POST / HTTP/1.1\r\nHost: localhost\r\nX-Amz-Target: DynamoDB_20120810.ListTables\r\n"
                + b"Authorization: " + HEADERS["Authorization"].encode() + b"\r\n"
                + b"Content-Type: application/x-amz-json-1.0\r\nContent-Length: 100\r\n\r\n{\"Lim"
            )  # fmt: skip
            other = server.client("dynamodb", read_timeout=10, retries={"total_max_attempts": 1})
            assert isinstance(other.list_tables()["TableNames"], list)  # answered while the first one stalls
