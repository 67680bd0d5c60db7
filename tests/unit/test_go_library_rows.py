"""The Go library's emulation (tests/support/go_library.py) writes and reads the tables as the real Go library does.

``tests/support/go_rows.json`` is what the real twitchscience/kinsumer (9a48088) wrote and sent. It was made
once, not in CI, by building the Go library (Go 1.19, GOPATH mode against Debian's aws-sdk-go 1.44.133,
google/uuid and x/sync, as scripts/benchlib/go_contender.py builds its contender) with a throwaway driver
(NewWithInterfaces, CreateRequiredTables, Run, Next in a goroutine, Stop on request; commitFrequency 500 ms,
shardCheckFrequency 1 s, leaderActionFrequency 2 s, the default throttleDelay) and running it against moto's
server (demo.servers.moto_server) through a logging proxy, through the scenarios of this module (the same
functions, with the Go process as the contender): ``fresh`` (a 4-shard stream of 40 records read whole, the
tables dumped while it runs and after a clean Stop), ``killed`` (the same, SIGKILLed mid-read while records
keep coming) and ``split`` (a 2-shard stream whose shard 0 was split before the start, read to its end and
Finished, dropped from the shard cache by the leader, then Stop). Every item of the three tables was dumped
at each snapshot, and every request the Go process sent was logged; both are stored normalised by
:func:`normalise` (client IDs, sequence numbers, nanosecond times, RFC1123Z times, iterators and table
prefixes as placeholders). moto never ends a closed shard (its GetRecords always gives a next iterator), so
for ``split`` the proxy dropped NextShardIterator from an empty answer on the closed shard, as Kinesis
answers at a closed shard's end; here :func:`_end_closed_shards` does the same inside moto.

The tests run the emulation through the same scenarios on in-process moto and compare: each snapshot's
items must equal the fixture's (same attributes, DynamoDB types, NULLs, time units, owners, Finished); every
request the emulation sends must have the shape of one the Go library sent, and every shape the Go library
sent in the scenario the emulation must send too (but for two leader scans whose sending is a race in Go).
When the fixture was made, the emulation was also run through the proxy beside the Go process: same items,
same set of request shapes, in all three scenarios. Other tests check single writes against the fixture's
rows, and reads (UnmarshalMap) against aws-sdk-go's results and error messages.
"""

from __future__ import annotations

import base64
import contextlib
import json
import pathlib
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import boto3
import botocore.exceptions
import pytest
from moto import mock_aws
from moto.core.botocore_stubber import BotocoreStubber
from moto.kinesis.models import KinesisBackend

from tests.support import go_library as go
from tests.support.go_library import GoClient, GoConfig, GoUnmarshalError

FIXTURE = pathlib.Path(__file__).resolve().parent.parent / "support" / "go_rows.json"
REGION = "us-east-1"
#: The Go driver's configuration when the fixture was made (its throttleDelay: Go's default).
CONFIG = GoConfig(commit_frequency=0.5, shard_check_frequency=1.0, leader_action_frequency=2.0, dynamo_waiter_delay=0.1)
NAME = "go-client"
DEADLINE = 60.0  # seconds for any one condition of a scenario

Snapshot = dict[str, list[dict[str, Any]]]  # table ("clients", "checkpoints", "metadata") -> normalised items


# -- normalising: what differs from run to run becomes a placeholder ----------------------------------------------

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_RFC1123Z = re.compile(
    r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d\d:\d\d:\d\d \+0000"
)
_TABLE = re.compile(r".*_(clients|checkpoints|metadata)")
_TYPES = frozenset({"S", "N", "B", "BOOL", "NULL", "L", "M", "SS", "NS", "BS"})
_SEQUENCE_NUMBERS = frozenset({"SequenceNumber", ":sequenceNumber", "StartingSequenceNumber"})
_OPAQUE = {"ShardIterator": "<shard-iterator>", "NextToken": "<next-token>", "StreamName": "<stream>"}
_NS_FROM, _NS_TO = 10**18, 4 * 10**18  # 2001 to 2096 in nanoseconds


