"""The ``kinsumer`` command, run as a subprocess against a moto server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from demo.servers import LocalServer
from kinsumer import Config, Kinsumer
from kinsumer.reading.kpl import MAGIC
from kinsumer.writing.aggregation import hash_of
from tests.conftest import unique
from tests.helpers import read_back, wait_until
from tests.reshard import new_stream as new_stream_on

pytestmark = pytest.mark.server

REPO = pathlib.Path(__file__).resolve().parents[2]


def run(
    server: LocalServer, *args: str, timeout: float = 60, stdin: str | None = None, pythonpath: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``kinsumer ARGS`` on ``server``; ``pythonpath`` goes before the checkout on the command's path."""
    return subprocess.run(
        [sys.executable, "-m", "kinsumer", *args, "--endpoint-url", server.endpoint],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        input=stdin if stdin is not None else "",
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (pythonpath, str(REPO)) if p)},
    )


def tables(server: LocalServer, app: str) -> set[str]:
    return {t for t in server.client("dynamodb").list_tables()["TableNames"] if t.startswith(app + "_")}


def test_create_and_delete_tables(moto_server: LocalServer) -> None:
    app = unique("app")
    made = run(moto_server, "create-tables", app)
    assert made.returncode == 0, made.stderr
    assert f"tables of {app} are ACTIVE" in made.stdout
    assert tables(moto_server, app) == {f"{app}_clients", f"{app}_checkpoints", f"{app}_metadata"}
    assert run(moto_server, "create-tables", app).returncode == 0  # idempotent
    refused = run(moto_server, "delete-tables", app)  # no --yes and no terminal
    assert refused.returncode == 2 and "pass --yes" in refused.stderr
    assert len(tables(moto_server, app)) == 3
    gone = run(moto_server, "delete-tables", app, "--yes")
    assert gone.returncode == 0 and "deleted" in gone.stdout
    assert tables(moto_server, app) == set()


def test_create_stream_for_a_first_try_is_idempotent(moto_server: LocalServer) -> None:
    stream = unique("stream")
    try:
        made = run(moto_server, "create-stream", stream, "--shards", "3")
        assert made.returncode == 0, made.stderr
        assert f"stream {stream} is ACTIVE with 3 shards" in made.stdout
        again = run(moto_server, "create-stream", stream)
        assert again.returncode == 0 and "exists already" in again.stdout and "with 3 shards" in again.stdout
        summary = moto_server.client("kinesis").describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]
        assert (summary["StreamStatus"], summary["OpenShardCount"]) == ("ACTIVE", 3)
    finally:
        moto_server.client("kinesis").delete_stream(StreamName=stream)


def test_produce_then_tail_without_tables(moto_server: LocalServer, new_stream: Callable[[int], str]) -> None:
    stream = new_stream(2)
    before = set(moto_server.client("dynamodb").list_tables()["TableNames"])
    wrote = run(moto_server, "produce", stream, "--count", "250", "--partition-keys", "10", "--size", "80")
    assert wrote.returncode == 0, wrote.stderr
    assert wrote.stdout.startswith(f"wrote 250 records to {stream}")
    tailed = run(moto_server, "tail", stream, "--from", "trim-horizon", "--json", "--count", "250")
    assert tailed.returncode == 0, tailed.stderr
    records = [json.loads(line) for line in tailed.stdout.splitlines()]
    ids = sorted(json.loads(r["data"])["id"] for r in records)
    assert ids == list(range(250))
    assert {r["stream"] for r in records} == {stream}
    assert all(len(r["data"]) >= 80 for r in records)
    assert set(moto_server.client("dynamodb").list_tables()["TableNames"]) == before  # no table touched
    plain = run(moto_server, "tail", stream, "--from", "trim-horizon", "--count", "1")
    shard, sequence, key, data = plain.stdout.split(" ", 3)
    assert shard.startswith("shardId-") and sequence.isdigit() and key.startswith("key-") and data.startswith("{")


