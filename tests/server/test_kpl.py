"""KPL aggregates end to end: user records, and checkpoints inside an aggregate.

Read by polling (moto's server) and with enhanced fan-out (kinesis-mock, DynamoDB on moto's
server): a subscription that starts inside an aggregate leaves out the user records before.
"""

from __future__ import annotations

import attrs
import pytest

from demo.aggregation import aggregated_entries
from demo.servers import LocalServer
from kinsumer import Checkpoint, Kinsumer, Record
from kinsumer.coordination import checkpoints_table
from kinsumer.reading.kpl import MAGIC
from tests.helpers import CountingStats, put_all
from tests.reshard import new_stream
from tests.server.conftest import SERVER_CONFIG

pytestmark = pytest.mark.server

SHARD = "shardId-000000000000"


def write(server: LocalServer, stream: str) -> list[bytes]:
    """Two aggregates of five user records, a plain record and a corrupted aggregate; the payloads in order."""
    users = [(f"user-{i % 3}", b"%s%d" % (name, i), None) for name in (b"a", b"b") for i in range(5)]
    entries = [*aggregated_entries(users, per_record=5)]
    entries += [{"Data": b"plain", "PartitionKey": "p"}, {"Data": MAGIC + b"corrupted", "PartitionKey": "p"}]
    put_all(server.client("kinesis"), stream, entries)
    return [data for _, data, _ in users] + [b"plain", MAGIC + b"corrupted"]


@attrs.frozen
class Source:
    """Where the stream lives and how it is read."""

    kinesis: LocalServer
    dynamodb: LocalServer
    efo_consumer_name: str | None

    def client(self, stream: str, app: str, manual: bool, stats: CountingStats | None = None) -> Kinsumer:
        config = attrs.evolve(
            SERVER_CONFIG,
            manual_checkpointing=manual,
            handoff_timeout=0.5,
            stats=stats or CountingStats(),
            efo_consumer_name=self.efo_consumer_name,
        )
        kinesis, dynamodb = self.kinesis.client("kinesis"), self.dynamodb.client("dynamodb")
        return Kinsumer(stream, app, "kpl", config, kinesis=kinesis, dynamodb=dynamodb)


@pytest.fixture(params=["polling", "fan-out"])
def source(request: pytest.FixtureRequest, moto_server: LocalServer) -> Source:
    if request.param == "polling":
        return Source(moto_server, moto_server, None)
    return Source(request.getfixturevalue("kinesis_mock"), moto_server, "kpl")


def take(k: Kinsumer, count: int) -> list[tuple[Record, Checkpoint]]:
    taken = []
    for _ in range(count):
        record, checkpoint = k.next_record_with_checkpointer(timeout=30)
        assert record is not None and checkpoint is not None
        taken.append((record, checkpoint))
    return taken


def stored(server: LocalServer, app: str) -> tuple[str, int | None] | None:
    row = checkpoints_table.read_row(server.client("dynamodb"), f"{app}_checkpoints", SHARD)
    return None if row is None else row.checkpoint


def test_manual_checkpoints_inside_an_aggregate_resume_at_the_first_unacknowledged_user_record(
    source: Source, moto_server: LocalServer, app: str
) -> None:
    stream = new_stream(source.kinesis.client("kinesis"), 1)
    payloads = write(source.kinesis, stream)
    stats = CountingStats()
    first = source.client(stream, app, manual=True, stats=stats)
    with first:
        taken = take(first, len(payloads))
        records = [r for r, _ in taken]
        assert [r.data for r in records] == payloads
        assert [r.sub_sequence_number for r in records] == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, None, None]
        assert [r.partition_key for r in records[:5]] == ["user-0", "user-1", "user-2", "user-0", "user-1"]
        assert len({r.sequence_number for r in records[:5]}) == 1
        for index in (0, 1, 3, 4, 5):  # a2 stays unacknowledged; a3, a4 and b0 after it are acknowledged
            taken[index][1]()
    assert stats.calls["malformed_aggregates"] == 1
    assert stored(moto_server, app) == (records[1].sequence_number, 1)  # the prefix ends at a1

    second = source.client(stream, app, manual=True)
    with second:
        again = [r for r, _ in take(second, len(payloads) - 2)]
    # from a2 on, in order: nothing processed before it comes again, nothing after it is skipped
    assert [r.data for r in again] == payloads[2:]
    assert [(r.sequence_number, r.sub_sequence_number) for r in again] == [
        (r.sequence_number, r.sub_sequence_number) for r in records[2:]
    ]


def test_auto_mode_counts_user_records_and_a_restart_goes_on_inside_the_aggregate(
    source: Source, moto_server: LocalServer, app: str
) -> None:
    stream = new_stream(source.kinesis.client("kinesis"), 1)
    payloads = write(source.kinesis, stream)
    first = source.client(stream, app, manual=False)
    with first:
        got = [first.next_record(timeout=30) for _ in range(7)]  # a0..a4, b0, b1: b1 is in hand at the stop
    assert [r.data for r in got if r is not None] == payloads[:7]
    last = got[-1]
    assert last is not None and stored(moto_server, app) == (last.sequence_number, 1)
    second = source.client(stream, app, manual=False)
    with second:
        rest = [second.next(timeout=30) for _ in range(len(payloads) - 7)]
    assert rest == payloads[7:]
