"""docs/grafana/kinsumer.json: every query names metrics a PrometheusStatReceiver exports."""

from __future__ import annotations

import inspect
import json
import pathlib
import re
from collections.abc import Iterator
from typing import Any

import pytest

from kinsumer import StatReceiver
from kinsumer.metrics import PrometheusStatReceiver

DASHBOARD = pathlib.Path(__file__).resolve().parents[2] / "docs" / "grafana" / "kinsumer.json"
SHARD = "shardId-000000000000"

#: PromQL words that are not metric names where they stand without "(" after them
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}
#: label lists (by (...), on (...)), label matchers {...}, ranges [...], strings, Grafana's $variables, and
#: numbers and durations (0.99, 5m)
NOT_NAMES = re.compile(
    r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)|\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"|'[^']*'"
    r"|\$\w+|(?<![\w:])\d[\w.]*"
)
IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers that are neither functions nor keywords."""
    text = NOT_NAMES.sub(" ", expr)
    names = set()
    for match in IDENTIFIER.finditer(text):
        after = text[match.end() :].lstrip()
        if not after.startswith("(") and match.group() not in KEYWORDS:
            names.add(match.group())
    return names


def exprs(node: Any) -> Iterator[str]:
    """Every ``expr`` in the dashboard, however deep (panels, rows' panels, targets)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr" and isinstance(value, str):
                yield value
            else:
                yield from exprs(value)
    elif isinstance(node, list):
        for item in node:
            yield from exprs(item)


def exported() -> set[str]:
    """The sample names of a live PrometheusStatReceiver's registry once it has seen every event."""
    stats = PrometheusStatReceiver()
    stats.shard_gained(SHARD)
    stats.records_fetched(SHARD, 3, 100)
    stats.record_delivered(SHARD, 0.5)
    stats.record_handled(SHARD, 0.02)
    stats.record_age(SHARD, 2.0)
    stats.checkpoint_written(SHARD)
    stats.handoff(SHARD, 1.0, True)
    stats.error_retried("UpdateItem", "ThrottlingException")
    stats.error_abandoned("UpdateItem", "ThrottlingException")
    stats.malformed_aggregates(SHARD, 1)
    stats.outside_range(SHARD, 2, False)
    stats.handler_failed(SHARD, "ValueError")
    stats.handler_retried(SHARD)
    stats.handler_timed_out(SHARD, 1.0)
    stats.record_expired(SHARD, 10.0)
    stats.dead_lettered(SHARD, "raised")
    stats.hook_failed(SHARD, "on_revoked", "RuntimeError")
    stats.dynamodb_call("PutItem", "clients", 0.01, None)
    return {sample.name for metric in stats.registry.collect() for sample in metric.samples}


def unknown_names(dashboard: dict[str, Any], names: set[str]) -> dict[str, set[str]]:
    """{expr: the names in it that are not in ``names``}, for each expr that has some."""
    found = {expr: metric_names(expr) - names for expr in exprs(dashboard)}
    return {expr: missing for expr, missing in found.items() if missing}


def load() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def test_every_query_of_the_dashboard_names_metrics_kinsumer_exports() -> None:
    dashboard = load()
    queries = list(exprs(dashboard))
    assert len(queries) >= 15
    assert unknown_names(dashboard, exported()) == {}
    # every query reads at least one metric, and between them they read every family the receiver has
    assert all(metric_names(q) for q in queries)
    read = {name for q in queries for name in metric_names(q)}
    families = {name.removesuffix("_bucket") for name in read}
    assert {
        "kinsumer_records_fetched_total", "kinsumer_records_delivered_total", "kinsumer_millis_behind_latest",
        "kinsumer_record_age_seconds", "kinsumer_handler_failures_total", "kinsumer_dead_lettered_total",
        "kinsumer_handoffs_total", "kinsumer_handoff_seconds", "kinsumer_errors_retried_total", "kinsumer_shards_owned",
    } <= families  # fmt: skip


def test_the_check_finds_a_name_kinsumer_does_not_export() -> None:
    dashboard = load()
    wrong = 'sum by (shard) (rate(kinsumer_records_eaten_total{job="x"}[5m]))'
    dashboard["panels"].append({"type": "timeseries", "targets": [{"expr": wrong}]})
    assert unknown_names(dashboard, exported()) == {wrong: {"kinsumer_records_eaten_total"}}


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("sum(rate(a_total[$__rate_interval]))", {"a_total"}),
        ('histogram_quantile(0.99, sum by (le) (rate(b_bucket{shard=~"x|y"}[5m])))', {"b_bucket"}),
        ("sum(rate(c_sum[1m])) / sum(rate(c_count[1m]))", {"c_sum", "c_count"}),
        ("max by (shard) (d) > bool 0 or on (shard) e offset 5m", {"d", "e"}),
    ],
)
def test_metric_names_are_read_from_promql(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_the_dashboard_is_grafana_json_over_a_prometheus_datasource() -> None:
    dashboard = load()
    assert dashboard["uid"] == "kinsumer" and dashboard["title"] == "kinsumer"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert {t["refId"] for t in panel["targets"]} == {chr(65 + i) for i in range(len(panel["targets"]))}


def test_the_receiver_the_dashboard_is_checked_against_is_fed_every_event() -> None:
    """exported() calls every hook of StatReceiver that adds a series (all but flush and shard_lost, which
    remove them, and the per-run forms of record_delivered and record_handled, which the Prometheus receiver
    does not take: its histograms have every record), so a new metric cannot be left out of it."""
    hooks = {name for name, _ in inspect.getmembers(StatReceiver, inspect.isfunction) if not name.startswith("_")}
    called = set(re.findall(r"stats\.(\w+)\(", inspect.getsource(exported)))
    adding = hooks - {"flush", "shard_lost", "records_delivered", "records_handled"}
    assert adding <= called, sorted(adding - called)
