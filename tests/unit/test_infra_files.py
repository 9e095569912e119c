"""The deployment files parse and agree with the code (no engine runs here)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_compose_runs_every_service_with_durable_redis() -> None:
    compose = yaml.safe_load((ROOT / "infra" / "compose.yaml").read_text())
    services = compose["services"]
    assert {"api", "notifier", "renderer", "scaler", "redis", "mongo"} <= set(services)
    for name in ("api", "notifier", "renderer", "scaler"):
        assert services[name]["command"] == [f"ticketry-{name}"]
        env = services[name]["environment"]
        assert env["TICKETRY_REDIS_URL"].startswith("redis://redis:")
        assert env["TICKETRY_MONGO_URL"].startswith("mongodb://mongo:")
    redis_cmd = services["redis"]["command"]
    assert redis_cmd[redis_cmd.index("--appendonly") + 1] == "yes"
    assert redis_cmd[redis_cmd.index("--maxmemory-policy") + 1] == "noeviction"


def test_dashboard_queries_only_metrics_we_export() -> None:
    dash = json.loads((ROOT / "infra" / "grafana" / "ticketry-dashboard.json").read_text())
    exported = set()
    for src in (ROOT / "services").glob("*/src/**/*.py"):
        exported |= set(re.findall(r"\"(ticketry_[a-z_]+)\"", src.read_text()))
    for panel in dash["panels"]:
        for target in panel["targets"]:
            for metric in re.findall(r"ticketry_[a-z_]+", target["expr"]):
                base = re.sub(r"_(total|bucket|count|sum)$", "", metric)
                assert metric in exported or base in exported, (panel["title"], metric)


def test_dockerfile_installs_the_harfbuzz_subsetter() -> None:
    # Without it WeasyPrint silently falls back to fontTools (~3.4x slower).
    assert "libharfbuzz-subset0" in (ROOT / "infra" / "Dockerfile").read_text()