def test_produce_aggregated_records_and_tail_shows_the_user_records(
    moto_server: LocalServer, new_stream: Callable[[int], str]
) -> None:
    stream = new_stream(1)
    wrote = run(moto_server, "produce", stream, "--count", "95", "--aggregate", "10")
    assert wrote.returncode == 0, wrote.stderr
    stored = moto_server.client("kinesis").get_records(
        ShardIterator=moto_server.client("kinesis").get_shard_iterator(
            StreamName=stream, ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
    )["Records"]
    assert len(stored) == 10  # 9 aggregates of 10 and one of 5
    assert all(r["Data"].startswith(MAGIC) for r in stored)
    tailed = run(moto_server, "tail", stream, "--from", "trim-horizon", "--json", "--count", "95")
    assert tailed.returncode == 0, tailed.stderr
    records = [json.loads(line) for line in tailed.stdout.splitlines()]
    assert [json.loads(r["data"])["id"] for r in records] == list(range(95))
    assert [r["sub_sequence_number"] for r in records] == [i % 10 for i in range(95)]
    plain = run(moto_server, "tail", stream, "--from", "trim-horizon", "--count", "2")
    assert [line.split(" ")[1].rsplit("/", 1)[1] for line in plain.stdout.splitlines()] == ["0", "1"]


def test_produce_aggregates_per_shard_with_kinsumers_own_writer_without_aws_kinesis_agg(
    moto_server: LocalServer, new_stream: Callable[[int], str], tmp_path: pathlib.Path
) -> None:
    """What an installed package can do: aws_kinesis_agg cannot be imported (a stand-in that raises shadows
    it), and each user record still lands in the shard its key maps to, ids from --first-id, each once."""
    (tmp_path / "aws_kinesis_agg").mkdir()
    (tmp_path / "aws_kinesis_agg" / "__init__.py").write_text("raise ImportError('not installed')\n")
    shadowed = subprocess.run(
        [sys.executable, "-c", "import aws_kinesis_agg.aggregator"], check=False, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )  # fmt: skip
    assert shadowed.returncode == 1 and "ImportError: not installed" in shadowed.stderr
    stream = new_stream(3)
    wrote = run(
        moto_server, "produce", stream, "--count", "300", "--first-id", "1000", "--aggregate", "25",
        "--partition-keys", "40", "--size", "150", pythonpath=str(tmp_path),
    )  # fmt: skip
    assert wrote.returncode == 0, wrote.stderr
    assert wrote.stdout.startswith(f"wrote 300 records to {stream}")
    kinesis = moto_server.client("kinesis")
    by_shard = read_back(kinesis, stream)
    assert sorted(json.loads(r["Data"])["id"] for rs in by_shard.values() for r in rs) == list(range(1000, 1300))
    ranges = {
        s["ShardId"]: (int(s["HashKeyRange"]["StartingHashKey"]), int(s["HashKeyRange"]["EndingHashKey"]))
        for s in kinesis.list_shards(StreamName=stream)["Shards"]
    }
    for shard, records in by_shard.items():
        low, high = ranges[shard]
        assert all(low <= hash_of(r["PartitionKey"]) <= high for r in records)
        assert all(len(r["Data"]) >= 150 and json.loads(r["Data"])["key"] == r["PartitionKey"] for r in records)
        per_aggregate = [sum(r["SequenceNumber"] == seq for r in records) for seq in
                         dict.fromkeys(r["SequenceNumber"] for r in records)]  # fmt: skip
        full, last = divmod(len(records), 25)
        assert per_aggregate == [25] * full + ([last] if last else [])


def test_tail_of_an_application_only_looks_and_with_commit_consumes_as_a_member(
    moto_server: LocalServer, new_stream: Callable[[int], str]
) -> None:
    """``tail --app APP`` starts after APP's checkpoints and writes nothing, so APP's consumers still get every
    record; ``--commit`` joins APP and checkpoints what it prints."""
    stream, app = new_stream(1), unique("app")
    assert run(moto_server, "create-tables", app).returncode == 0
    assert run(moto_server, "produce", stream, "--count", "20").returncode == 0
    db = moto_server.client("dynamodb")

    def tail_ids(*options: str) -> list[int]:
        done = run(moto_server, "tail", stream, "--from", "trim-horizon", "--app", app, "--count", "5", *options)
        assert done.returncode == 0, done.stderr
        return [json.loads(line.split(" ", 3)[3])["id"] for line in done.stdout.splitlines()]

    def rows(table: str) -> list[dict[str, Any]]:
        return list(db.scan(TableName=f"{app}_{table}", ConsistentRead=True)["Items"])

    assert tail_ids() == tail_ids() == list(range(5))  # no checkpoint yet: both from the trim horizon
    assert rows("checkpoints") == [] and rows("clients") == []  # it never joined, nothing was written
    assert tail_ids("--commit") + tail_ids("--commit") == list(range(10))  # the second resumed after the first
    before = rows("checkpoints")
    assert tail_ids() == tail_ids("--no-commit") == list(range(10, 15))  # after the checkpoint, which stays
    assert rows("checkpoints") == before and rows("clients") == []
    alone = run(moto_server, "tail", stream, "--commit", "--count", "1")
    assert alone.returncode == 2 and "--commit needs --app" in alone.stderr
    both = run(moto_server, "tail", stream, "--app", app, "--commit", "--no-commit", "--count", "1")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


def test_status_shows_clients_leader_shards_and_lag(moto_server: LocalServer, new_stream: Callable[[int], str]) -> None:
    stream, app = new_stream(2), unique("app")
    assert run(moto_server, "create-tables", app).returncode == 0
    assert run(moto_server, "produce", stream, "--count", "100").returncode == 0
    config = Config(
        shard_check_frequency=0.5, client_record_max_age=2, commit_frequency=0.25, leader_action_frequency=1
    )
    consumer = Kinsumer(
        stream,
        app,
        "status-worker",
        config,
        kinesis=moto_server.client("kinesis"),
        dynamodb=moto_server.client("dynamodb"),
    )
    consumer.run()
    reader = threading.Thread(target=lambda: [None for _ in iter(consumer.next, None)], daemon=True)
    reader.start()
    try:

        def status() -> dict[str, Any]:
            answer = run(moto_server, "status", stream, app, "--json")
            assert answer.returncode == 0, answer.stderr
            return dict(json.loads(answer.stdout))

        wait_until(
            lambda: all(s["millis_behind_latest"] is not None for s in status()["shards"]), 30, "lag in every row"
        )
        snapshot = status()
        text = run(moto_server, "status", stream, app).stdout
    finally:
        consumer.stop()
        reader.join(10)
    assert [c["name"] for c in snapshot["clients"] if c["live"]] == ["status-worker"]
    assert snapshot["leader_id"] == consumer.client_id
    assert sorted(snapshot["shard_cache"]) == ["shardId-000000000000", "shardId-000000000001"]
    assert {s["owner_name"] for s in snapshot["shards"]} == {"status-worker"}
    assert {s["reading"] for s in snapshot["shards"]} == {"polling"}
    assert [c["reading"] for c in snapshot["clients"] if c["live"]] == ["polling"]
    assert all(s["consumable"] and not s["finished"] for s in snapshot["shards"])
    for expected in ("clients: 1 live", "status-worker", f"leader: {consumer.client_id}", "reading", " ms"):
        assert expected in text


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("status", "no-such-stream", "anyapp"), 1, "stream 'no-such-stream' does not exist"),
        (("tail", "no-such-stream", "--count", "1"), 1, "stream 'no-such-stream' does not exist"),
        (("produce", "no-such-stream", "--count", "1"), 1, "stream 'no-such-stream' does not exist"),
        (("produce", "s", "--count", "-1"), 2, "--count must be >= 0"),
        (("produce", "s", "--count", "many"), 2, "invalid int value"),
        (("tail", "s", "--from", "yesterday"), 2, "invalid choice"),
        (("tail", "s", "--from", "at-timestamp"), 2, "--from at-timestamp needs --timestamp"),
        (("create-tables", "bad/app"), 1, "application_name"),
        (("frobnicate",), 2, "invalid choice"),
    ],
)
def test_bad_input_is_one_clear_line_and_a_non_zero_exit(
    moto_server: LocalServer, args: tuple[str, ...], code: int, message: str
) -> None:
    answer = run(moto_server, *args)
    assert answer.returncode == code, answer
    assert message in answer.stderr
    assert "Traceback" not in answer.stderr
    assert answer.stderr.strip().splitlines()[-1].startswith(("kinsumer: error:", "usage:", "kinsumer "))


