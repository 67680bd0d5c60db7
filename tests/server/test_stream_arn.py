"""Streams given by ARN, over HTTP against moto's server: every Kinesis call names the stream by ARN, in the ARN's
region; the tables stay in the caller's account and region and key the stream by its name.

moto does not enforce Kinesis resource policies (its IAM checks know no resource-based policy) and serves each
request from the backend of the caller's own account. To stand for a stream another account shares, the Kinesis
calls of these tests go through a relay that serves them from the ARN's account (moto's ``x-moto-account-id``
header), and records them: what it shows is that kinsumer's calls name the stream by ARN, in the ARN's region,
with the tables elsewhere; not that AWS would authorise them.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import pathlib
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import boto3
import pytest

from demo.servers import LocalServer
from kinsumer import Kinsumer, Record, StreamNotFound
from kinsumer.dead_letter import KinesisStream
from kinsumer.failure import Failure
from kinsumer.writing.writer import RecordWriter
from tests.conftest import REGION, unique
from tests.helpers import StreamAudits, payload
from tests.relay import KinesisRelay
from tests.server.conftest import SERVER_CONFIG

pytestmark = pytest.mark.server

THEIRS = "222222222222"  # the account that owns the stream (the caller's is moto's default, 123456789012)
THEIR_REGION = "us-west-2"  # the stream's region (the caller's is REGION)
KEYS = 8
PER_KEY = 40
_REPO = pathlib.Path(__file__).resolve().parents[2]


def has_table(db: Any, name: str) -> bool:
    """Whether ``name`` is a table of ``db``'s region (the server holds more tables than a ListTables page)."""
    try:
        db.describe_table(TableName=name)
    except db.exceptions.ResourceNotFoundException:
        return False
    return True


class AccountRelay(KinesisRelay):
    """Serves every Kinesis call from ``account``'s backend, and records each (operation, signing region, body)."""

    def __init__(self, upstream: str, account: str) -> None:
        super().__init__(upstream)
        self.account = account
        self.requests: list[tuple[str, str, dict[str, Any]]] = []
        self._record_lock = threading.Lock()

    def _forward(self, headers: Any, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        operation = str(headers.get("X-Amz-Target", "")).rpartition(".")[2]
        scope = str(headers.get("Authorization", "")).split("Credential=", 1)[-1].split("/")
        with self._record_lock:
            self.requests.append((operation, scope[2] if len(scope) > 2 else "", json.loads(body or b"{}")))
        headers = {**dict(headers.items()), "x-moto-account-id": self.account}
        return super()._forward(headers, body)

    def named(self) -> list[tuple[str, str, str | None, str | None]]:
        """(operation, region, StreamName, StreamARN) of every call recorded so far."""
        with self._record_lock:
            return [(op, region, body.get("StreamName"), body.get("StreamARN")) for op, region, body in self.requests]


@attrs.frozen
class Theirs:
    relay: AccountRelay
    arn: str
    name: str

    def kinesis(self) -> Any:
        """The owner's client: its calls served from the other account, in the stream's region."""
        return boto3.client("kinesis", endpoint_url=self.relay.endpoint, region_name=THEIR_REGION)


@pytest.fixture
def theirs(moto_server: LocalServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Theirs]:
    """A 2-shard stream of another account in another region; the caller's Kinesis calls reach it through the relay
    (AWS_ENDPOINT_URL_KINESIS), its DynamoDB calls moto directly, in its own account and region."""
    with AccountRelay(moto_server.endpoint, THEIRS) as relay:
        name = unique("theirs")
        owner = boto3.client("kinesis", endpoint_url=relay.endpoint, region_name=THEIR_REGION)
        owner.create_stream(StreamName=name, ShardCount=2)
        owner.get_waiter("stream_exists").wait(StreamName=name, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})
        arn = owner.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamARN"]
        assert arn == f"arn:aws:kinesis:{THEIR_REGION}:{THEIRS}:stream/{name}"
        monkeypatch.setenv("AWS_ENDPOINT_URL_KINESIS", relay.endpoint)
        monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", moto_server.endpoint)
        relay.requests.clear()
        yield Theirs(relay, arn, name)
        owner.delete_stream(StreamName=name)