def _number(value: str) -> str:
    if value.isdigit() and _NS_FROM <= int(value) < _NS_TO:
        return "<unix-ns>"
    if value.isdigit() and 10**12 <= int(value) < 4 * 10**12:
        return "<unix-ms>"
    return value


def _string(value: str, context: str | None) -> str:
    if context in _SEQUENCE_NUMBERS:
        return "<sequence-number>"
    if context in _OPAQUE:
        return _OPAQUE[context]
    if context == "TableName" and (table := _TABLE.fullmatch(value)):
        return f"<app>_{table.group(1)}"
    if _UUID.fullmatch(value):
        return "<client-id>"
    if _RFC1123Z.fullmatch(value):
        return "<rfc1123z>"
    return value


def normalise(value: Any, context: str | None = None) -> Any:
    """An item or a request body with what changes from run to run as placeholders: ``<client-id>`` (a
    uuid), ``<sequence-number>``, ``<unix-ns>`` (``<unix-ms>`` would show a time in milliseconds),
    ``<rfc1123z>``, ``<shard-iterator>``, ``<stream>``, ``<app>_`` before a table name. Attribute names,
    DynamoDB types, NULLs, shard IDs, names and expressions stay."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, inner in value.items():
            if key == "N" and isinstance(inner, str):
                out[key] = _number(inner)
            else:
                out[key] = normalise(inner, context if key in _TYPES else key)
        return out
    if isinstance(value, list):
        return [normalise(inner, context) for inner in value]
    if isinstance(value, str):
        return _string(value, context)
    return value


def _sorted(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(items, key=lambda item: json.dumps(item, sort_keys=True))


def dump(db: Any, application: str) -> Snapshot:
    """Every item of the application's three tables, normalised, in a stable order."""
    tables = go.GoTables.for_application(application)
    snapshot: Snapshot = {}
    for kind, table in (
        ("clients", tables.clients),
        ("checkpoints", tables.checkpoints),
        ("metadata", tables.metadata),
    ):
        items = list(go.scan_pages(db, {"TableName": table, "ConsistentRead": True}))
        snapshot[kind] = _sorted([normalise(item) for item in items])
    return snapshot


def request_shapes(log: list[dict[str, Any]]) -> list[str]:
    """The distinct shapes of the logged requests (X-Amz-Target and normalised JSON body), sorted."""
    return sorted({json.dumps({"target": r["target"], "body": normalise(r["body"])}, sort_keys=True) for r in log})


# -- the scenarios, shared with the one-off run of the real Go library -----------------------------------------------


class Contender(Protocol):
    """A Go client under test: the real library in a process (when the fixture was made) or the emulation."""

    def start(self, stream: str, application: str) -> None:
        """CreateRequiredTables, Run, and Next in a loop on a thread of its own."""

    def read(self, count: int, timeout: float) -> None:
        """Wait until ``count`` records in all have come out of Next."""

    def stop(self) -> None: ...

    def kill(self) -> None: ...


