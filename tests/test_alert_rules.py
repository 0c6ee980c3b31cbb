"""The alert rules (docs/observability/alerts.yml) pass promtool's checks and unit tests (alerts.test.yml), every
rule has a test in which it fires, and every series a rule reads is one our processes export (the inference
worker's are checked against a live scrape in tests/engine/test_worker.py)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "observability"
PROMTOOL = ROOT / "var" / "tools" / "promtool"  # make promtool (bin/ensure-promtool)
PROMETHEUS_OWN = {"up"}


def _promtool(*args: str) -> subprocess.CompletedProcess:
    assert PROMTOOL.exists(), "promtool missing: run `make promtool`"
    return subprocess.run([str(PROMTOOL), *args], cwd=DOCS, capture_output=True, text=True, timeout=120)


def _rules() -> list[dict]:
    return [rule for group in yaml.safe_load((DOCS / "alerts.yml").read_text())["groups"] for rule in group["rules"]]


def test_the_rules_are_valid_and_their_unit_tests_pass():
    checked = _promtool("check", "rules", "alerts.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = _promtool("test", "rules", "alerts.test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_rule_has_a_test_in_which_it_fires():
    cases = yaml.safe_load((DOCS / "alerts.test.yml").read_text())["tests"]
    fired = {check["alertname"] for case in cases for check in case["alert_rule_test"] if check.get("exp_alerts")}
    assert {rule["alert"] for rule in _rules()} - fired == set()


def _exported() -> set[str]:
    """Every series name our processes export, as Prometheus stores them."""
    from prometheus_client import REGISTRY

    import config.metrics  # noqa: F401 - registers the web and intake series
    import triage.metrics  # noqa: F401 - registers the Celery triage, sweep and webhook series

    exported = {f"{family.name}{suffix}" for family in REGISTRY.collect()
                for suffix in ("", "_total", "_bucket", "_count", "_sum")}
    worker = set(re.findall(r"triage_(?:inference|slo|surge)_[a-z0-9_]+", (ROOT / "worker" / "metrics.py").read_text()))
    worker |= {f"{name}{suffix}" for name in worker for suffix in ("_total", "_bucket", "_count", "_sum")}
    return exported | worker | PROMETHEUS_OWN


def _read(expressions: list[str]) -> set[str]:
    return {name for expr in expressions for name in re.findall(r"\b(triage_[a-z0-9_]+|up)\b", expr)}


def test_the_rules_read_only_series_that_are_exported():
    read = _read([rule["expr"] for rule in _rules()])
    assert len(read) >= 12 and read - _exported() == set()


def test_the_dashboard_reads_only_series_that_are_exported_from_every_kind_of_process():
    import json

    panels = json.loads((DOCS / "grafana-dashboard.json").read_text())["panels"]
    expressions = [target["expr"] for panel in panels for target in panel["targets"]]
    assert _read(expressions) - _exported() == set()
    for series in ("triage_web_requests_total", "triage_calls_triaged_total", "triage_webhook_deliveries_total",
                   "triage_inference_queue_depth", "vllm:num_requests_waiting", "up"):  # web/intake, Celery, inference, vLLM
        assert any(series in expr for expr in expressions), series
