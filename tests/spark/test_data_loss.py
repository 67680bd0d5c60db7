"""failOnDataLoss: records retention trimmed before a query read them (local[2] SparkSession, kinesalite, moto's
DynamoDB).

No local server trims within a test (kinesalite trims after its 24 h minimum retention, moto never): a relay
answers as AWS does once records are trimmed. GetRecords leaves out the records at or before a sequence
number, and a page that had only those says it is far behind the tip (AWS's iterator at a trimmed position
walks through empty pages, MillisBehindLatest about the retention, until it reaches the records left).
"""

from __future__ import annotations

import json
import pathlib
import types
from typing import Any

import pytest

from demo.servers import LocalServer
from kinsumer.aws.kinesis import list_shards
from tests.conftest import unique
from tests.helpers import produce_per_shard, wait_until
from tests.relay import KinesisRelay
from tests.reshard import new_stream
from tests.spark.test_source import BatchLog, start_query, uncommit_last_batch, wait_for

pytestmark = pytest.mark.server

DAY_MS = 24 * 3_600_000


class Retention:
    """A relay's answers once retention trimmed every record up to ``horizon`` (a sequence number)."""

    def __init__(self) -> None:
        self.horizon: int | None = None

    def __call__(self, operation: str, answer: dict[str, Any]) -> dict[str, Any]:
        if operation != "GetRecords" or self.horizon is None:
            return answer
        records = answer.get("Records", [])
        left = [r for r in records if int(r["SequenceNumber"]) > self.horizon]
        if records and not left:
            answer = {**answer, "MillisBehindLatest": DAY_MS}
        return {**answer, "Records": left}


def _loss(progress: dict[str, Any]) -> dict[str, Any] | None:
    latest = json.loads(progress["sources"][0].get("latestOffset") or "null")
    return latest.get("dataLoss") if latest else None


@pytest.mark.parametrize("replayed", [False, True], ids=["committed", "replayed"])
def test_records_trimmed_while_the_query_was_stopped_fail_it_and_with_fail_on_data_loss_false_are_skipped_and_told(
    spark: Any,
    kinesalite: LocalServer,
    moto_server: LocalServer,
    tmp_path: pathlib.Path,
    warnings_log: pathlib.Path,
    replayed: bool,
) -> None:
    """Committed: the restart reads on from the position the query read last, and that record is gone.
    Replayed: the restart replays the last batch (stopped between its sink and its commit), and every
    record of it is gone: found on the driver, where a replay would otherwise look for an end that is
    not there any more."""
    kinesis = kinesalite.client("kinesis")
    stream, app, checkpoint = new_stream(kinesis, 1), unique("app"), tmp_path / "ckpt"
    shard = list_shards(kinesis, stream)[0].shard_id
    retention = Retention()
    with KinesisRelay(kinesalite.endpoint, answer=retention) as relay:
        via = types.SimpleNamespace(endpoint=relay.endpoint)
        first = produce_per_shard(kinesis, stream, 10)
        sink = BatchLog()
        query = start_query(spark, via, moto_server, stream, app, checkpoint, sink)
        try:  # committed: a stop between the sink and the commit would make this a replay
            wait_for(query, lambda: sorted(sink.ids()) == first and _committed(checkpoint), "the first records")
        finally:
            query.stop()
        read_last = max(row["seq"] for row in sink.final_rows())
        if replayed:
            uncommit_last_batch(checkpoint)

        later = produce_per_shard(kinesis, stream, 10, first_id=10)
        iterator = kinesis.get_shard_iterator(
            StreamName=stream, ShardId=shard, ShardIteratorType="AFTER_SEQUENCE_NUMBER",
            StartingSequenceNumber=str(read_last),
        )["ShardIterator"]  # fmt: skip
        unread = [int(r["SequenceNumber"]) for r in kinesis.get_records(ShardIterator=iterator)["Records"]]
        assert len(unread) == len(later)
        retention.horizon = unread[4]  # the record read last and the five after it are gone

        failing = start_query(spark, via, moto_server, stream, app, checkpoint, BatchLog())
        try:
            wait_until(lambda: failing.exception() is not None, 120, "the query to fail", poll=0.2)
        finally:
            failing.stop()
        message = str(failing.exception())
        assert "DataLossError" in message and "failOnDataLoss" in message
        lost = f"from TRIM_HORIZON to AFTER:{read_last}" if replayed else f"read from AFTER:{read_last}"
        assert repr(stream) in message and shard in message and lost in message

        going = BatchLog()
        options = {"failOnDataLoss": "false"}
        query = start_query(spark, via, moto_server, stream, app, checkpoint, going, options=options)
        try:
            wait_for(query, lambda: sorted(going.ids()) == later[5:], "the records left")
            wait_for(query, lambda: any(_loss(p) for p in query.recentProgress), "the loss in the progress")
            losses = [loss for p in query.recentProgress if (loss := _loss(p))]
        finally:
            query.stop()
    assert sorted(going.ids()) == later[5:]  # from the oldest record left, nothing twice
    where = {"position": "TRIM_HORIZON", "replay_to": f"AFTER:{read_last}"} if replayed else {
        "position": f"AFTER:{read_last}"}  # fmt: skip
    assert losses[-1] == {
        "expired": 0, "shards": 1, "trimmed": 1,
        "last": {"shard": shard, **where, "reason": "trimmed", "oldest": str(unread[5]), "stream": stream},
    }  # fmt: skip
    warned = [line for line in warnings_log.read_text().splitlines() if "data loss" in line and stream in line]
    assert warned and all(" WARNING kinsumer.spark " in line and shard in line for line in warned)


def _committed(checkpoint: pathlib.Path) -> bool:
    return (checkpoint / "commits" / "0").exists()
