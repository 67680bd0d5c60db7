"""kinsumer.metrics without AWS: the logging receiver's aggregation and interval, Prometheus metrics."""

from __future__ import annotations

import importlib
import logging
import sys
import threading
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry

import kinsumer
import kinsumer.metrics
from kinsumer import Config, StatReceiver
from kinsumer.metrics import LoggingStatReceiver, PrometheusStatReceiver

SHARD = "shardId-000000000000"
OTHER = "shardId-000000000001"
LOGGER = "kinsumer.metrics"


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def run_threads(count: int, work: Callable[[int], None]) -> None:
    """Run ``work(i)`` on ``count`` threads started together; re-raise the first failure."""
    start = threading.Barrier(count)
    errors: list[BaseException] = []

    def target(i: int) -> None:
        try:
            start.wait(10)
            work(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "a worker thread hung"
    if errors:
        raise errors[0]


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


# ---------------------------------------------------------------- LoggingStatReceiver


def test_both_receivers_are_valid_config_stats() -> None:
    for receiver in (LoggingStatReceiver(), PrometheusStatReceiver()):
        assert isinstance(receiver, StatReceiver)
        assert Config(stats=receiver).stats is receiver


def test_logging_receiver_aggregates_from_several_threads(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    stats = LoggingStatReceiver(interval=3600, clock=FakeClock())

    def work(i: int) -> None:
        shard = f"shardId-{i % 2:012d}"
        for n in range(1000):
            stats.records_fetched(shard, 2, n)
            stats.record_delivered(shard, 0.001 * (n % 10) + i)
            stats.checkpoint_written(shard)
            stats.error_retried("GetRecords", "ProvisionedThroughputExceededException")
            stats.handoff(shard, 0.5, clean=n % 4 != 0)
            stats.shard_gained(shard)
            stats.shard_lost(shard)

    run_threads(4, work)
    totals = stats.totals()
    assert totals["records_fetched"] == {SHARD: 4000, OTHER: 4000}
    assert totals["records_delivered"] == {SHARD: 2000, OTHER: 2000}
    assert totals["checkpoints_written"] == 4000
    assert totals["errors_retried"] == {("GetRecords", "ProvisionedThroughputExceededException"): 4000}
    assert totals["handoffs_clean"] == 3000
    assert totals["handoffs_timed_out"] == 1000
    assert totals["shards_gained"] == totals["shards_lost"] == 4000
    assert totals["millis_behind_latest"] == {}  # every shard was lost last
    assert totals["delivery_latency_max_seconds"] == pytest.approx(3.009)
    assert totals["delivery_latency_avg_seconds"] == pytest.approx(1.5045)
    assert lines(caplog) == []  # the interval never passed
    summary = stats.summary()
    assert "fetched=8000 " in summary and "delivered=4000 " in summary and "checkpoints=4000 " in summary
    assert "retried[GetRecords/ProvisionedThroughputExceededException]=4000" in summary


def test_logging_receiver_logs_one_line_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    clock = FakeClock()
    stats = LoggingStatReceiver(interval=10, clock=clock)
    for _ in range(5):
        stats.record_delivered(SHARD, 0.2)
    stats.records_fetched(SHARD, 7, 1234)
    clock.now += 9.9
    stats.checkpoint_written(SHARD)
    assert lines(caplog) == []  # still inside the first interval

    clock.now += 0.1  # the interval has passed: the next call logs it, then counts itself
    stats.record_delivered(SHARD, 0.4)
    stats.record_delivered(SHARD, 0.4)
    [first] = lines(caplog)
    assert first.startswith("kinsumer stats interval_s=10.0 ")
    for part in ("fetched=7", "delivered=5", "delivered_total=5", "checkpoints=1", "max_lag_ms=1234"):
        assert f" {part} " in first
    assert "latency_avg_s=0.200 latency_max_s=0.200" in first
    assert f"shard[{SHARD}]=fetched:7,delivered:5,lag_ms:1234" in first
    assert caplog.records[-1].levelno == logging.INFO

    clock.now += 5
    for _ in range(100):
        stats.error_retried("PutItem", "ThrottlingException")
    assert len(lines(caplog)) == 1  # many calls within one interval: no second line

    clock.now += 25  # a long quiet spell still makes one line, covering all of it
    stats.error_retried("PutItem", "ThrottlingException")
    stats.error_retried("PutItem", "ThrottlingException")
    _, second = lines(caplog)
    assert "interval_s=30.0 " in second
    assert " delivered=2 " in second and " delivered_total=7 " in second and " fetched=0 " in second
    assert " errors_retried=100 " in second and "retried[PutItem/ThrottlingException]=100" in second
    assert stats.totals()["errors_retried"] == {("PutItem", "ThrottlingException"): 102}
    assert " errors_retried=2 " in stats.summary()  # the counters restarted after the line


def test_concurrent_calls_after_the_interval_log_exactly_one_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    clock = FakeClock()
    stats = LoggingStatReceiver(interval=1, clock=clock)
    for _ in range(10):
        stats.record_delivered(SHARD, 0.01)
    clock.now += 1.5

    def work(i: int) -> None:
        for _ in range(1000):
            stats.record_delivered(OTHER, 0.01)

    run_threads(4, work)
    [line] = lines(caplog)
    assert " delivered=10 " in line  # the first late call closed the interval before counting
    assert stats.totals()["records_delivered"] == {SHARD: 10, OTHER: 4000}
    assert " delivered=4000 " in stats.summary()


def test_logging_receiver_uses_the_given_logger_and_level(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    clock = FakeClock()
    stats = LoggingStatReceiver(interval=1, logger=logging.getLogger("app.kinesis"), level=logging.DEBUG, clock=clock)
    stats.shard_gained(SHARD)
    clock.now += 1
    stats.shard_gained(OTHER)
    [record] = [r for r in caplog.records if r.name == "app.kinesis"]
    assert record.levelno == logging.DEBUG
    assert " shards_owned=1 shards_gained=1 " in record.getMessage()
    assert " shards_owned=2 " in stats.summary()


def test_lag_is_the_latest_per_shard_and_forgotten_when_the_shard_is_lost() -> None:
    stats = LoggingStatReceiver(clock=FakeClock())
    stats.records_fetched(SHARD, 1, 500)
    stats.records_fetched(SHARD, 1, 20)
    stats.records_fetched(SHARD, 0, None)  # no value: the last one stands
    stats.records_fetched(OTHER, 1, 7)
    assert stats.totals()["millis_behind_latest"] == {SHARD: 20, OTHER: 7}
    assert " max_lag_ms=20 " in stats.summary()
    stats.shard_lost(SHARD)
    assert stats.totals()["millis_behind_latest"] == {OTHER: 7}
    assert " max_lag_ms=7 " in stats.summary()


def test_many_shards_are_counted_not_all_listed() -> None:
    stats = LoggingStatReceiver(clock=FakeClock())
    for i in range(25):
        stats.records_fetched(f"shardId-{i:012d}", 1, i)
    summary = stats.summary()
    assert summary.count("shard[") == 20
    assert summary.endswith(" shards_not_shown=5")


@pytest.mark.parametrize("interval", [0, -1, float("inf"), float("nan"), True, "60"])
def test_logging_receiver_rejects_a_bad_interval(interval: object) -> None:
    with pytest.raises(ValueError, match="interval"):
        LoggingStatReceiver(interval=interval)  # type: ignore[arg-type]


# ---------------------------------------------------------------- PrometheusStatReceiver


def sample(stats: PrometheusStatReceiver, name: str, **labels: str) -> float | None:
    return stats.registry.get_sample_value(name, labels)


def test_prometheus_counters_gauges_and_histograms() -> None:
    stats = PrometheusStatReceiver()
    stats.shard_gained(SHARD)
    stats.shard_gained(OTHER)
    stats.records_fetched(SHARD, 3, 1500)
    stats.records_fetched(SHARD, 2, None)
    stats.records_fetched(OTHER, 0, 0)
    for latency in (0.0005, 0.2, 45.0):
        stats.record_delivered(SHARD, latency)
    stats.checkpoint_written(SHARD)
    stats.checkpoint_written(SHARD)
    stats.error_retried("GetRecords", "ProvisionedThroughputExceededException")
    stats.error_retried("GetRecords", "ProvisionedThroughputExceededException")
    stats.error_retried("UpdateItem", "ThrottlingException")
    stats.handoff(SHARD, 0.3, clean=True)
    stats.handoff(OTHER, 10.2, clean=False)

    assert sample(stats, "kinsumer_records_fetched_total", shard=SHARD) == 5
    assert sample(stats, "kinsumer_records_fetched_total", shard=OTHER) == 0
    assert sample(stats, "kinsumer_records_delivered_total", shard=SHARD) == 3
    assert sample(stats, "kinsumer_millis_behind_latest", shard=SHARD) == 1500  # None leaves it
    assert sample(stats, "kinsumer_millis_behind_latest", shard=OTHER) == 0
    assert sample(stats, "kinsumer_checkpoints_total", shard=SHARD) == 2
    assert sample(stats, "kinsumer_shards_owned") == 2
    assert sample(stats, "kinsumer_handoffs_total", outcome="clean") == 1
    assert sample(stats, "kinsumer_handoffs_total", outcome="timed_out") == 1
    assert sample(stats, "kinsumer_handoff_seconds_count") == 2
    assert sample(stats, "kinsumer_handoff_seconds_sum") == pytest.approx(10.5)
    assert sample(stats, "kinsumer_handoff_seconds_bucket", le="1.0") == 1
    throttled = {"operation": "GetRecords", "error": "ProvisionedThroughputExceededException"}
    assert sample(stats, "kinsumer_errors_retried_total", **throttled) == 2
    assert sample(stats, "kinsumer_errors_retried_total", operation="UpdateItem", error="ThrottlingException") == 1
    assert sample(stats, "kinsumer_delivery_latency_seconds_count") == 3
    assert sample(stats, "kinsumer_delivery_latency_seconds_sum") == pytest.approx(45.2005)
    # buckets span a millisecond to a minute
    assert sample(stats, "kinsumer_delivery_latency_seconds_bucket", le="0.001") == 1
    assert sample(stats, "kinsumer_delivery_latency_seconds_bucket", le="0.25") == 2
    assert sample(stats, "kinsumer_delivery_latency_seconds_bucket", le="30.0") == 2
    assert sample(stats, "kinsumer_delivery_latency_seconds_bucket", le="60.0") == 3


def test_prometheus_removes_the_lag_series_of_a_lost_shard() -> None:
    stats = PrometheusStatReceiver()
    stats.shard_gained(SHARD)
    stats.shard_gained(OTHER)
    stats.records_fetched(SHARD, 1, 300)
    stats.records_fetched(OTHER, 1, 400)
    stats.shard_lost(SHARD)
    assert sample(stats, "kinsumer_millis_behind_latest", shard=SHARD) is None
    assert sample(stats, "kinsumer_millis_behind_latest", shard=OTHER) == 400
    assert sample(stats, "kinsumer_records_fetched_total", shard=SHARD) == 1  # counters stay
    assert sample(stats, "kinsumer_shards_owned") == 1
    stats.shard_lost("shardId-000000000009")  # never fetched: nothing to remove, no error
    assert sample(stats, "kinsumer_shards_owned") == 0


def test_prometheus_record_age_per_shard_is_zero_when_none_is_held_and_goes_with_the_shard() -> None:
    stats = PrometheusStatReceiver()
    stats.record_age(SHARD, 42.5)
    stats.record_age(OTHER, 3.0)
    assert sample(stats, "kinsumer_record_age_seconds", shard=SHARD) == 42.5
    stats.record_age(OTHER, None)
    assert sample(stats, "kinsumer_record_age_seconds", shard=OTHER) == 0
    stats.shard_lost(SHARD)
    assert sample(stats, "kinsumer_record_age_seconds", shard=SHARD) is None
    assert sample(stats, "kinsumer_record_age_seconds", shard=OTHER) == 0
    stats.flush()
    assert sample(stats, "kinsumer_record_age_seconds", shard=OTHER) is None


def test_prometheus_counts_errors_abandoned_by_operation_and_error() -> None:
    stats = PrometheusStatReceiver()
    stats.error_abandoned("UpdateItem", "ThrottlingException")
    stats.error_abandoned("UpdateItem", "ThrottlingException")
    assert sample(stats, "kinsumer_errors_abandoned_total", operation="UpdateItem", error="ThrottlingException") == 2


def test_prometheus_receivers_get_their_own_registries() -> None:
    first, second = PrometheusStatReceiver(), PrometheusStatReceiver()
    assert first.registry is not second.registry
    first.record_delivered(SHARD, 0.1)
    assert sample(first, "kinsumer_records_delivered_total", shard=SHARD) == 1
    assert sample(second, "kinsumer_records_delivered_total", shard=SHARD) is None


def test_prometheus_uses_a_given_registry_and_namespace() -> None:
    registry = CollectorRegistry()
    stats = PrometheusStatReceiver(registry=registry, namespace="billing")
    assert stats.registry is registry
    stats.records_fetched(SHARD, 4, 10)
    stats.shard_gained(SHARD)
    stats.handoff(SHARD, 1.0, clean=True)
    assert registry.get_sample_value("billing_records_fetched_total", {"shard": SHARD}) == 4
    assert registry.get_sample_value("billing_millis_behind_latest", {"shard": SHARD}) == 10
    assert registry.get_sample_value("billing_shards_owned") == 1
    assert registry.get_sample_value("billing_handoffs_total", {"outcome": "clean"}) == 1
    names = {metric.name for metric in registry.collect()}
    assert names and not [name for name in names if name.startswith("kinsumer")]
    assert all(name.startswith("billing_") for name in names)


def test_prometheus_client_missing_gives_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    original = kinsumer.metrics
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    # importing the module still works without prometheus_client ...
    monkeypatch.delitem(sys.modules, "kinsumer.metrics")
    monkeypatch.delattr(kinsumer, "metrics")  # restored afterwards, like sys.modules
    fresh = importlib.import_module("kinsumer.metrics")
    assert fresh is not original
    fresh.LoggingStatReceiver()
    # ... only the Prometheus receiver needs it
    with pytest.raises(ImportError, match=r"pip install 'pykinsumer\[prometheus\]'"):
        fresh.PrometheusStatReceiver()


def test_per_record_delivery_stats_are_skipped_only_for_receivers_that_ignore_them() -> None:
    from kinsumer.stats import GuardedStats

    class Deliveries(StatReceiver):
        def record_delivered(self, shard_id: str, latency_seconds: float) -> None:
            pass

    class DuckTyped:
        def record_delivered(self, shard_id: str, latency_seconds: float) -> None:
            pass

    assert GuardedStats(StatReceiver()).wants_deliveries is False
    assert GuardedStats(LoggingStatReceiver()).wants_deliveries is True
    assert GuardedStats(Deliveries()).wants_deliveries is True
    assert GuardedStats(DuckTyped()).wants_deliveries is True  # type: ignore[arg-type]


def test_a_receiver_of_runs_gets_runs_and_a_receiver_of_records_gets_records_whichever_form_is_called() -> None:
    from kinsumer.stats import GuardedStats, KeyedStats

    class Runs(StatReceiver):
        def __init__(self) -> None:
            self.calls: list[tuple[str, str, int, float]] = []

        def records_delivered(self, shard_id: str, count: int, latency_seconds: float) -> None:
            self.calls.append(("delivered", shard_id, count, latency_seconds))

        def records_handled(self, shard_id: str, count: int, seconds: float) -> None:
            self.calls.append(("handled", shard_id, count, seconds))

    class Records(StatReceiver):
        def __init__(self) -> None:
            self.calls: list[tuple[str, str, float]] = []

        def record_delivered(self, shard_id: str, latency_seconds: float) -> None:
            self.calls.append(("delivered", shard_id, latency_seconds))

        def record_handled(self, shard_id: str, seconds: float) -> None:
            self.calls.append(("handled", shard_id, seconds))

    runs, records = Runs(), Records()
    for guarded in (GuardedStats(runs), GuardedStats(records)):
        guarded.record_delivered(SHARD, 0.5)  # next() hands one over
        guarded.records_delivered(SHARD, 3, 0.25)  # process() hands a run over
        guarded.record_handled(SHARD, 0.125)  # a retry is done
        guarded.records_handled(SHARD, 2, 0.0625)  # a run is done
    assert runs.calls == [
        ("delivered", SHARD, 1, 0.5), ("delivered", SHARD, 3, 0.25), ("handled", SHARD, 1, 0.125),
        ("handled", SHARD, 2, 0.0625),
    ]  # fmt: skip
    assert (
        records.calls
        == [("delivered", SHARD, 0.5)]
        + [("delivered", SHARD, 0.25)] * 3
        + [("handled", SHARD, 0.125)]
        + [("handled", SHARD, 0.0625)] * 2
    )
    guarded = GuardedStats(runs)
    assert (guarded.wants_deliveries, guarded.deliveries_per_run, guarded.wants_handled, guarded.handled_per_run) == (
        True, True, True, True,
    )  # fmt: skip
    assert GuardedStats(records).deliveries_per_run is False and GuardedStats(records).handled_per_run is False
    # the readers of a second stream name their shards <stream>/<shard>, in either form
    runs.calls.clear()
    keyed = KeyedStats(guarded, lambda shard_id: f"other/{shard_id}")
    keyed.record_delivered(SHARD, 0.5)
    keyed.records_handled(SHARD, 4, 0.01)
    assert runs.calls == [("delivered", f"other/{SHARD}", 1, 0.5), ("handled", f"other/{SHARD}", 4, 0.01)]


def test_malformed_aggregates_are_counted_by_both_receivers(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    logging_stats = LoggingStatReceiver(interval=10, clock=clock)
    prometheus = PrometheusStatReceiver()
    for receiver in (logging_stats, prometheus):
        receiver.malformed_aggregates(SHARD, 2)
        receiver.malformed_aggregates(OTHER, 1)
    assert logging_stats.totals()["malformed_aggregates"] == 3
    assert sample(prometheus, "kinsumer_malformed_aggregates_total", shard=SHARD) == 2
    caplog.set_level(logging.INFO, logger=LOGGER)
    clock.now += 11
    logging_stats.checkpoint_written(SHARD)  # the first call after the interval logs its line
    assert "malformed_aggregates=3" in lines(caplog)[-1]


def test_flush_logs_the_interval_so_far_once_and_prometheus_drops_the_lag_series(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    clock = FakeClock()
    stats = LoggingStatReceiver(interval=60, clock=clock)
    stats.record_delivered(SHARD, 0.2)
    clock.now += 3
    stats.flush()
    [line] = lines(caplog)
    assert line.startswith("kinsumer stats interval_s=3.0 ") and " delivered=1 " in line
    stats.flush()  # nothing since: no line
    assert len(lines(caplog)) == 1

    prometheus = PrometheusStatReceiver()
    prometheus.shard_gained(SHARD)
    prometheus.records_fetched(SHARD, 4, 300)
    prometheus.flush()
    assert sample(prometheus, "kinsumer_millis_behind_latest", shard=SHARD) is None
    assert sample(prometheus, "kinsumer_records_fetched_total", shard=SHARD) == 4  # counters stay


def test_handler_failures_retries_and_dead_letters_are_counted_by_both_receivers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    logging_stats = LoggingStatReceiver(interval=10, clock=clock)
    prometheus = PrometheusStatReceiver()
    for receiver in (logging_stats, prometheus):
        for _ in range(3):
            receiver.handler_failed(SHARD, "ValueError")
        receiver.handler_retried(SHARD)
        receiver.handler_retried(SHARD)
        receiver.dead_lettered(SHARD, "raised")
        receiver.dead_lettered(OTHER, "crashed")
    totals = logging_stats.totals()
    assert (totals["handler_failures"], totals["handler_retries"]) == (3, 2)
    assert totals["dead_lettered"] == {"raised": 1, "crashed": 1}
    assert sample(prometheus, "kinsumer_handler_failures_total", shard=SHARD) == 3
    assert sample(prometheus, "kinsumer_handler_retries_total", shard=SHARD) == 2
    assert sample(prometheus, "kinsumer_dead_lettered_total", shard=OTHER, reason="crashed") == 1
    caplog.set_level(logging.INFO, logger=LOGGER)
    clock.now += 11
    logging_stats.checkpoint_written(SHARD)
    assert "handler_failures=3 handler_retries=2 dead_lettered=2" in lines(caplog)[-1]
