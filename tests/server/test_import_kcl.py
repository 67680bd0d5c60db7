"""``kinsumer import-kcl`` on moto's server: a KCL lease table as KCL left it, the command as documented, then a
kinsumer client that goes on exactly after each KCL checkpoint (nothing lost, nothing read twice)."""

from __future__ import annotations

import datetime as dt
import json
import pathlib
import re
import shlex
import threading
from collections.abc import Callable, Iterable
from typing import Any

import botocore.client
import pytest

from demo.aggregation import aggregated_entries
from demo.servers import LocalServer
from kinsumer.cli import main
from kinsumer.coordination import metadata_table
from tests.conftest import unique
from tests.helpers import Audit, payload, shard_hash_keys, wait_until
from tests.reshard import new_stream as new_kinesalite_stream
from tests.reshard import split_first, wait_active
from tests.server.conftest import Worker
from tests.unit.test_kcl_leases import kcl_lease_item

pytestmark = pytest.mark.server

REPO = pathlib.Path(__file__).resolve().parents[2]
FAILOVER = "0.3"  # seconds between the two reads of the lease table (KCL's default is 10)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """The command as a user runs it: its exit code, what it printed and its errors."""
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def import_kcl(
    server: LocalServer, capsys: pytest.CaptureFixture[str], *argv: str, failover: str = FAILOVER
) -> tuple[int, str, str]:
    return run(capsys, "import-kcl", *argv, "--failover-time", failover, "--endpoint-url", server.endpoint)


def documented_commands() -> list[str]:
    """The commands of the KCL section of docs/moving-to-kinsumer.md, in order."""
    page = (REPO / "docs" / "moving-to-kinsumer.md").read_text()
    section = page[page.index("## From KCL and kclpy") :]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block is not None, "the KCL section has no shell block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def documented_policy_actions() -> set[str]:
    page = (REPO / "docs" / "moving-to-kinsumer.md").read_text()
    section = page[page.index("## From KCL and kclpy") :]
    block = re.search(r"```json\n(.*?)```", section, re.DOTALL)
    assert block is not None, "the KCL section has no IAM policy"
    return {action for statement in json.loads(block.group(1))["Statement"] for action in statement["Action"]}


