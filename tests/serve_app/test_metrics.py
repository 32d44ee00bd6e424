"""serve_app.metrics: the Grafana dashboard and the exported metrics use exactly the same names."""

from __future__ import annotations

import json
import re

from serve_app.metrics import METRIC_NAMES
from tests.conftest import REPO

DASHBOARD = REPO / "docs" / "grafana-dashboard.json"


def _dashboard_metric_names() -> set[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    exprs = " ".join(t["expr"] for p in panels for t in p["targets"])
    # Ray exports application metrics as ray_<name>; histograms add _bucket/_count/_sum.
    return {re.sub(r"_(bucket|count|sum)$", "", m) for m in re.findall(r"\bray_(vs_[a-z0-9_]+)", exprs)}


def test_every_dashboard_query_names_an_exported_metric():
    assert _dashboard_metric_names() <= set(METRIC_NAMES)


def test_every_exported_metric_is_on_the_dashboard():
    assert set(METRIC_NAMES) <= _dashboard_metric_names()


def test_metric_names_match_what_the_code_registers():
    source = (REPO / "serve_app" / "metrics.py").read_text()
    registered = set(re.findall(r'metrics\.(?:Counter|Gauge|Histogram)\(\s*"(vs_[a-z0-9_]+)"', source))
    assert registered == set(METRIC_NAMES)