def write(kinesis: Any, stream: str, first: int = 0) -> list[int]:
    """KEYS x PER_KEY records through kinsumer's RecordWriter (``stream``: a name or an ARN); their ids."""
    writer = RecordWriter(kinesis, stream)
    ids = list(range(first, first + KEYS * PER_KEY))
    for rid in ids:
        writer.put(payload(rid, f"key-{rid % KEYS}"), f"key-{rid % KEYS}")
    writer.flush()
    return ids


def read_all(k: Kinsumer, audits: StreamAudits, total: int) -> None:
    """Run ``k`` until ``audits`` holds ``total`` records, then stop it."""
    with k:
        while audits.count() < total:
            record = k.next_record(timeout=30)
            assert isinstance(record, Record)
            audits.add("c", record)


def test_a_stream_of_another_account_and_region_is_read_by_arn_with_the_tables_in_the_callers(
    theirs: Theirs, moto_server: LocalServer
) -> None:
    produced = write(theirs.kinesis(), theirs.arn)  # the writer by ARN too
    app = unique("app")
    caller = boto3.Session(region_name=REGION)  # the caller's account (its keys) and region
    k = Kinsumer(theirs.arn, app, "c", SERVER_CONFIG, session=caller)
    k.create_required_tables()
    audits = StreamAudits([theirs.name])
    read_all(k, audits, len(produced))
    audits.assert_clean({theirs.name: produced})  # nothing lost, nothing twice, each shard in order

    calls = theirs.relay.named()
    operations = {op for op, _, _, _ in calls}
    assert {"PutRecords", "DescribeStreamSummary", "ListShards", "GetShardIterator", "GetRecords"} <= operations
    assert [c for c in calls if c[2] is not None] == []  # no call named the stream by name
    assert {arn for _, _, _, arn in calls} == {theirs.arn}  # every call by ARN, GetRecords too (beside its iterator)
    assert {region for _, region, _, _ in calls} == {THEIR_REGION}  # signed for the ARN's region
    # the tables: in the caller's region (and account), none in the stream's
    assert has_table(moto_server.client("dynamodb"), f"{app}_checkpoints")
    west = boto3.client("dynamodb", endpoint_url=moto_server.endpoint, region_name=THEIR_REGION)
    assert not has_table(west, f"{app}_checkpoints")
    rows = moto_server.client("dynamodb").scan(TableName=f"{app}_checkpoints", ConsistentRead=True)["Items"]
    assert sorted(row["Shard"]["S"] for row in rows) == ["shardId-000000000000", "shardId-000000000001"]
    # by name, the stream is not the caller's: it is not found in the caller's region
    with pytest.raises(StreamNotFound):
        Kinsumer(theirs.name, app, "c", SERVER_CONFIG, session=caller).run()
    k.delete_tables()