def wait_for(what: str, condition: Callable[[], bool], timeout: float = DEADLINE) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` seconds, saying ``what`` was awaited."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def _hash_key(shard: int, shards: int) -> str:
    """An explicit hash key at the start of shard ``shard``'s range in a fresh stream of ``shards`` (moto's split)."""
    return str(shard * (2**128 // shards))


def _make_stream(kinesis: Any, stream: str, shards: int, per_shard: int) -> dict[str, str]:
    """A stream of ``shards`` shards with ``per_shard`` records each; the last sequence number of each shard."""
    kinesis.create_stream(StreamName=stream, ShardCount=shards)
    wait_for(
        "the stream",
        lambda: kinesis.describe_stream(StreamName=stream)["StreamDescription"]["StreamStatus"] == "ACTIVE",
    )
    last: dict[str, str] = {}
    for i in range(shards * per_shard):
        put = kinesis.put_record(
            StreamName=stream,
            Data=f"record-{i}".encode(),
            PartitionKey=f"k{i}",
            ExplicitHashKey=_hash_key(i % shards, shards),
        )
        last[put["ShardId"]] = put["SequenceNumber"]
    return last


def _rows(db: Any, application: str) -> dict[str, dict[str, Any]]:
    table = go.GoTables.for_application(application).checkpoints
    return {item["Shard"]["S"]: item for item in go.scan_pages(db, {"TableName": table, "ConsistentRead": True})}


def _owned(row: dict[str, Any]) -> bool:
    return "S" in row.get("OwnerID", {})


def run_fresh(kinesis: Any, db: Any, contender: Contender, name: str) -> dict[str, Snapshot]:
    """A fresh application on a 4-shard stream of 40 records: all read, the commits seen, a clean stop."""
    stream = application = name
    last = _make_stream(kinesis, stream, shards=4, per_shard=10)
    contender.start(stream, application)
    contender.read(40, DEADLINE)

    def committed() -> bool:
        rows = _rows(db, application)
        return (
            all(_owned(r) for r in rows.values()) and {s: r["SequenceNumber"].get("S") for s, r in rows.items()} == last
        )

    wait_for("every shard's last sequence number committed", committed)
    running = dump(db, application)
    contender.stop()
    return {"running": running, "stopped": dump(db, application)}


def run_killed(kinesis: Any, db: Any, contender: Contender, name: str) -> dict[str, Snapshot]:
    """The same, killed (SIGKILL) while it reads records still being put, once every shard has a commit."""
    stream = application = name
    _make_stream(kinesis, stream, shards=4, per_shard=10)
    contender.start(stream, application)
    done = threading.Event()

    def produce() -> None:
        i = 0
        while not done.wait(0.05):
            kinesis.put_record(StreamName=stream, Data=b"more", PartitionKey="k", ExplicitHashKey=_hash_key(i % 4, 4))
            i += 1

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        contender.read(40, DEADLINE)
        wait_for(
            "a committed sequence number on every shard",
            lambda: (
                len(rows := _rows(db, application)) == 4
                and all(_owned(r) and "S" in r["SequenceNumber"] for r in rows.values())
            ),
        )
        contender.kill()
    finally:
        done.set()
        producer.join()
    return {"killed": dump(db, application)}


def run_split(
    kinesis: Any, db: Any, contender: Contender, name: str, end_closed_shards: Callable[[set[str]], None]
) -> dict[str, Snapshot]:
    """A 2-shard stream of 20 records whose shard 0 is split before the start: the closed shard read to its
    end and Finished, then dropped from the shard cache by the leader; then a clean stop."""
    stream = application = name
    _make_stream(kinesis, stream, shards=2, per_shard=10)
    parent = "shardId-000000000000"
    kinesis.split_shard(StreamName=stream, ShardToSplit=parent, NewStartingHashKey=str(2**126))
    end_closed_shards({parent})
    contender.start(stream, application)
    contender.read(20, DEADLINE)
    metadata = go.GoTables.for_application(application).metadata

    def settled() -> bool:
        rows = _rows(db, application)
        cache = go.read_shard_cache(
            db.get_item(TableName=metadata, ConsistentRead=True, Key={"Key": {"S": "ShardCache"}}).get("Item")
        )
        others = [row for shard, row in rows.items() if shard != parent]
        return (
            parent in rows
            and "N" in rows[parent].get("Finished", {})
            and not _owned(rows[parent])
            and cache.shard_ids is not None
            and parent not in cache.shard_ids
            and len(others) == 3
            and all(_owned(r) and int(r["LastUpdate"]["N"]) > cache.last_update for r in others)
        )

    wait_for("the closed shard Finished, dropped from the cache, the others captured again", settled)
    finished = dump(db, application)
    contender.stop()
    return {"finished": finished, "stopped": dump(db, application)}


# -- the emulation as a contender, on in-process moto -------------------------------------------------------------


class Emulated:
    """:class:`GoClient` as a :class:`Contender`, on boto3 clients of its own whose requests are logged
    (X-Amz-Target and JSON body, as the proxy logged the Go process's)."""

    def __init__(self, endpoint: str | None = None) -> None:
        self.log: list[dict[str, Any]] = []
        self.kinesis = self._client("kinesis", endpoint)
        self.db = self._client("dynamodb", endpoint)
        self.client: GoClient | None = None
        self.count = 0
        self.errors: list[BaseException] = []
        self._reader: threading.Thread | None = None

    def _client(self, service: str, endpoint: str | None) -> Any:
        client = boto3.client(service, region_name=REGION, endpoint_url=endpoint)  # type: ignore[call-overload]
        client.meta.events.register("before-send", self._record)
        return client

    def _record(self, request: Any, **_: Any) -> None:
        body = request.body
        self.log.append(
            {"target": request.headers.get("X-Amz-Target", b"").decode(), "body": json.loads(body) if body else None}
        )

    def start(self, stream: str, application: str) -> None:
        self.client = GoClient(stream, application, NAME, kinesis=self.kinesis, dynamodb=self.db, config=CONFIG)
        self.client.create_required_tables()
        self.client.run()
        self._reader = threading.Thread(target=self._read_all, args=(self.client,), daemon=True)
        self._reader.start()

    def _read_all(self, client: GoClient) -> None:
        while True:
            try:
                data = client.next(0.5)
            except TimeoutError:
                continue
            except go.GoKilled:
                return
            except go.GoError as exc:
                self.errors.append(exc)
                continue
            if data is None:
                return
            self.count += 1

    def read(self, count: int, timeout: float) -> None:
        wait_for(f"{count} records from Next", lambda: self.count >= count, timeout)

    def stop(self) -> None:
        assert self.client is not None
        self.client.stop(timeout=DEADLINE)
        self._join_reader()

    def kill(self) -> None:
        assert self.client is not None
        self.client.kill()
        self._join_reader()

    def _join_reader(self) -> None:
        assert self._reader is not None
        self._reader.join(DEADLINE)
        assert not self._reader.is_alive()
        assert self.client is not None
        assert self.client.running_threads == [], self.client.running_threads
        assert self.client.failures == []


#: moto's in-process backends take no lock, and the emulation calls them from several threads: one request
#: at a time, as AWS handles each whole (as tests/aws/conftest.py does).
_ONE_AT_A_TIME = threading.Lock()


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    process = BotocoreStubber.process_request

    def serialised(self: BotocoreStubber, request: Any) -> Any:
        with _ONE_AT_A_TIME:
            return process(self, request)

    monkeypatch.setattr(BotocoreStubber, "process_request", serialised)
    with mock_aws():
        yield


@pytest.fixture
def kinesis(aws: None) -> Any:
    return boto3.client("kinesis", region_name=REGION)


@pytest.fixture
def db(aws: None) -> Any:
    return boto3.client("dynamodb", region_name=REGION)


@contextlib.contextmanager
def _closed_shards_end(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[set[str]], None]]:
    """moto's GetRecords made to end a closed shard: no next iterator once nothing is left on a shard
    given to the returned function (the fixture's proxy did this for the Go process)."""
    closed: set[str] = set()
    original = KinesisBackend.get_records

    def get_records(self: KinesisBackend, stream_arn: str | None, shard_iterator: str, limit: int | None) -> Any:
        following, records, behind = original(self, stream_arn, shard_iterator, limit)
        shard = base64.decodebytes(shard_iterator.encode()).decode().split(":")[1]
        return (None if shard in closed and not records else following), records, behind

    monkeypatch.setattr(KinesisBackend, "get_records", get_records)
    yield closed.update


@pytest.fixture(scope="module")
def fixture() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())  # type: ignore[no-any-return]


def _shapes(requests: list[dict[str, Any]]) -> set[str]:
    return {json.dumps(request, sort_keys=True) for request in requests}


def _racy(shape: str) -> bool:
    """A request the leader's first ``performLeaderActions`` sends only if its GetItem of the shard cache
    comes before the main loop's first PutItem of it (a race between two goroutines, leader.go and
    kinsumer.go ``refreshShards``), and later only once the cache is leaderActionFrequency old: the Scan of
    the checkpoints (``loadCheckpoints``) and the reaping Scan of the clients (``reapClients``)."""
    body = json.loads(shape)["body"]
    return body.get("FilterExpression") == "LastUpdate < :cutoff" or (
        str(body.get("TableName", "")).endswith("_checkpoints") and json.loads(shape)["target"].endswith(".Scan")
    )


def _check(scenario: str, snapshots: dict[str, Snapshot], emulated: Emulated, fixture: dict[str, Any]) -> None:
    """The emulation's snapshots equal the Go library's; each request it sent has the shape of one the Go
    library sent (in any scenario: which shard a commit lands on first is timing), and each shape the Go
    library sent in this scenario the emulation sent too, but for :func:`_racy` ones."""
    expected = fixture["scenarios"][scenario]
    for moment, snapshot in snapshots.items():
        for table, items in snapshot.items():
            assert items == expected["snapshots"][moment][table], f"{scenario}/{moment}: {table}"
    assert emulated.errors == []
    sent = set(request_shapes(emulated.log))
    go_sent = set().union(*(_shapes(s["requests"]) for s in fixture["scenarios"].values()))
    unknown = sorted(sent - go_sent)
    assert unknown == [], f"{scenario}: requests the Go library never sent:\n" + "\n".join(unknown)
    missing = sorted(shape for shape in _shapes(expected["requests"]) - sent if not _racy(shape))
    assert missing == [], f"{scenario}: requests the Go library sent and the emulation did not:\n" + "\n".join(missing)


# -- the scenarios against the fixture --------------------------------------------------------------------------


def test_fresh_application_rows_match_the_go_library(kinesis: Any, db: Any, fixture: dict[str, Any]) -> None:
    emulated = Emulated()
    snapshots = run_fresh(kinesis, db, emulated, "gorows-fresh")
    _check("fresh", snapshots, emulated, fixture)


def test_killed_client_rows_match_the_go_library(kinesis: Any, db: Any, fixture: dict[str, Any]) -> None:
    emulated = Emulated()
    snapshots = run_killed(kinesis, db, emulated, "gorows-killed")
    _check("killed", snapshots, emulated, fixture)
    # kill() returned once every thread of the client had ended (Emulated.kill checks): none is left to write
    assert emulated.client is not None
    assert emulated.client.killed
    with pytest.raises(go.GoKilled):
        emulated.client.next(0)


def test_split_shard_rows_match_the_go_library(
    kinesis: Any, db: Any, fixture: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    emulated = Emulated()
    with _closed_shards_end(monkeypatch) as end_closed_shards:
        snapshots = run_split(kinesis, db, emulated, "gorows-split", end_closed_shards)
    _check("split", snapshots, emulated, fixture)


# -- single writes and reads, as Go makes them ---------------------------------------------------------------------


def _table(db: Any, name: str, key: str) -> None:
    db.create_table(
        TableName=name, KeySchema=[{"AttributeName": key, "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST",
    )  # fmt: skip


def test_single_writes_make_the_go_librarys_rows(db: Any, fixture: dict[str, Any]) -> None:
    """capture, commit (Finished too), release, register_client, register_leadership, deregister_leadership and
    set_cached_shard_ids each leave a row the real library left in one of the fixture's snapshots."""
    tables = go.GoTables.for_application("single")
    _table(db, tables.checkpoints, "Shard")
    _table(db, tables.clients, "ID")
    _table(db, tables.metadata, "Key")

    def any_shard(item: dict[str, Any]) -> str:  # which shard the fixture's row was on does not matter here
        return json.dumps({**item, "Shard": {"S": "<shard>"}} if "Shard" in item else item, sort_keys=True)

    seen = {
        table: [
            any_shard(item) for s in fixture["scenarios"].values() for m in s["snapshots"].values() for item in m[table]
        ]
        for table in ("clients", "checkpoints", "metadata")
    }

    def row(table: str, key: dict[str, Any], name: str) -> None:
        item = normalise(db.get_item(TableName=name, Key=key, ConsistentRead=True)["Item"])
        assert any_shard(item) in seen[table], item

    shard = "shardId-000000000001"
    owner = "0b7c3f4e-8a51-4f0e-9a36-1d2b3c4d5e6f"
    checkpointer = go.capture(db, tables.checkpoints, shard, NAME, owner, CONFIG.max_age_for_client_record_ns)
    assert checkpointer is not None
    row("checkpoints", {"Shard": {"S": shard}}, tables.checkpoints)  # owned, never read: SequenceNumber NULL
    assert go.capture(db, tables.checkpoints, shard, NAME, "another", CONFIG.max_age_for_client_record_ns) is None
    checkpointer.update("49590338271490256608559692538361571095921575989136588898")
    assert checkpointer.commit() is False
    row("checkpoints", {"Shard": {"S": shard}}, tables.checkpoints)  # owned, read
    checkpointer.release()
    row("checkpoints", {"Shard": {"S": shard}}, tables.checkpoints)  # released
    assert go.capture(db, tables.checkpoints, shard, NAME, owner, CONFIG.max_age_for_client_record_ns) is not None
    go.commit(
        db,
        tables.checkpoints,
        shard,
        owner,
        NAME,
        "49590338271490256608559692538361571095921575989136588898",
        finished=True,
    )
    go.release(db, tables.checkpoints, shard, owner, "49590338271490256608559692538361571095921575989136588898")
    row("checkpoints", {"Shard": {"S": shard}}, tables.checkpoints)  # Finished, released

    go.register_client(db, tables.clients, owner, NAME)
    row("clients", {"ID": {"S": owner}}, tables.clients)
    assert go.register_leadership(db, tables.metadata, owner, NAME, CONFIG.max_age_for_leader_record_ns)
    row("metadata", {"Key": {"S": "Leader"}}, tables.metadata)
    assert not go.register_leadership(db, tables.metadata, "another", NAME, CONFIG.max_age_for_leader_record_ns)
    go.deregister_leadership(db, tables.metadata, owner)
    row("metadata", {"Key": {"S": "Leader"}}, tables.metadata)
    go.set_cached_shard_ids(
        db,
        tables.metadata,
        ["shardId-000000000000", "shardId-000000000001", "shardId-000000000002", "shardId-000000000003"],
    )
    row("metadata", {"Key": {"S": "ShardCache"}}, tables.metadata)


def test_marshalling_follows_dynamodbattribute() -> None:
    assert go.go_string("") == {"NULL": True}
    assert go.go_string(None) == {"NULL": True}
    assert go.go_string("x") == {"S": "x"}
    assert go.go_int64(None) == {"NULL": True}
    assert go.go_int64(-5) == {"N": "-5"}
    assert go.go_string_slice([]) == {"NULL": True}
    assert go.go_string_slice(["a", ""]) == {"L": [{"S": "a"}, {"NULL": True}]}
    assert go.rfc1123z(0) == "Thu, 01 Jan 1970 00:00:00 +0000"
    assert go.rfc1123z(1_700_000_000_999_999_999) == "Tue, 14 Nov 2023 22:13:20 +0000"


def test_reads_accept_what_go_accepts() -> None:
    record = go.read_checkpoint({
        "Shard": {"S": "s"}, "SequenceNumber": {"N": "12"}, "LastUpdate": {"N": "+7"}, "OwnerID": {"S": ""},
        "Finished": {"NULL": True}, "ownername": {"S": "folded"}, "Extra": {"BOOL": True},
    })  # fmt: skip
    # an N into a string is its digits; "" into *string is a non-nil pointer; names match case-insensitively
    assert record == go.CheckpointRecord(
        shard="s", sequence_number="12", last_update=7, owner_id="", owner_name="folded"
    )
    assert go.read_checkpoint(None) == go.CheckpointRecord()
    assert go.read_shard_cache({"ShardIDs": {"SS": ["a", "b"]}}).shard_ids == ("a", "b")
    assert go.read_shard_cache({"ShardIDs": {"S": "a"}}).shard_ids is None  # decodeString ignores a []string
    assert go.read_shard_cache({"ShardIDs": {"L": [{"S": "a"}, {"NULL": True}]}}).shard_ids == ("a", "")
    assert go.read_client({"ID": {"S": "c"}, "LastUpdate": {"N": "1"}}) == go.ClientRecord(id="c", last_update=1)


@pytest.mark.parametrize(
    ("read", "item", "message"),
    [
        (go.read_checkpoint, {"Finished": {"BOOL": True}}, "cannot unmarshal bool into Go value of type int64"),
        (go.read_checkpoint, {"LastUpdate": {"S": "1"}}, "cannot unmarshal string into Go value of type int64"),
        (go.read_checkpoint, {"LastUpdate": {"N": "1.5"}}, 'parsing "1.5": invalid syntax'),
        (go.read_checkpoint, {"LastUpdate": {"N": str(2**63)}}, "value out of range"),
        (go.read_checkpoint, {"OwnerID": {"BOOL": False}}, "cannot unmarshal bool into Go value of type string"),
        (go.read_checkpoint, {"SequenceNumber": {"M": {}}}, "cannot unmarshal map into Go value of type string"),
        (go.read_client, {"Name": {"L": []}}, "cannot unmarshal list into Go value of type string"),
        (go.read_client, {"LastUpdate": {"NS": ["1"]}}, "cannot unmarshal number set into Go value of type int64"),
        (go.read_shard_cache, {"ShardIDs": {"N": "1"}}, "cannot unmarshal number into Go value of type []string"),
        (
            go.read_shard_cache,
            {"ShardIDs": {"L": [{"BOOL": True}]}},
            "cannot unmarshal bool into Go value of type string",
        ),
        (go.read_shard_cache, {"ShardIDs": {"BS": [b"x"]}}, "cannot unmarshal binary into Go value of type string"),
    ],
)
def test_reads_fail_where_go_fails(
    read: Callable[[dict[str, Any]], object], item: dict[str, Any], message: str
) -> None:
    with pytest.raises(GoUnmarshalError, match=re.escape(message)):
        read(item)


def test_a_row_go_cannot_read_stops_its_consumer(kinesis: Any, db: Any) -> None:
    """capture's GetItem of a row Go cannot unmarshal is a shard error from Next, and the shard is not read."""
    kinesis.create_stream(StreamName="unreadable", ShardCount=1)
    client = GoClient("unreadable", "unreadable", NAME, kinesis=kinesis, dynamodb=db, config=CONFIG)
    client.create_required_tables()
    shard = "shardId-000000000000"
    db.put_item(
        TableName=client.tables.checkpoints,
        Item={"Shard": {"S": shard}, "LastUpdate": {"N": "1"}, "Finished": {"BOOL": True}},
    )
    client.run()
    # the leader's Scan of the checkpoints (leader.go performLeaderActions) fails on the row too, first or not
    leader = "error performing initial leader actions: error loading shard IDs from dynamo: "
    consumer = "shard error (shardId-000000000000) in captureShard: "
    expected = "UnmarshalTypeError: cannot unmarshal bool into Go value of type int64"
    try:
        seen: list[str] = []
        while consumer + expected not in seen:
            with pytest.raises(go.GoError) as raised:
                client.next(DEADLINE)
            assert isinstance(raised.value.root_cause, GoUnmarshalError)
            seen.append(str(raised.value))
        assert set(seen) <= {leader + expected, consumer + expected}
        wait_for("the consumer to end", lambda: not any("consume" in t for t in client.running_threads))
    finally:
        client.stop(timeout=DEADLINE)
    assert db.get_item(TableName=client.tables.checkpoints, Key={"Shard": {"S": shard}})["Item"]["Finished"] == {
        "BOOL": True
    }
    with pytest.raises(botocore.exceptions.ClientError):
        go.commit(db, client.tables.checkpoints, shard, client.client_id, NAME, "1")  # never captured: not the owner
