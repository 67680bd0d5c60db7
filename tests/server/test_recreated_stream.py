"""A stream deleted and created again under its old name, with the application's tables kept.

On kinesalite (moto keeps writing to a split shard). The first incarnation's rows hold
checkpoints of its shards and a split parent marked Finished; the second incarnation reuses
the shard IDs. None of those rows may be applied to it: nothing of the new stream is lost.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import attrs
import pytest

from demo.servers import LocalServer
from kinsumer import Kinsumer
from tests.conftest import unique
from tests.helpers import shard_hash_keys, wait_until
from tests.reshard import create_again, split_first, wait_active
from tests.server.conftest import SERVER_CONFIG

pytestmark = pytest.mark.server


def put(kinesis: Any, stream: str, ids: range) -> list[int]:
    """Records spread over every open shard."""
    keys = list(shard_hash_keys(kinesis, stream).values())
    entries = [
        {"Data": json.dumps({"id": i}).encode(), "PartitionKey": "k", "ExplicitHashKey": keys[i % len(keys)]}
        for i in ids
    ]
    kinesis.put_records(StreamName=stream, Records=entries)
    return list(ids)


def consume_all(k: Kinsumer, expected: list[int]) -> list[int]:
    got: list[int] = []
    while len(got) < len(expected):
        record = k.next_record(timeout=30)
        assert record is not None
        got.append(json.loads(record.data)["id"])
    return got


@pytest.mark.parametrize("two_streams", [False, True], ids=["its-own-application", "second-of-two-streams"])
def test_a_stream_created_again_under_its_name_is_read_from_its_start(
    kinesalite: LocalServer, moto_server: LocalServer, caplog: pytest.LogCaptureFixture, two_streams: bool
) -> None:
    """Also as the second stream of an application of two (its rows keyed ``<stream>/<shard>``), beside
    a first stream that stays as it is (empty here)."""
    kinesis, db = kinesalite.client("kinesis"), moto_server.client("dynamodb")
    stream, app, home = unique("stream"), unique("app"), unique("stream")
    config = attrs.evolve(SERVER_CONFIG, initial_position="TRIM_HORIZON")
    for name in [stream, home] if two_streams else [stream]:
        kinesis.create_stream(StreamName=name, ShardCount=1)
        wait_active(kinesis, name)
    key = (lambda shard: f"{stream}/{shard}") if two_streams else (lambda shard: shard)

    def consumer() -> Kinsumer:
        streams = [home, stream] if two_streams else stream
        return Kinsumer(streams, app, "c", config, kinesis=kinesalite.client("kinesis"), dynamodb=db)

    first = consumer()
    first.create_required_tables()
    with first:  # the first incarnation: shard 0 is read, split, and read to its end; its children read
        before = put(kinesis, stream, range(0, 10))
        assert sorted(consume_all(first, before)) == before
        parent = split_first(kinesis, stream)
        after = put(kinesis, stream, range(10, 30))
        assert sorted(consume_all(first, after)) == after
        rows = lambda: db.scan(TableName=f"{app}_checkpoints", ConsistentRead=True)["Items"]  # noqa: E731
        wait_until(
            lambda: any(r["Shard"]["S"] == key(parent) and "Finished" in r for r in rows()), 30, "the parent finished"
        )
        wait_until(lambda: sum("SequenceNumber" in r for r in rows()) == 3, 30, "every shard's checkpoint")

    create_again(kinesis, stream, 2)  # shardId-000000000000 and -001 again
    written = put(kinesis, stream, range(100, 140))

    with caplog.at_level(logging.WARNING, logger="kinsumer.lease"), consumer() as second:
        got = consume_all(second, written)
    assert sorted(got) == written  # nothing of the new stream lost, nothing repeated
    warnings = [r.getMessage() for r in caplog.records if "belongs to an earlier stream" in r.getMessage()]
    assert len(warnings) == 2 and all(stream in w for w in warnings)  # both reused shard IDs; the row overwritten
