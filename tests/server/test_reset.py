"""Rewinding an application (``Kinsumer.reset()``, ``kinsumer reset``) on kinesalite, across a split."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from demo.servers import LocalServer
from kinsumer import Kinsumer, KinsumerError, Record
from tests.conftest import unique
from tests.helpers import produce_per_shard, wait_until
from tests.procs.harness import REPO
from tests.reshard import every_record, new_stream, split_first
from tests.server.conftest import SERVER_CONFIG

pytestmark = pytest.mark.server


def rid(record: Record) -> int:
    return int(json.loads(record.data)["id"])


def make(kinesalite: LocalServer, moto_server: LocalServer, stream: str, app: str, name: str) -> Kinsumer:
    return Kinsumer(stream, app, name, SERVER_CONFIG, kinesis=kinesalite.client("kinesis"),
                    dynamodb=moto_server.client("dynamodb"))  # fmt: skip


def consume(k: Kinsumer, want: set[int]) -> list[Record]:
    """Run ``k`` until it delivered every id of ``want``, then a moment more (nothing else may come)."""
    got: list[Record] = []
    with k:
        while not want <= {rid(r) for r in got}:
            record = k.next_record(timeout=60)
            assert record is not None
            got.append(record)
        try:
            while (record := k.next_record(timeout=1.0)) is not None:
                got.append(record)
        except TimeoutError:
            pass
    return got


def arrivals(kinesis: Any, stream: str) -> dict[int, tuple[str, int]]:
    """Every record of the stream: id -> (shard, arrival in epoch ms), read from each shard's trim horizon."""
    return {
        json.loads(r["Data"])["id"]: (shard, int(r["ApproximateArrivalTimestamp"].timestamp() * 1000))
        for shard, r in every_record(kinesis, stream)
    }


def test_a_reset_to_a_time_delivers_exactly_the_records_from_then_on_parents_before_children(
    kinesalite: LocalServer, moto_server: LocalServer
) -> None:
    kinesis = kinesalite.client("kinesis")
    stream, app = new_stream(kinesis, 2), unique("app")
    before = produce_per_shard(kinesis, stream, 10)
    last_before = max(at for _, at in arrivals(kinesis, stream).values())
    wait_until(lambda: time.time() * 1000 > last_before + 20, 10, "the clock to pass the first records")
    after = produce_per_shard(kinesis, stream, 10, first_id=100)
    parent = split_first(kinesis, stream)
    after += produce_per_shard(kinesis, stream, 10, first_id=200)  # on the children and the other shard
    written = arrivals(kinesis, stream)
    cut = min(at for i, (_, at) in written.items() if i >= 100)
    assert set(written) == set(before) | set(after)
    make(kinesalite, moto_server, stream, app, "admin").create_required_tables()
    first = consume(make(kinesalite, moto_server, stream, app, "first"), set(written))
    assert sorted(rid(r) for r in first) == sorted(written)

    plan = make(kinesalite, moto_server, stream, app, "admin").reset(dt.datetime.fromtimestamp(cut / 1000, dt.UTC))
    assert len(plan.shards) == 4 and not plan.past_retention
    assert {s.shard_id for s in plan.shards if s.finished} == {parent}  # it was read to its end
    again = consume(make(kinesalite, moto_server, stream, app, "second"), set(after))
    expected = {i for i, (_, at) in written.items() if at >= cut}
    assert expected >= set(after) and not expected & set(before)
    assert sorted(rid(r) for r in again) == sorted(expected)  # each once, from the time on
    order = [r.shard_id for r in again]
    children = [i for i, shard in enumerate(order) if shard not in (parent, *written_shards(written, set(before)))]
    parent_last = max(i for i, shard in enumerate(order) if shard == parent)
    assert children and parent_last < min(children)  # the parent's records from the time, then its children's


def written_shards(written: dict[int, tuple[str, int]], ids: set[int]) -> set[str]:
    return {shard for i, (shard, _) in written.items() if i in ids}


def test_a_reset_is_refused_while_a_client_runs_and_the_command_rewinds_to_the_trim_horizon(
    kinesalite: LocalServer, moto_server: LocalServer
) -> None:
    kinesis = kinesalite.client("kinesis")
    stream, app = new_stream(kinesis, 2), unique("app")
    ids = produce_per_shard(kinesis, stream, 5)
    running = make(kinesalite, moto_server, stream, app, "runner")
    running.create_required_tables()
    seen: list[int] = []
    stop = threading.Event()

    def read() -> None:
        with running:
            while not stop.is_set():
                try:
                    record = running.next_record(timeout=0.2)
                except TimeoutError:
                    continue
                if record is not None:
                    seen.append(rid(record))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_until(lambda: sorted(seen) == ids, 60, "the first read")
        with pytest.raises(KinsumerError, match=r"clients of the application are running: runner \("):
            make(kinesalite, moto_server, stream, app, "admin").reset("TRIM_HORIZON")
    finally:
        stop.set()
        reader.join(30)

    def command(*more: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kinsumer", "reset", "--app", app, "--stream", stream, "--to", "TRIM_HORIZON",
             "--kinesis-endpoint-url", kinesalite.endpoint, "--dynamodb-endpoint-url", moto_server.endpoint, *more],
            capture_output=True, text=True, timeout=60, input="", cwd=REPO, check=False,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # fmt: skip

    refused = command()  # no --yes, no terminal
    assert refused.returncode == 2 and "pass --yes" in refused.stderr
    done = command("--yes")
    assert done.returncode == 0, done.stderr
    assert "TRIM_HORIZON" in done.stdout and f"{app} is reset" in done.stdout
    assert "retention" not in done.stdout  # no time was given: none is older than the retention
    again = consume(make(kinesalite, moto_server, stream, app, "after"), set(ids))
    assert sorted(rid(r) for r in again) == ids  # everything once more, from the trim horizon