def test_efo_registers_lists_and_deregisters_a_consumer_only_when_confirmed(kinesis_mock: LocalServer) -> None:
    kinesis = kinesis_mock.client("kinesis")
    stream = new_stream_on(kinesis, 1)
    assert "has no enhanced fan-out consumer" in run(kinesis_mock, "efo", "list", stream).stdout
    made = run(kinesis_mock, "efo", "register", stream, "billing")
    assert made.returncode == 0 and "consumer billing of" in made.stdout and "is ACTIVE" in made.stdout, made.stderr
    assert run(kinesis_mock, "efo", "register", stream, "billing").returncode == 0  # idempotent
    listed = run(kinesis_mock, "efo", "list", stream).stdout.splitlines()
    assert [line.split("\t")[:2] for line in listed] == [["billing", "ACTIVE"]]
    refused = run(kinesis_mock, "efo", "deregister", stream, "billing")  # no --yes and no terminal
    assert refused.returncode == 2 and "pass --yes" in refused.stderr
    gone = run(kinesis_mock, "efo", "deregister", stream, "billing", "--yes")
    assert gone.returncode == 0 and "is being deregistered" in gone.stdout
    wait_until(lambda: "has no enhanced" in run(kinesis_mock, "efo", "list", stream).stdout, 30, "it to be gone")
    again = run(kinesis_mock, "efo", "deregister", stream, "billing", "--yes")
    assert again.returncode == 0 and "has no consumer named billing" in again.stdout


