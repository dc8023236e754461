"""grafana/velamq-dashboard.json queries only metrics that /metrics exports (OP-3, OT-2).

The test starts a real broker, produces and consumes a little so that every family has samples
(topic, subscription and storage figures), scrapes /metrics, and checks every metric name used in
any PromQL expression of the dashboard (panels, rows, template variables) against the scrape. The
names come from a small PromQL tokenizer, not a regular expression over the text: label names and
values inside {...}, label lists after by/without/on/ignoring/group_left/group_right, ranges
[...], function and aggregation names and keywords are not metric names. A panel that queries an
unknown metric, or calls a function PromQL does not have, fails the test.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from wait_helpers import wait_until

from velamq.testing import BrokerProcess, run_broker

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """This module reads per-topic and per-subscription samples: topic-level metrics on (by
    default /metrics sums the topics of each namespace)."""
    config = tmp_path_factory.mktemp("conf") / "broker.conf"
    config.write_text("exposeTopicLevelMetricsInPrometheus=true\n")
    with run_broker(extra_args=["--config", str(config)]) as b:
        yield b

DASHBOARD = Path(__file__).resolve().parents[2] / "grafana" / "velamq-dashboard.json"

FUNCTIONS = frozenset({  # PromQL's aggregation operators and functions
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile",
    "limitk", "limit_ratio", "abs", "absent", "absent_over_time", "ceil", "changes", "clamp", "clamp_max",
    "clamp_min", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "delta", "deriv", "exp", "floor",
    "histogram_avg", "histogram_count", "histogram_fraction", "histogram_quantile", "histogram_stddev",
    "histogram_stdvar", "histogram_sum", "holt_winters", "double_exponential_smoothing", "hour", "idelta",
    "increase", "irate", "label_join", "label_replace", "ln", "log2", "log10", "minute", "month", "predict_linear",
    "rate", "resets", "round", "scalar", "sgn", "sort", "sort_desc", "sort_by_label", "sort_by_label_desc", "sqrt",
    "time", "timestamp", "vector", "year", "avg_over_time", "min_over_time", "max_over_time", "sum_over_time",
    "count_over_time", "quantile_over_time", "stddev_over_time", "stdvar_over_time", "last_over_time",
    "present_over_time", "mad_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh", "cos", "cosh", "sin",
    "sinh", "tan", "tanh", "deg", "pi", "rad", "start", "end",
})
AGGREGATORS = frozenset({"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk",
                         "topk", "quantile", "limitk", "limit_ratio"})  # these may read `sum by (x) (...)`
KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"})
LABEL_LIST_MODIFIERS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})

_TOKEN = re.compile(r"""
      (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
    | (?P<var>\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*)
    | (?P<number>(?:0x[0-9a-fA-F]+|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)(?:(?:ms|[smhdwy])(?:\d+(?:ms|[smhdwy]))*)?)
    | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
    | (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^<>=,(){}\[\]@:])
    | (?P<space>\s+)
""", re.VERBOSE)


def tokenize(expr: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    while pos < len(expr):
        match = _TOKEN.match(expr, pos)
        if match is None:
            raise ValueError(f"cannot tokenize {expr[pos:pos + 20]!r} in {expr!r}")
        if match.lastgroup != "space":
            tokens.append((str(match.lastgroup), match.group()))
        pos = match.end()
    return tokens


def _closing(tokens: list[tuple[str, str]], start: int, open_: str, close: str) -> int:
    """Index of the token that closes the bracket opened at tokens[start]."""
    depth = 0
    for i in range(start, len(tokens)):
        if tokens[i][1] == open_:
            depth += 1
        elif tokens[i][1] == close:
            depth -= 1
            if depth == 0:
                return i
    raise ValueError(f"unbalanced {open_!r} in {' '.join(t for _, t in tokens)}")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects."""
    tokens = tokenize(expr)
    names: set[str] = set()
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        following = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if text == "{":  # label matchers: only a __name__ matcher names a metric
            end = _closing(tokens, i, "{", "}")
            inner = tokens[i + 1:end]
            for j in range(len(inner) - 2):
                if inner[j] == ("ident", "__name__") and inner[j + 1][1] == "=" and inner[j + 2][0] == "string":
                    names.add(inner[j + 2][1][1:-1])
            i = end
        elif text == "[":  # a range or subquery: durations and Grafana variables
            i = _closing(tokens, i, "[", "]")
        elif kind == "ident":
            if text in LABEL_LIST_MODIFIERS:
                if following == "(":
                    i = _closing(tokens, i + 1, "(", ")")
            elif text in AGGREGATORS and following in ("by", "without"):
                pass
            elif following == "(":
                if text not in FUNCTIONS:
                    raise ValueError(f"{text}() is not a PromQL function (in {expr!r})")
            elif text not in KEYWORDS:
                names.add(text)
        i += 1
    return names


def variable_query_names(query: str) -> set[str]:
    """Grafana's label_values(metric{...}, label) / label_values(label): the metric, if any."""
    match = re.fullmatch(r"\s*label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*", query, re.DOTALL)
    if match:
        return metric_names(match.group(1))
    if re.fullmatch(r"\s*label_values\(\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*", query):
        return set()
    return metric_names(query)


def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in items:
        yield panel
        yield from panels(panel.get("panels", []))


