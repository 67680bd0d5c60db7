"""User records of KPL aggregates outside their shard's hash key range: finding them, the rule, the ranges."""

from __future__ import annotations

import hashlib
import threading
from typing import Any

import boto3
import pytest
from hypothesis import given
from hypothesis import strategies as st
from moto import mock_aws

from kinsumer import Config, ConfigError
from kinsumer.reading.kpl import deaggregate, hash_key, outside_range
from kinsumer.reading.reader import OutsideRule, outside_rule, user_records
from kinsumer.reading.shard_ranges import ShardRanges
from kinsumer.spark.options import SourceOptions
from kinsumer.stats import StatReceiver
from tests.unit.test_kpl import aggregate, kinesis_record

TOP = 2**128 - 1

users = st.lists(
    st.tuples(
        st.text(min_size=1, max_size=12),
        st.binary(max_size=20),
        st.one_of(st.none(), st.integers(0, TOP).map(str)),
    ),
    min_size=1,
    max_size=30,
)
ranges = st.tuples(st.integers(0, TOP), st.integers(0, TOP)).map(sorted).map(tuple)


class Counted(StatReceiver):
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, bool]] = []

    def outside_range(self, shard_id: str, count: int, dropped: bool) -> None:
        self.calls.append((shard_id, count, dropped))


def md5_key(record: tuple[str, bytes, str | None]) -> int:
    key, _, explicit = record
    return int(explicit) if explicit is not None else int(hashlib.md5(key.encode()).hexdigest(), 16)


@given(users, ranges)
def test_outside_range_finds_exactly_the_user_records_whose_hash_key_kinesis_would_route_elsewhere(
    written: list[tuple[str, bytes, str | None]], hash_range: tuple[int, int]
) -> None:
    records, _ = deaggregate([aggregate(written)])
    low, high = hash_range
    assert outside_range(records, hash_range) == [i for i, u in enumerate(written) if not low <= md5_key(u) <= high]
    assert [hash_key(r) for r in records] == [md5_key(u) for u in written]


def test_a_plain_record_is_never_outside_whatever_its_key() -> None:
    plain = [kinesis_record(b"x", key=f"k{i}") for i in range(20)]
    assert outside_range(plain, (0, 0)) == []


@given(users, ranges, st.booleans())
def test_user_records_delivers_or_drops_the_records_outside_and_counts_them_once(
    written: list[tuple[str, bytes, str | None]], hash_range: tuple[int, int], drop: bool
) -> None:
    page = [kinesis_record(b"plain", "4800"), aggregate(written, "4900")]
    stats = Counted()
    rule = outside_rule("s", "shard-1", hash_range, drop)
    records, outside = user_records(page, "shard-1", stats, outside=rule)
    low, high = hash_range
    wrong = [u for u in written if not low <= md5_key(u) <= high]
    assert outside == len(wrong)
    assert stats.calls == ([("shard-1", len(wrong), drop)] if wrong else [])
    kept = [u[1] for u in written if not drop or low <= md5_key(u) <= high]
    assert [r["Data"] for r in records] == [b"plain", *kept]


def test_without_a_rule_or_a_known_range_every_user_record_is_delivered_uncounted() -> None:
    page = [aggregate([("a", b"1", "0"), ("b", b"2", str(TOP))])]
    stats = Counted()
    for rule in (None, outside_rule("s", "shard-1", None, drop=True)):
        records, outside = user_records(page, "shard-1", stats, outside=rule)
        assert (len(records), outside) == (2, 0)
    assert stats.calls == []


class Listing:
    """A Kinesis client whose ListShards answers from a list the test changes, counting the calls."""

    def __init__(self, shards: dict[str, tuple[int, int]]) -> None:
        self.shards = shards
        self.calls = 0
        self.meta = type("Meta", (), {"endpoint_url": "x", "region_name": "us-east-1"})()
        self.lock = threading.Lock()

    def list_shards(self, **params: Any) -> dict[str, Any]:
        with self.lock:
            self.calls += 1
        return {
            "Shards": [
                {
                    "ShardId": shard,
                    "HashKeyRange": {"StartingHashKey": str(low), "EndingHashKey": str(high)},
                    "SequenceNumberRange": {"StartingSequenceNumber": "1"},
                }
                for shard, (low, high) in self.shards.items()
            ]
        }


def test_one_listing_serves_every_shard_and_a_new_shard_is_listed_again_at_most_every_ten_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr("kinsumer.reading.shard_ranges.time.monotonic", lambda: now[0])
    kinesis = Listing({"shard-0": (0, 9), "shard-1": (10, 19)})
    known = ShardRanges(kinesis, "s")  # type: ignore[arg-type]
    assert known.of("shard-0") == (0, 9) and known.of("shard-1") == (10, 19) and kinesis.calls == 1
    kinesis.shards["shard-2"] = (20, 29)  # a child of a reshard since
    now[0] += 5
    assert known.of("shard-2") is None and kinesis.calls == 1  # listed 5 s ago: not again yet
    now[0] += 5
    assert known.of("shard-2") == (20, 29) and kinesis.calls == 2
    assert known.of("shard-1") == (10, 19) and kinesis.calls == 2


def test_a_listing_that_fails_leaves_the_range_unknown_and_warns_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr("kinsumer.reading.shard_ranges.time.monotonic", lambda: now[0])
    with mock_aws():
        kinesis = boto3.client("kinesis", region_name="us-east-1")
        known = ShardRanges(kinesis, "missing")
        for _ in range(3):
            assert known.of("shard-0") is None
            now[0] += 11
    warnings = [r.getMessage() for r in caplog.records if "could not list the shards of missing" in r.getMessage()]
    assert len(warnings) == 1 and "StreamNotFound" in warnings[0]


def test_the_rule_comes_from_config_and_the_spark_option_and_anything_else_is_refused() -> None:
    assert Config().kpl_outside_shard == "deliver"
    assert OutsideRule.listing(None, "s", Config(kpl_outside_shard="drop").kpl_outside_shard).drop
    with pytest.raises(ConfigError, match=r"Config\.kpl_outside_shard"):
        Config(kpl_outside_shard="keep")  # type: ignore[arg-type]
    assert SourceOptions.from_options({"streamName": "s", "kplOutsideShard": "DROP"}).drop_outside_shard
    assert not SourceOptions.from_options({"streamName": "s"}).drop_outside_shard
    with pytest.raises(ConfigError, match="option kplOutsideShard"):
        SourceOptions.from_options({"streamName": "s", "kplOutsideShard": "keep"})