def create_lease_table(dynamodb: Any, name: str, items: Iterable[dict[str, Any]]) -> None:
    """A lease table as KCL creates it (``leaseKey``, a string hash key), holding ``items``."""
    dynamodb.create_table(
        TableName=name, KeySchema=[{"AttributeName": "leaseKey", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "leaseKey", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST",
    )  # fmt: skip
    for item in items:
        dynamodb.put_item(TableName=name, Item=item)


def put(kinesis: Any, stream: str, entries: list[dict[str, Any]]) -> list[str]:
    """PutRecords ``entries``; their sequence numbers, in order."""
    answer = kinesis.put_records(StreamName=stream, Records=entries)
    assert answer["FailedRecordCount"] == 0
    return [record["SequenceNumber"] for record in answer["Records"]]


def plain(ids: Iterable[int], shard_id: str, keys: dict[str, str]) -> list[dict[str, Any]]:
    """Plain records of ``ids`` to ``shard_id`` (``keys``: an explicit hash key inside each open shard)."""
    return [{"Data": payload(i, shard_id), "PartitionKey": shard_id, "ExplicitHashKey": keys[shard_id]} for i in ids]


def rows(dynamodb: Any, app: str) -> dict[str, dict[str, Any]]:
    return {item["Shard"]["S"]: item for item in dynamodb.scan(TableName=f"{app}_checkpoints")["Items"]}


def test_an_application_moves_from_kcl_as_documented_and_kinsumer_goes_on_exactly_after_each_checkpoint(
    moto_server: LocalServer,
    new_stream: Callable[[int], str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kinesis, dynamodb = moto_server.client("kinesis"), moto_server.client("dynamodb")
    stream, app, lease_table = new_stream(4), unique("app"), unique("kcl")
    keys = shard_hash_keys(kinesis, stream)
    s0, s1, s2, s3 = sorted(keys)
    # What KCL read: a prefix of each shard. Shard 1 holds KPL aggregates of 4 user records (ids 100-111).
    put(kinesis, stream, plain(range(5), s0, keys))
    users = [(s1, payload(i, s1), keys[s1]) for i in range(100, 112)]
    aggregates = put(kinesis, stream, list(aggregated_entries(users, per_record=4)))
    put(kinesis, stream, plain(range(200, 205), s2, keys))
    third = put(kinesis, stream, plain(range(300, 305), s3, keys))
    create_lease_table(dynamodb, lease_table, [
        kcl_lease_item(s0, "TRIM_HORIZON", owner="kcl-worker-2", counter=4),  # never checkpointed
        kcl_lease_item(s1, aggregates[1], 1, owner="kcl-worker-1", counter=30),  # after id 105: inside an aggregate
        kcl_lease_item(s2, "LATEST", owner="kcl-worker-2", counter=3),  # never checkpointed
        kcl_lease_item(s3, third[1], 0, owner="kcl-worker-1", counter=30),  # after id 301
    ])  # fmt: skip
    before_import = {*range(5), *range(106, 112), 302, 303, 304}
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server.endpoint)  # the commands run exactly as documented
        commands = documented_commands()
        assert [line.split()[1] for line in commands] == ["create-tables", "import-kcl", "import-kcl"]
        outputs = []
        for documented in commands:
            line = documented.replace("billing-kcl", lease_table).replace("billing-app", app).replace("clicks", stream)
            argv = shlex.split(line)[1:] + (["--failover-time", FAILOVER] if "import-kcl" in line else [])
            code, out, err = run(capsys, *argv)
            assert code == 0, err
            outputs.append(out)
            if "--dry-run" in line:
                assert "dry run: nothing written" in out and rows(dynamodb, app) == {}  # the dry run writes nothing
        out = outputs[-1]
        assert "wrote 4 rows" in out and "every shard goes on in kinsumer where KCL's lease says" in out
        lines = out.splitlines()
        checked = lines[lines.index("wrote 4 rows of " + app + "_checkpoints") + 1 :]
        check = {line.split()[0]: line.split()[1:] for line in checked if line.startswith("shardId")}
        assert check[s1] == [f"{aggregates[1]}:1", "after", f"{aggregates[1]}:1", "ok"]  # both positions, per shard
        assert check[s0] == ["TRIM_HORIZON", "start", "at", "TRIM_HORIZON", "ok"] and check[s2][0] == "LATEST"
        written = rows(dynamodb, app)
        assert set(written) == {s0, s1, s2, s3}
        assert written[s1]["SequenceNumber"] == {"S": aggregates[1]} and written[s1]["SubSequenceNumber"] == {"N": "1"}
        assert written[s0]["StartAt"] == {"N": "0"} and written[s3]["SubSequenceNumber"] == {"N": "0"}
        assert not any("OwnerID" in row for row in written.values())  # free rows
        assert all(int(row["LastUpdate"]["N"]) > 10**18 for row in written.values())  # epoch nanoseconds

        code, again, err = import_kcl(moto_server, capsys, lease_table, "--app", app, "--stream", stream, "--yes")
        assert code == 0, err
        assert "nothing changed" in again and rows(dynamodb, app) == written  # idempotent: not even LastUpdate
        monkeypatch.delenv("AWS_ENDPOINT_URL")

        after_import = [*range(250, 253), 305, 306, 112, 5]
        for ids, shard_id in (((250, 251, 252), s2), ((305, 306), s3), ((112,), s1), ((5,), s0)):
            put(kinesis, stream, plain(ids, shard_id, keys))
        expected = before_import | set(after_import)
        audit = Audit()
        worker = Worker(moto_server, stream, app, "after-kcl", audit).start()
        try:
            try:
                wait_until(lambda: audit.ids() >= expected, 60, "the records after KCL's checkpoints")
            except AssertionError as exc:
                missing = sorted(expected - audit.ids())
                raise AssertionError(f"{exc}: missing {missing}, got {sorted(audit.ids())}") from exc
            # A last record on each open shard: once each is in, anything read twice or not KCL's to skip is too.
            last = {s: 900 + n for n, s in enumerate(sorted(keys))}
            for shard_id, record_id in last.items():
                put(kinesis, stream, plain([record_id], shard_id, keys))
            wait_until(lambda: audit.ids() >= set(last.values()), 60, "the last record of each shard")
            code, _, err = import_kcl(moto_server, capsys, lease_table, "--app", app, "--stream", stream, "--force")
            assert code == 1 and f"clients of {app} are running: after-kcl" in err  # refused while a client runs
        finally:
            worker.stop()
        assert audit.ids() == expected | set(last.values())  # 0 lost, none of what KCL processed
        assert audit.duplicates() == {}  # 0 read twice

        code, _, err = import_kcl(moto_server, capsys, lease_table, "--app", app, "--stream", stream, "--yes")
        assert code == 1 and "hold kinsumer's own progress" in err and "--overwrite" in err  # kinsumer's, kept
    finally:
        dynamodb.delete_table(TableName=lease_table)


def test_across_splits_kinsumer_reads_no_parent_kcl_finished_and_each_child_from_where_kcl_would(
    kinesalite: LocalServer, moto_server: LocalServer, app: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """On kinesalite (moto's server keeps writing to a split shard): a parent at SHARD_END, a parent whose lease KCL
    deleted once its children went on, a child part read, a child KCL had made no lease for yet, and a child of
    the deleted parent left to the initial position."""
    kinesis, dynamodb = kinesalite.client("kinesis"), moto_server.client("dynamodb")
    stream, lease_table = new_kinesalite_stream(kinesis, 2), unique("kcl")
    keys = shard_hash_keys(kinesis, stream)
    sa, sb = sorted(keys)
    put(kinesis, stream, [*plain(range(5), sa, keys), *plain(range(30, 33), sb, keys)])
    assert split_first(kinesis, stream) == sa
    split(kinesis, stream, sb)
    children = {s["ShardId"]: s["ParentShardId"] for s in kinesis.list_shards(StreamName=stream)["Shards"]
                if s.get("ParentShardId")}  # fmt: skip
    ca1, ca2 = sorted(c for c, parent in children.items() if parent == sa)
    cb1, cb2 = sorted(c for c, parent in children.items() if parent == sb)
    keys = shard_hash_keys(kinesis, stream)
    ca1_seqs = put(kinesis, stream, plain(range(10, 15), ca1, keys))
    cb1_seqs = put(kinesis, stream, plain(range(40, 44), cb1, keys))
    put(kinesis, stream, [*plain(range(20, 23), ca2, keys), *plain(range(50, 53), cb2, keys)])
    create_lease_table(dynamodb, lease_table, [
        kcl_lease_item(sa, "SHARD_END", version=1, children=(ca1, ca2)),
        kcl_lease_item(ca1, ca1_seqs[1], version=1, owner="kcl-worker-1", parents=(sa,)),  # after id 11
        kcl_lease_item(cb1, cb1_seqs[1], version=1, owner="kcl-worker-2", parents=(sb,)),  # after id 41
    ])  # no lease of sb (deleted after its end), ca2 (not made yet), cb2 (the worker died first)  # fmt: skip
    try:
        code, out, err = run(
            capsys, "import-kcl", lease_table, "--app", app, "--stream", stream, "--yes", "--failover-time", FAILOVER,
            "--kinesis-endpoint-url", kinesalite.endpoint, "--dynamodb-endpoint-url", moto_server.endpoint,
        )  # fmt: skip
        assert code == 0, err
        plan: dict[str, str] = {}
        for line in out.splitlines():  # the plan's lines (the check's come after)
            if line.startswith("shardId"):
                plan.setdefault(line.split()[0], line)
        assert "a leased shard descends from it: done" in plan[sb] and "descends from a leased shard" in plan[ca2]
        assert "(its initial_position)" in plan[cb2]
        written = rows(dynamodb, app)
        assert set(written) == {sa, sb, ca1, ca2, cb1} and "Finished" in written[sa] and "Finished" in written[sb]
        expected = {12, 13, 14, 20, 21, 22, 42, 43, 50, 51, 52}
        audit = Audit()
        worker = Worker(moto_server, stream, app, "after-kcl", audit, kinesis=kinesalite.client("kinesis")).start()
        try:
            wait_until(lambda: audit.ids() >= expected, 60, "the children's records after KCL's checkpoints")
            last = {s: 900 + n for n, s in enumerate(sorted(keys))}
            for shard_id, record_id in last.items():
                put(kinesis, stream, plain([record_id], shard_id, keys))
            wait_until(lambda: audit.ids() >= set(last.values()), 60, "the last record of each shard")
        finally:
            worker.stop()
        assert audit.ids() == expected | set(last.values())  # neither parent read again, each child from KCL's place
        assert audit.duplicates() == {}
    finally:
        dynamodb.delete_table(TableName=lease_table)


def split(kinesis: Any, stream: str, shard_id: str) -> None:
    """Split ``shard_id`` in two halves and wait for the stream to be ACTIVE again."""
    info = next(s for s in kinesis.list_shards(StreamName=stream)["Shards"] if s["ShardId"] == shard_id)
    low, high = int(info["HashKeyRange"]["StartingHashKey"]), int(info["HashKeyRange"]["EndingHashKey"])
    kinesis.split_shard(StreamName=stream, ShardToSplit=shard_id, NewStartingHashKey=str((low + high) // 2))
    wait_active(kinesis, stream)


def test_a_multi_stream_kcl_3x_table_imports_one_stream_under_its_key_at_the_configured_timestamp(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str, capsys: pytest.CaptureFixture[str]
) -> None:
    kinesis, dynamodb = moto_server.client("kinesis"), moto_server.client("dynamodb")
    stream, lease_table = new_stream(2), unique("kcl")
    metadata_table.claim_home_stream(dynamodb, f"{app}_metadata", "home-stream")  # this one is a second stream
    keys = shard_hash_keys(kinesis, stream)
    sa, sb = sorted(keys)
    second = put(kinesis, stream, plain(range(3), sb, keys))
    summary = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]
    identifier = f"123456789012:{stream}:{int(summary['StreamCreationTimestamp'].timestamp())}"  # epoch in seconds
    create_lease_table(dynamodb, lease_table, [
        kcl_lease_item(sa, "AT_TIMESTAMP", version=3, stream=identifier),
        kcl_lease_item(sb, second[1], 0, version=3, stream=identifier, owner="kcl-b", checkpoint_owner="kcl-a"),
        kcl_lease_item(sa, "TRIM_HORIZON", version=3, stream="123456789012:other-stream:1"),
        {"leaseKey": {"S": "kcl-a"}, "entityType": {"S": "WORKER_METRIC_STATS"}, "lut": {"N": "1700000000"}},
    ])  # fmt: skip
    try:
        code, out, err = import_kcl(moto_server, capsys, lease_table, "--app", app, "--stream", stream, "--yes")
        assert code == 1 and f"the leases of {sa} say AT_TIMESTAMP" in err and "--at-timestamp" in err
        assert rows(dynamodb, app) == {}
        at = "2026-11-22T10:00:00Z"  # as the page shows it
        with pytest.raises(SystemExit) as exited:  # no --yes and no terminal
            import_kcl(moto_server, capsys, lease_table, "--app", app, "--stream", stream, "--at-timestamp", at)
        assert exited.value.code == 2 and "pass --yes" in capsys.readouterr().err and rows(dynamodb, app) == {}
        code, out, err = import_kcl(
            moto_server, capsys, lease_table, "--app", app, "--stream", stream, "--at-timestamp", at,
            "--kcl-stream-identifier", identifier, "--yes",
        )  # fmt: skip
        assert code == 0, err
        assert f"(stream {identifier})" in out and "graceful handoff from kcl-a" in out
        assert "other streams are not imported (123456789012:other-stream:1)" in out and "1 items of KCL's" in out
        written = rows(dynamodb, app)
        assert set(written) == {f"{stream}/{sa}", f"{stream}/{sb}"}  # not the home stream: <stream>/<shard>
        at_ms = int(dt.datetime.fromisoformat(at).timestamp() * 1000)
        assert written[f"{stream}/{sa}"]["StartAt"] == {"N": str(at_ms)}
        assert written[f"{stream}/{sb}"]["SequenceNumber"] == {"S": second[1]}

        dynamodb.update_item(  # as a client that died holding it left the row
            TableName=f"{app}_checkpoints", Key={"Shard": {"S": f"{stream}/{sb}"}},
            UpdateExpression="SET OwnerID = :id, OwnerName = :name",
            ExpressionAttributeValues={":id": {"S": "c-1"}, ":name": {"S": "worker-9"}},
        )  # fmt: skip
        held = rows(dynamodb, app)
        code, _, err = import_kcl(
            moto_server, capsys, lease_table, "--app", app, "--stream", stream, "--at-timestamp", at, "--overwrite",
            "--yes",
        )  # fmt: skip
        assert code == 1 and f"(worker-9) hold the rows of {sb}" in err and rows(dynamodb, app) == held
    finally:
        dynamodb.delete_table(TableName=lease_table)


def test_an_import_is_refused_while_a_kcl_worker_renews_its_lease_and_done_with_force(
    moto_server: LocalServer,
    new_stream: Callable[[int], str],
    app: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kinesis, dynamodb = moto_server.client("kinesis"), moto_server.client("dynamodb")
    stream, lease_table = new_stream(1), unique("kcl")
    (shard_id,) = shard_hash_keys(kinesis, stream)
    create_lease_table(dynamodb, lease_table, [kcl_lease_item(shard_id, "TRIM_HORIZON", owner="kcl-worker-7")])
    stop = threading.Event()
    renewals: list[int] = []

    def renew() -> None:  # a KCL worker's lease renewer: the counter goes up every failover time / 3
        renewer = moto_server.client("dynamodb")
        while not stop.wait(0.1):
            renewer.update_item(
                TableName=lease_table, Key={"leaseKey": {"S": shard_id}}, UpdateExpression="ADD leaseCounter :one",
                ExpressionAttributeValues={":one": {"N": "1"}},
            )  # fmt: skip
            renewals.append(1)

    calls: set[str] = set()
    real_call = botocore.client.BaseClient._make_api_call

    def recorded(client: botocore.client.BaseClient, operation: str, params: dict[str, Any]) -> Any:
        if threading.current_thread() is threading.main_thread():  # the command's calls, not the renewer's
            calls.add(f"{client.meta.service_model.signing_name}:{operation}")
        return real_call(client, operation, params)

    renewer = threading.Thread(target=renew, name="kcl-renewer", daemon=True)
    renewer.start()
    try:
        wait_until(lambda: len(renewals) >= 2, 30, "the KCL worker to renew its lease")
        code, out, err = import_kcl(
            moto_server, capsys, lease_table, "--app", app, "--stream", stream, "--dry-run", failover="1"
        )  # the worker renews every 0.1 s: surely within 1 s
        assert code == 0 and "the import would be refused" in out and "refused: KCL workers renewed" in out
        code, out, err = import_kcl(
            moto_server, capsys, lease_table, "--app", app, "--stream", stream, "--yes", failover="1"
        )
        assert code == 1 and f"{shard_id} (owner kcl-worker-7)" in err and "stop every worker" in err
        assert rows(dynamodb, app) == {}
        with monkeypatch.context() as patched:
            patched.setattr(botocore.client.BaseClient, "_make_api_call", recorded)
            code, out, err = import_kcl(
                moto_server, capsys, lease_table, "--app", app, "--stream", stream, "--force", "--yes"
            )
        assert code == 0, err
        assert "--force: whether KCL workers still renew their leases was not checked" in out
        assert rows(dynamodb, app)[shard_id]["StartAt"] == {"N": "0"}
    finally:
        stop.set()
        renewer.join(10)
        dynamodb.delete_table(TableName=lease_table)
    assert not renewer.is_alive()
    # the documented IAM policy allows every call the command made
    assert calls <= documented_policy_actions(), calls
    assert {"kinesis:ListShards", "dynamodb:Scan", "dynamodb:PutItem"} <= calls