def test_a_name_and_an_arn_in_one_list_and_a_switch_from_name_to_arn_keep_the_checkpoints(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    kinesis = moto_server.client("kinesis")
    home, other = new_stream(2), new_stream(1)
    other_arn = kinesis.describe_stream_summary(StreamName=other)["StreamDescriptionSummary"]["StreamARN"]
    dynamodb = moto_server.client("dynamodb")
    first = {home: write(kinesis, home), other: write(kinesis, other_arn, 10_000)}
    audits = StreamAudits([home, other])
    by_name = Kinsumer([home, other], app, "c", SERVER_CONFIG, kinesis=kinesis, dynamodb=dynamodb)
    by_name.create_required_tables()
    read_all(by_name, audits, sum(map(len, first.values())))
    audits.assert_clean(first)

    second = {home: write(kinesis, home, 20_000), other: write(kinesis, other, 30_000)}
    audits = StreamAudits([home, other])
    mixed = Kinsumer([home, other_arn], app, "c", SERVER_CONFIG, kinesis=kinesis, dynamodb=dynamodb)
    assert mixed.streams == (home, other)
    read_all(mixed, audits, sum(map(len, second.values())))
    audits.assert_clean(second)  # only the records after the checkpoints: the rows of the name serve its ARN


def test_the_dead_letter_sink_puts_to_a_stream_by_arn(theirs: Theirs) -> None:
    sink = KinesisStream(theirs.arn)  # its client made in the ARN's region
    sink.check()
    now = dt.datetime.now(dt.UTC)
    sink(Failure(Record(b'{"id": 1}', "k", "49000", "shardId-000000000000", now, now), 3, "raised", "E", "clicks"))
    calls = theirs.relay.named()
    assert [(op, region, name, arn) for op, region, name, arn in calls] == [
        ("DescribeStreamSummary", THEIR_REGION, None, theirs.arn),
        ("PutRecord", THEIR_REGION, None, theirs.arn),
    ]
    owner, found = theirs.kinesis(), []  # read back by the owner, by name
    for shard in owner.list_shards(StreamName=theirs.name)["Shards"]:
        start = {"StreamName": theirs.name, "ShardId": shard["ShardId"], "ShardIteratorType": "TRIM_HORIZON"}
        found += owner.get_records(ShardIterator=owner.get_shard_iterator(**start)["ShardIterator"])["Records"]
    assert [json.loads(base64.b64decode(json.loads(r["Data"])["data"])) for r in found] == [{"id": 1}]


def test_the_command_line_produces_tails_and_shows_status_by_arn(theirs: Theirs, moto_server: LocalServer) -> None:
    env = {**os.environ, "PYTHONPATH": str(_REPO)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kinsumer", *args], check=False, capture_output=True, text=True, timeout=60,
            cwd=_REPO, env=env, input="",
        )  # fmt: skip

    wrote = run("produce", theirs.arn, "--count", "50", "--partition-keys", "5")
    assert wrote.returncode == 0, wrote.stderr
    tailed = run("tail", theirs.arn, "--from", "trim-horizon", "--json", "--count", "50")
    assert tailed.returncode == 0, tailed.stderr
    assert sorted(json.loads(json.loads(line)["data"])["id"] for line in tailed.stdout.splitlines()) == list(range(50))
    app = unique("app")
    assert run("create-tables", app).returncode == 0
    status = run("status", theirs.arn, app, "--json")
    assert status.returncode == 0, status.stderr
    assert {s["shard_id"] for s in json.loads(status.stdout)["shards"]} == {
        "shardId-000000000000", "shardId-000000000001",
    }  # fmt: skip
    bad = run("status", "arn:aws:kinesis:us-west-2:2222:stream/x", app)
    assert bad.returncode != 0 and "arn:aws:kinesis:<region>:<12-digit account id>:stream/<name>" in bad.stderr
    # none of the command line's Kinesis calls named the stream by name; every one went to the ARN's region
    calls = theirs.relay.named()
    assert calls and not [c for c in calls if c[2] is not None]
    assert {region for _, region, _, _ in calls} == {THEIR_REGION}
    assert has_table(moto_server.client("dynamodb"), f"{app}_checkpoints")


def test_enhanced_fan_out_reads_a_stream_given_by_arn(kinesis_mock: LocalServer, moto_server: LocalServer) -> None:
    """On kinesis-mock (SubscribeToShard): the consumer registered on the ARN, every record read once, in order."""
    kinesis = kinesis_mock.client("kinesis")
    stream = unique("stream")
    kinesis.create_stream(StreamName=stream, ShardCount=2)
    kinesis.get_waiter("stream_exists").wait(StreamName=stream, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})
    arn = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamARN"]
    records = [{"Data": json.dumps({"id": i}).encode(), "PartitionKey": f"key-{i % 4}"} for i in range(40)]
    kinesis.put_records(StreamARN=arn, Records=records)
    config = attrs.evolve(SERVER_CONFIG, efo_consumer_name="by-arn")
    got: list[int] = []
    k = Kinsumer(arn, unique("app"), "a", config, kinesis=kinesis, dynamodb=moto_server.client("dynamodb"))
    k.create_required_tables()
    with k:
        while len(got) < len(records):
            record = k.next_record(timeout=60)
            assert record is not None and record.stream == stream
            got.append(json.loads(record.data)["id"])
    assert sorted(got) == list(range(40))
    for key in range(4):
        of_key = [i for i in got if i % 4 == key]
        assert of_key == sorted(of_key)
    consumers = kinesis.list_stream_consumers(StreamARN=arn)["Consumers"]
    assert [c["ConsumerName"] for c in consumers] == ["by-arn"]