def test_missing_tables_name_the_fix(moto_server: LocalServer, new_stream: Callable[[int], str]) -> None:
    stream = new_stream(1)
    answer = run(moto_server, "status", stream, "nosuchapp")
    assert answer.returncode == 1
    assert "kinsumer create-tables nosuchapp" in answer.stderr
    assert len(answer.stderr.strip().splitlines()) == 1


def test_help_everywhere(moto_server: LocalServer) -> None:
    for command in ("", "create-tables", "delete-tables", "status", "tail", "produce", "efo", "efo deregister"):
        answer = run(moto_server, *command.split(), "--help")
        assert answer.returncode == 0, (command, answer.stderr)
        assert "usage:" in answer.stdout.lower()
    demo = run(moto_server, "demo")  # `make demo`, from a checkout: not a command of the package
    assert demo.returncode == 2 and "invalid choice: 'demo'" in demo.stderr


@pytest.mark.parametrize(
    ("signum", "code", "said"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")]
)
def test_ctrl_c_or_sigterm_stops_a_tail_cleanly_and_leaves_the_application(
    moto_server: LocalServer, new_stream: Callable[[int], str], signum: int, code: int, said: str
) -> None:
    stream, app = new_stream(1), unique("app")
    assert run(moto_server, "create-tables", app).returncode == 0
    assert run(moto_server, "produce", stream, "--count", "3").returncode == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "kinsumer", "tail", stream, "--from", "trim-horizon", "--app", app, "--commit",
         "--endpoint-url", moto_server.endpoint],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONFAULTHANDLER": "1"},
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        for _ in range(3):
            assert proc.stdout.readline().startswith("shardId-")
        clients_table = f"{app}_clients"
        assert moto_server.client("dynamodb").scan(TableName=clients_table)["Items"]  # a member now
        proc.send_signal(signum)
        try:
            _, stderr = proc.communicate(timeout=30)  # drains both pipes while waiting
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
            _, stderr = proc.communicate(timeout=10)
            pytest.fail(f"tail did not exit within 30 s of {signum}; its stderr:\n{stderr[-6000:]}")
        assert proc.returncode == code, stderr
        assert said in stderr
        assert moto_server.client("dynamodb").scan(TableName=clients_table)["Items"] == []  # left cleanly
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)  # closes the pipes


