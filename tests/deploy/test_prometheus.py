"""The alert rules and the Grafana dashboard in deploy/, checked with Debian's Prometheus: rules and dashboard
expressions parse (`promtool check rules`), every alert fires where it should and not where it should not
(`promtool test rules`), they use only metrics the daemon exports, every alert has a runbook section, and a real
Prometheus server scraping a running daemon evaluates every expression (those that should have data have it)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tableservice.metrics import new_metrics
from tests.support.daemon_helpers import mor_table
from tests.support.fixtures import in_ci

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "tableservice-alerts.yaml"
RULE_TESTS = DEPLOY / "prometheus" / "tableservice-alerts.test.yaml"
DASHBOARD = DEPLOY / "grafana" / "tableservice.json"
RUNBOOK = DEPLOY / "RUNBOOK.md"
SUFFIXES = ("_bucket", "_sum", "_count", "_total", "_created")


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        if in_ci():
            pytest.fail(f"{name} is missing in CI (apt-get install -y prometheus)")
        pytest.skip(f"{name} not found (apt-get install -y prometheus)")
    return found


def _alerts() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def _panel_exprs(table: str = ".*") -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"].replace("$table", table) for p in dashboard["panels"] for t in p.get("targets", [])]


def test_rules_parse_and_their_unit_tests_pass() -> None:
    promtool = _tool("promtool")
    checked = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in checked.stdout
    tested = subprocess.run(
        [promtool, "test", "rules", RULE_TESTS.name], capture_output=True, text=True, cwd=RULE_TESTS.parent
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {c["alertname"] for t in tests for c in t["alert_rule_test"] if c.get("exp_alerts")}
    assert fired == {a["alert"] for a in _alerts()}  # every alert has a case where it fires


def test_dashboard_expressions_parse(tmp_path: Path) -> None:
    promtool = _tool("promtool")
    exprs = _panel_exprs()
    rules = {
        "groups": [{"name": "dashboard", "rules": [{"record": f"panel_{i}", "expr": e} for i, e in enumerate(exprs)]}]
    }
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    checked = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert len(exprs) == len(json.loads(DASHBOARD.read_text())["panels"])


def test_rules_and_dashboard_use_only_exported_metrics() -> None:
    metrics = new_metrics(process_metrics=False)
    exported = {line.split()[2] for line in metrics.render()[0].decode().splitlines() if line.startswith("# TYPE ")}
    used = set()
    for text in [a["expr"] for a in _alerts()] + _panel_exprs():
        for name in re.findall(r"\btableservice_[a-z_]+", text):
            family = name
            for suffix in SUFFIXES:
                if family.endswith(suffix) and family[: -len(suffix)] in exported:
                    family = family[: -len(suffix)]
            used.add(family)
    assert used and used <= exported, used - exported


def test_every_alert_has_a_runbook_section() -> None:
    headings = {line[3:].strip().lower() for line in RUNBOOK.read_text().splitlines() if line.startswith("## ")}
    for alert in _alerts():
        assert alert["alert"].lower() in headings, alert["alert"]
        assert alert["annotations"]["runbook_url"].endswith("#" + alert["alert"].lower())
        assert alert["labels"]["severity"] in ("warning", "critical")
        assert alert["annotations"]["summary"] and alert["annotations"]["description"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


def _query(port: int, expr: str) -> Any:
    return _get(f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))


@pytest.mark.spark
def test_a_real_prometheus_scraping_the_daemon_evaluates_every_expression(tmp_path: Path) -> None:
    prometheus = _tool("prometheus")
    table = mor_table(tmp_path / "t", records=100, commits=3)
    metrics_port, prom_port = _free_port(), _free_port()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"""service:
  poll_interval_seconds: 0.5
  http: {{host: 127.0.0.1, port: {metrics_port}}}
spark:
  master: "local[1]"
  conf: {{spark.ui.enabled: "false"}}
defaults:
  compaction:
    hoodie.compact.inline.max.delta.commits: 2
tables:
  - uri: {table}
    name: trips
""")
    (tmp_path / "prometheus.yml").write_text(f"""global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: tableservice
    static_configs: [{{targets: ["127.0.0.1:{metrics_port}"]}}]
""")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    daemon = subprocess.Popen(
        [str(Path(sys.executable).parent / "tableservice"), "run", "--config", str(cfg)],
        stdout=(tmp_path / "daemon.log").open("w"),
        stderr=subprocess.STDOUT,
        env=env,
    )
    server = subprocess.Popen(
        [
            prometheus,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=(tmp_path / "prometheus.log").open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                done = _query(prom_port, 'tableservice_actions_completed_total{action="compaction"}')["data"]["result"]
                if done and float(done[0]["value"][1]) >= 1:
                    break
            except OSError:
                pass
            time.sleep(1)
        else:
            raise AssertionError("no compaction was scraped: " + (tmp_path / "daemon.log").read_text()[-2000:])
        time.sleep(3)  # a few more scrapes, for the rates
        empty = []
        for expr in _panel_exprs() + [a["expr"] for a in _alerts()]:
            answer = _query(prom_port, expr)
            assert answer["status"] == "success", (expr, answer)
            if not answer["data"]["result"]:
                empty.append(expr)
        with_data = [
            "sum(tableservice_up)",
            'sum by (table, action) (tableservice_pending_actions{table=~".*"})',
            'sum by (table, action) (rate(tableservice_actions_completed_total{table=~".*"}[5m]))',
            'time() - max by (table) (tableservice_last_successful_poll_timestamp_seconds{table=~".*"})',
            "min(tableservice_config_last_reload_successful)",
            "sum(tableservice_spark_up)",
            "count(tableservice_up == 1)",
            "sum by (instance) (tableservice_leases_held)",
            'sum by (table, action) (rate(tableservice_executor_seconds_total{table=~".*"}[15m]))',
        ]
        assert not [e for e in with_data if e in empty], empty
        up = _query(prom_port, 'up{job="tableservice"}')["data"]["result"]
        assert [r["value"][1] for r in up] == ["1"]
    finally:
        for proc in (server, daemon):
            proc.terminate()
        for proc in (server, daemon):
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