def dashboard_queries(dashboard: dict[str, Any]) -> list[tuple[str, set[str]]]:
    """(where, metric names) for every expression of the dashboard."""
    out = []
    for panel in panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            out.append((f"panel {panel['title']!r}", metric_names(target["expr"])))
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable["query"]
            text = query["query"] if isinstance(query, dict) else query
            out.append((f"variable ${variable['name']}", variable_query_names(text)))
    return out


def exported_names(page: str) -> set[str]:
    return {m.group(1) for line in page.splitlines()
            if line and not line.startswith("#") and (m := re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)", line))}


def test_the_promql_reader_finds_metric_names_only() -> None:
    assert metric_names('sum(rate(a_total{job="x", b=~"c|sum"}[5m])) by (instance, le) '
                        "/ on(instance) group_left(foo) b offset 1h") == {"a_total", "b"}
    assert metric_names("histogram_quantile(0.99, sum by (le) (rate(c_bucket[$__rate_interval])))") == {"c_bucket"}
    assert metric_names('{__name__="d", cluster="rate"}') == {"d"}
    assert metric_names("topk(10, e) and f unless g > bool 2") == {"e", "f", "g"}
    assert metric_names('label_replace(h, "dst", "$1", "src", "(.*)")') == {"h"}
    assert variable_query_names('label_values(i{cluster=~"$cluster"}, namespace)') == {"i"}
    assert grouped_by(tokenize("sum by (a, worker) (x) / sum(y) by (b)")) == {"a", "worker", "b"}
    with pytest.raises(ValueError, match="not a PromQL function"):
        metric_names("summ(x)")


@pytest.fixture(scope="module")
def scrape(broker: BrokerProcess) -> str:
    """/metrics after a little traffic: a topic with a producer, a subscription, consumed and acknowledged."""
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        topic = "persistent://public/default/grafana-dashboard"
        consumer = client.subscribe(topic, "dash", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic)
        for i in range(20):
            producer.send(f"m{i}".encode())
        for _ in range(10):
            consumer.acknowledge(consumer.receive(10_000))
        # Wait for the families a loaded topic with a subscription exports (the snapshot may lag).
        wanted = {"pulsar_in_messages_total", "pulsar_subscription_back_log", "pulsar_out_messages_total"}
        pages: list[str] = []

        def page_with_them() -> str | None:
            with urllib.request.urlopen(f"{broker.admin_url}/metrics", timeout=30) as response:
                pages.append(response.read().decode())
            return pages[-1] if wanted <= exported_names(pages[-1]) else None

        return wait_until(page_with_them, lambda: f"the families {sorted(wanted - exported_names(pages[-1]))}")
    finally:
        client.close()


@pytest.fixture(scope="module")
def workers_scrape() -> str:
    """/metrics of a broker of two workers: every worker's families merged, and the families only
    such a broker has (velamq_worker_*)."""
    with run_broker(workers=2) as broker:

        def merged_page() -> str | None:
            with urllib.request.urlopen(f"{broker.admin_url}/metrics", timeout=30) as response:
                page = response.read().decode()
            return page if 'worker="1"' in page else None

        return wait_until(merged_page, "a /metrics page with both workers' samples")


def test_every_metric_the_dashboard_queries_is_exported(scrape: str, workers_scrape: str) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    # One process exports everything but the workers' own families, which the Workers row reads.
    exported = exported_names(scrape) | {n for n in exported_names(workers_scrape) if n.startswith("velamq_worker_")}
    queries = dashboard_queries(dashboard)
    assert len(queries) > 40
    missing = sorted({f"{where}: {name}" for where, names in queries for name in names - exported})
    assert not missing, "metrics the dashboard queries but /metrics does not export:\n" + "\n".join(missing)
    # And the dashboard covers each part of /metrics the docs promise (broker, topics, caches, journal, buffer).
    used = set().union(*(names for _, names in queries))
    for prefix in ("pulsar_active_connections", "pulsar_rate_in", "pulsar_msg_backlog", "pulsar_storage_size",
                   "velamq_storage_tail_cache_hits_total", "velamq_storage_journal_fsyncs_total",
                   "velamq_storage_publish_buffer_bytes"):
        assert prefix in used


def grouped_by(tokens: list[tuple[str, str]]) -> set[str]:
    """The labels of every `by (...)` list."""
    labels: set[str] = set()
    for i, (_, text) in enumerate(tokens[:-1]):
        if text == "by" and tokens[i + 1][1] == "(":
            j = i + 2
            while j < len(tokens) and tokens[j][1] != ")":
                labels.add(tokens[j][1])
                j += 1
    return labels - {","}


def test_every_panel_adds_up_the_workers() -> None:
    """With several workers every sample has a worker label: each expression aggregates (so it
    shows the whole broker whatever the number of workers), and only the Workers row keeps the
    workers apart (`by (worker)`)."""
    dashboard = json.loads(DASHBOARD.read_text())
    row = ""
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
        for target in panel.get("targets", []):
            tokens = tokenize(target["expr"])
            assert tokens[0][1] in AGGREGATORS, (panel["title"], target["expr"])
            assert ("worker" in grouped_by(tokens)) == (row == "Workers"), (panel["title"], target["expr"])


def test_every_panel_queries_through_the_datasource_variable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    names = [v["name"] for v in dashboard["templating"]["list"]]
    assert names[:3] == ["datasource", "cluster", "namespace"]
    for panel in panels(dashboard["panels"]):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
    ids = [p["id"] for p in panels(dashboard["panels"])]
    assert len(ids) == len(set(ids))