def test_status_and_tail_name_the_streams_of_an_application_of_several(
    moto_server: LocalServer, new_stream: Callable[[int], str]
) -> None:
    """``status`` of the second stream shows its rows (keyed ``<stream>/<shard>``) and who lists what; a
    ``tail --app --commit`` (which joins) lists every stream the live clients list, so joining pauses none of them."""
    home, other, app = new_stream(1), new_stream(2), unique("app")
    assert run(moto_server, "create-tables", app).returncode == 0
    assert run(moto_server, "produce", other, "--count", "20").returncode == 0
    config = Config(
        shard_check_frequency=0.5, client_record_max_age=2, commit_frequency=0.25, leader_action_frequency=1
    )
    aws = {"kinesis": moto_server.client("kinesis"), "dynamodb": moto_server.client("dynamodb")}
    consumer = Kinsumer([home, other], app, "two-streams", config, **aws)
    consumer.run()
    reader = threading.Thread(target=lambda: [None for _ in iter(consumer.next, None)], daemon=True)
    reader.start()
    tail = None
    try:

        def status() -> dict[str, Any]:
            answer = run(moto_server, "status", other, app, "--json")
            assert answer.returncode == 0, answer.stderr
            return dict(json.loads(answer.stdout))

        wait_until(lambda: all(s["checkpoint"] for s in status()["shards"]), 30, "a checkpoint in each row of it")
        snapshot = status()
        text = run(moto_server, "status", other, app).stdout
        tail = subprocess.Popen(
            [sys.executable, "-m", "kinsumer", "tail", home, "--app", app, "--commit",
             "--endpoint-url", moto_server.endpoint],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # fmt: skip

        def tail_lists() -> list[str] | None:
            rows = client_rows(moto_server, app)
            return next((r["streams"] for r in rows if r["name"] == "kinsumer-tail"), None)

        wait_until(lambda: tail_lists() is not None, 30, "the tail to join")
        assert tail_lists() == [home, other]
    finally:
        if tail is not None:
            tail.send_signal(signal.SIGINT)
            _, stderr = tail.communicate(timeout=30)
            assert tail.returncode == 130, stderr
        consumer.stop()
        reader.join(10)
    assert snapshot["stream"] == other
    assert [s["shard_id"] for s in snapshot["shards"]] == ["shardId-000000000000", "shardId-000000000001"]
    assert {s["owner_name"] for s in snapshot["shards"]} == {"two-streams"}
    assert snapshot["shard_cache"] == ["shardId-000000000000", "shardId-000000000001"]
    assert [c["streams"] for c in snapshot["clients"] if c["live"]] == [[home, other]]
    assert f"stream {other}" in text and f"{home},{other}" in text


def client_rows(server: LocalServer, app: str) -> list[dict[str, Any]]:
    """The clients table's rows: name and listed streams."""
    items = server.client("dynamodb").scan(TableName=f"{app}_clients")["Items"]
    return [{"name": i["Name"]["S"], "streams": [v["S"] for v in i.get("Streams", {}).get("L", [])]} for i in items]
