"""The health verdict, reason by reason (a pure function of a snapshot), its HTTP endpoints, and
``Config.max_healthy_lag``."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinsumer import Config, ConfigError
from kinsumer.health import Health, HealthFacts, HealthReason, HealthServer, ShardLag, health_app, verdict

RUNNING = HealthFacts(
    state="running", heartbeat_age=0.5, heartbeat_limit=5.0, shards=(ShardLag("shard-0", 0, None),),
    max_healthy_lag=60.0, owned_once=True, idle_grace=20.0,
)  # fmt: skip


def codes(facts: HealthFacts) -> list[str]:
    return [reason.code for reason in verdict(facts).reasons]


def test_a_running_client_owning_shards_is_live_and_ready() -> None:
    assert verdict(RUNNING) == Health(live=True, ready=True, reasons=())


@pytest.mark.parametrize(
    ("change", "code", "live"),
    [
        ({"state": "new"}, "not_started", True),
        ({"state": "starting"}, "not_started", True),
        ({"state": "stopped"}, "stopped", False),
        ({"error": "StreamNotFound: clicks"}, "background_error", False),
        ({"heartbeat_age": 5.1}, "heartbeat_late", False),
        ({"stuck_calls": (("shard-0", 31.0),)}, "handler_stuck", False),
        ({"shards": (ShardLag("shard-0", 61_000, None),)}, "lag", True),
        ({"shards": (ShardLag("shard-0", 0, 61.0),)}, "lag", True),
        ({"idle_for": 0.0, "owned_once": False}, "no_shard_owned", True),
        ({"idle_for": 21.0}, "no_shard_owned", True),
    ],
)
def test_each_reason_fails_readiness_and_those_a_restart_fixes_fail_liveness(
    change: dict[str, object], code: str, live: bool
) -> None:
    health = verdict(attrs.evolve(RUNNING, **change))  # type: ignore[misc]
    assert [r.code for r in health.reasons] == [code]
    assert (health.live, health.ready) == (live, False)
    assert health.reasons[0].liveness is not live
    assert health.to_json()["reasons"][0]["code"] == code


@pytest.mark.parametrize(
    "change",
    [
        {"heartbeat_age": 5.0},  # at the limit, not past it
        {"heartbeat_age": None},  # none landed yet (run() writes the first)
        {"idle_for": 19.0},  # a rebalance under way: within the grace
        {"shards": (ShardLag("shard-0", 60_000, 60.0),)},  # at max_healthy_lag, not over it
        {"shards": (ShardLag("shard-0", 10**9, 10**6),), "max_healthy_lag": None},  # lag not checked
    ],
)
def test_what_is_not_a_reason(change: dict[str, object]) -> None:
    assert verdict(attrs.evolve(RUNNING, **change)).reasons == ()  # type: ignore[misc]


def test_a_lagging_shard_is_named() -> None:
    facts = attrs.evolve(RUNNING, shards=(ShardLag("a", 0, None), ShardLag("b", 120_000, None)))
    [reason] = verdict(facts).reasons
    assert reason.shard == "b" and "120.0 s behind" in reason.message and "max_healthy_lag (60 s)" in reason.message


def test_a_stopped_client_has_one_reason() -> None:
    facts = attrs.evolve(RUNNING, state="stopped", error="x", heartbeat_age=100.0, idle_for=100.0)
    assert codes(facts) == ["stopped"]


@given(
    heartbeat=st.floats(0, 100),
    stuck=st.lists(st.tuples(st.just("s"), st.floats(0, 100)), max_size=3),
    behind=st.integers(0, 200_000),
    age=st.none() | st.floats(0, 200),
    idle=st.none() | st.floats(0, 100),
    error=st.none() | st.just("boom"),
)
def test_live_and_ready_follow_the_reasons(
    heartbeat: float, stuck: list[tuple[str, float]], behind: int, age: float | None, idle: float | None,
    error: str | None,
) -> None:  # fmt: skip
    facts = attrs.evolve(
        RUNNING, heartbeat_age=heartbeat, stuck_calls=tuple(stuck), shards=(ShardLag("s", behind, age),),
        idle_for=idle, error=error,
    )  # fmt: skip
    health = verdict(facts)
    assert health.ready == (not health.reasons)
    assert health.live == all(r.code in ("lag", "no_shard_owned") for r in health.reasons)
    assert health.live == (error is None and heartbeat <= 5.0 and not stuck)


def test_max_healthy_lag_is_positive_seconds_or_none() -> None:
    assert Config().max_healthy_lag is None
    assert Config(max_healthy_lag=30).max_healthy_lag == 30.0
    for wrong in (0, -1.0, "60", float("inf"), True):
        with pytest.raises(ConfigError, match=r"Config\.max_healthy_lag"):
            Config(max_healthy_lag=wrong)  # type: ignore[arg-type]


# ----------------------------------------------------------------- serving


def get(url: str) -> tuple[int, dict[str, object] | str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            status, body = answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        status, body = error.code, error.read().decode()
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body


class Switch:
    def __init__(self) -> None:
        self.health = Health(True, True)

    def __call__(self) -> Health:
        return self.health


def test_the_server_answers_liveness_and_readiness_with_the_reasons() -> None:
    switch = Switch()
    with HealthServer(switch, port=0) as server:
        assert server.address == "127.0.0.1" and server.port > 0
        assert get(server.url + "/healthz") == (200, {"live": True, "ready": True, "reasons": []})
        assert get(server.url + "/readyz")[0] == 200
        lag = HealthReason("lag", "shard-0 is 61.0 s behind", "shard-0")
        switch.health = Health(True, False, (lag,))
        assert get(server.url + "/healthz")[0] == 200
        status, body = get(server.url + "/readyz")
        assert status == 503 and isinstance(body, dict)
        assert body["reasons"] == [
            {"code": "lag", "message": "shard-0 is 61.0 s behind", "shard": "shard-0", "liveness": False}
        ]
        switch.health = Health(False, False, (HealthReason("heartbeat_late", "late"),))
        assert get(server.url + "/healthz")[0] == 503
        assert get(server.url + "/metrics")[0] == 404  # no registry: only the two paths
        assert get(server.url + "/healthz?verbose=1")[0] == 503  # a query string does not matter
    server.close()  # idempotent
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(server.url + "/healthz", timeout=2)


def test_a_health_function_that_raises_is_a_500() -> None:
    def broken() -> Health:
        raise RuntimeError("bug")

    with HealthServer(broken) as server:
        assert get(server.url + "/healthz") == (500, {"error": "RuntimeError"})


def test_one_port_serves_health_and_prometheus_metrics() -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    registry = prometheus_client.CollectorRegistry()
    prometheus_client.Gauge("kinsumer_test_gauge", "a gauge", registry=registry).set(7)
    with HealthServer(Switch(), registry=registry) as server:
        status, body = get(server.url + "/metrics")
        assert status == 200 and isinstance(body, str) and "kinsumer_test_gauge 7.0" in body
        assert get(server.url + "/readyz")[0] == 200


def test_the_wsgi_app_refuses_other_methods() -> None:
    app = health_app(Switch())
    started: list[str] = []
    body = app({"PATH_INFO": "/healthz", "REQUEST_METHOD": "POST"}, lambda status, headers: started.append(status))  # type: ignore[arg-type,return-value]
    assert started == ["405 Method Not Allowed"] and b"GET only" in b"".join(body)


def test_the_prometheus_receiver_serves_health_on_its_own_port_when_given_it() -> None:
    pytest.importorskip("prometheus_client")
    from kinsumer.metrics import PrometheusStatReceiver

    stats = PrometheusStatReceiver()
    stats.shard_gained("shardId-000000000000")
    switch = Switch()
    port = stats.serve(health=switch)
    try:
        url = f"http://127.0.0.1:{port}"
        status, body = get(url + "/metrics")
        assert status == 200 and isinstance(body, str) and "kinsumer_shards_owned 1.0" in body
        assert get(url + "/healthz")[0] == 200
        switch.health = Health(False, False, (HealthReason("handler_stuck", "a call runs on"),))
        status, verdict = get(url + "/healthz")
        assert status == 503 and isinstance(verdict, dict) and verdict["reasons"][0]["code"] == "handler_stuck"
    finally:
        stats.close()
        stats.close()  # idempotent
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)
    plain = stats.serve()  # without health: prometheus_client's own server, which has no /healthz
    try:
        assert "kinsumer_shards_owned 1.0" in str(get(f"http://127.0.0.1:{plain}/metrics")[1])
    finally:
        stats.close()
