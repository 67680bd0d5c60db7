import datetime as dt
from typing import Any

import attrs
import pytest

from kinsumer import Config, ConfigError, Kinsumer, StatReceiver
from kinsumer.config import validate_names

INVALID: list[tuple[dict[str, Any], str, str]] = [
    ({"throttle_delay": 0.1}, "Config.throttle_delay", ">= 0.2"),
    ({"throttle_delay": "fast"}, "Config.throttle_delay", "number of seconds"),
    ({"throttle_delay": float("nan")}, "Config.throttle_delay", "finite"),
    ({"commit_frequency": 0}, "Config.commit_frequency", "> 0"),
    ({"shard_check_frequency": -1}, "Config.shard_check_frequency", "> 0"),
    ({"leader_action_frequency": 0}, "Config.leader_action_frequency", "> 0"),
    ({"leader_action_frequency": 1.0}, "Config.leader_action_frequency", ">= shard_check_frequency"),
    ({"client_record_max_age": 0}, "Config.client_record_max_age", "> 0"),
    ({"client_record_max_age": 5.5}, "Config.client_record_max_age", ">= 3 x shard_check_frequency"),
    ({"buffer_size": 0}, "Config.buffer_size", ">= 1"),
    ({"buffer_size": 2.5}, "Config.buffer_size", "integer"),
    ({"buffer_size": True}, "Config.buffer_size", "integer"),
    ({"manual_checkpointing": "yes"}, "Config.manual_checkpointing", "True or False"),
    ({"initial_position": "EARLIEST"}, "Config.initial_position", "TRIM_HORIZON, LATEST, AT_TIMESTAMP"),
    ({"initial_position": "AT_TIMESTAMP"}, "Config.initial_timestamp", "exactly when"),
    ({"initial_timestamp": dt.datetime(2026, 1, 1, tzinfo=dt.UTC)}, "Config.initial_timestamp", "exactly when"),
    (
        {"initial_position": "AT_TIMESTAMP", "initial_timestamp": dt.datetime(2026, 1, 1)},
        "Config.initial_timestamp",
        "timezone-aware",
    ),
    ({"max_records_per_call": 0}, "Config.max_records_per_call", "between 1 and 10000"),
    ({"max_records_per_call": 10_001}, "Config.max_records_per_call", "between 1 and 10000"),
    ({"handoff_timeout": -1}, "Config.handoff_timeout", ">= 0"),
    ({"handoff_timeout": 1e9}, "Config.handoff_timeout", "<= 300"),  # stop() would be unbounded
    ({"stats": None}, "Config.stats", "StatReceiver"),
    ({"stats": object()}, "Config.stats", "missing records_fetched"),
    ({"client_id": ""}, "Config.client_id", "non-empty"),
    ({"billing_mode": "FREE"}, "Config.billing_mode", "PAY_PER_REQUEST, PROVISIONED"),
    ({"assignment": "sticky"}, "Config.assignment", "modulo, balanced"),
    ({"read_capacity": 0}, "Config.read_capacity", ">= 1"),
    ({"write_capacity": 0}, "Config.write_capacity", ">= 1"),
    ({"max_idle_poll_interval": 0}, "Config.max_idle_poll_interval", "> 0"),
    ({"max_idle_poll_interval": "slow"}, "Config.max_idle_poll_interval", "number of seconds"),
    ({"max_idle_poll_interval": 0.5}, "Config.max_idle_poll_interval", ">= idle_poll_interval (1 s)"),
    ({"idle_poll_interval": 3.0, "max_idle_poll_interval": 2.0}, "Config.max_idle_poll_interval", ">= idle_poll"),
]


@pytest.mark.parametrize(("kwargs", "field", "rule"), INVALID, ids=[f"{f}:{next(iter(k))}" for k, f, _ in INVALID])
def test_each_invalid_value_names_its_field_and_rule(kwargs: dict[str, Any], field: str, rule: str) -> None:
    with pytest.raises(ConfigError) as info:
        Config(**kwargs)
    assert info.value.field == field
    assert rule in str(info.value)
    assert str(info.value).startswith(field)


def test_defaults_fail_over_within_fifteen_seconds() -> None:
    cfg = Config()
    assert cfg.effective_client_record_max_age + cfg.shard_check_frequency + cfg.throttle_delay <= 15


def test_evolve_rederives_the_default_max_age_and_validates() -> None:
    tuned = attrs.evolve(Config(), shard_check_frequency=0.5, commit_frequency=0.25, leader_action_frequency=1)
    assert tuned.effective_client_record_max_age == 1.75
    with pytest.raises(ConfigError, match="buffer_size"):
        attrs.evolve(tuned, buffer_size=-1)


def test_a_long_idle_shard_is_read_every_5_s_by_default_never_more_often_than_idle_poll_interval() -> None:
    assert Config().effective_max_idle_poll_interval == 5.0
    assert Config(idle_poll_interval=8).effective_max_idle_poll_interval == 8.0  # a longer idle_poll_interval wins
    assert Config(max_idle_poll_interval=1).effective_max_idle_poll_interval == 1.0  # no slowing down


def test_config_is_frozen() -> None:
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        Config().buffer_size = 5  # type: ignore[misc]


def test_ints_are_accepted_for_durations() -> None:
    assert Config(throttle_delay=1).throttle_delay == 1.0


def test_a_partial_stat_receiver_subclass_is_accepted() -> None:
    class Only(StatReceiver):
        def checkpoint_written(self, shard_id: str) -> None:
            pass

    assert isinstance(Config(stats=Only()).stats, Only)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("", "app", "c"), "stream_name"),
        (("bad name", "app", "c"), "stream_name"),
        (("s", "", "c"), "application_name"),
        (("s", "a/b", "c"), "application_name"),
        (("s", "app", ""), "client_name"),
    ],
)
def test_constructor_names_are_checked(args: tuple[str, str, str], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_names(*args)
    assert info.value.field == field
    with pytest.raises(ConfigError):
        Kinsumer(*args, kinesis=object(), dynamodb=object())  # type: ignore[arg-type]


def test_config_must_be_a_config() -> None:
    with pytest.raises(ConfigError, match=r"config must be a kinsumer\.Config"):
        Kinsumer("s", "app", "c", {"buffer_size": 1}, kinesis=object(), dynamodb=object())  # type: ignore[arg-type]


def test_missing_region_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    with pytest.raises(ConfigError, match="AWS_DEFAULT_REGION"):
        Kinsumer("s", "app", "c")
