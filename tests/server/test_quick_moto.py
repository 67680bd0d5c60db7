"""The test servers' moto answers as moto does, only sooner (demo/quick_moto.py)."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st
from moto.kinesis.models import Shard
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

from demo import quick_moto

pytestmark = pytest.mark.server

START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def shard_of(gaps_ms: list[int]) -> Shard:
    """A shard holding one record per gap, each arriving ``gap`` ms after the one before."""
    shard = Shard(0, 0, 2**128 - 1)
    at = START
    for index, gap in enumerate(gaps_ms):
        number = int(shard.put_record(f"key-{index}", f"record-{index}".encode(), ""))
        at += dt.timedelta(milliseconds=gap)
        shard.records[number].created_at = at
    return shard


@given(
    gaps_ms=st.lists(st.integers(0, 5000), max_size=40),
    after=st.integers(0, 45),
    limit=st.none() | st.integers(1, 50),
)
def test_get_records_answers_as_moto_does(gaps_ms: list[int], after: int, limit: int | None) -> None:
    shard = shard_of(gaps_ms)
    theirs = quick_moto._moto_get_records(shard, str(after), limit)
    ours = quick_moto._get_records(shard, str(after), limit)
    assert ours == theirs
    assert quick_moto._last_number(shard) == max(shard.records, default=0)
    assert quick_moto._first_number(shard) == min(shard.records, default=0)


def test_a_shard_numbered_otherwise_is_walked_as_moto_walks_it() -> None:
    shard = shard_of([10, 20, 30, 40])
    del shard.records[2]  # not 1, 2, 3...: moto itself never does this
    assert quick_moto._get_records(shard, "0", 2) == quick_moto._moto_get_records(shard, "0", 2)
    assert [r.sequence_number for r in quick_moto._get_records(shard, "0", 2)[0]] == [1, 3]


@pytest.mark.parametrize(
    "host",
    [None, "moto_api", "dynamodb", "kinesis.us-east-1.amazonaws.com", "dynamodb.eu-west-1.amazonaws.com",
     "sqs.us-east-1.amazonaws.com", "127.0.0.1:5000", "example.org"],
)  # fmt: skip
def test_the_dispatcher_finds_the_backend_moto_finds_and_remembers_it(host: str | None) -> None:
    quick = quick_moto.QuickDispatch(create_backend_app)
    found = DomainDispatcherApplication(create_backend_app).get_backend_for_host(host)
    assert quick.get_backend_for_host(host) == found
    assert quick.get_backend_for_host(host) == found  # remembered
    assert host in quick._backends
