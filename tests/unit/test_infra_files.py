"""The deployment files parse and agree with the code (no engine runs here)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
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


# -- compose, validated by compose-go (.bin/composecheck, built by infra/bootstrap.sh) --

BIN = ROOT / ".bin"
COMPOSE = ROOT / "infra" / "compose.yaml"
SECRET_VALUE = "c" * 64
TICKETRY_SERVICES = ("api", "notifier", "renderer", "scaler")


def _composecheck(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    tool = BIN / "composecheck"
    assert tool.exists(), f"{tool} missing: run infra/bootstrap.sh"
    base = {k: v for k, v in os.environ.items() if not k.startswith("TICKETRY_")}
    return subprocess.run(
        [str(tool), "-json", str(COMPOSE)],
        env={**base, **env}, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _project() -> dict[str, Any]:
    out = _composecheck({"TICKETRY_JWT_SECRET": SECRET_VALUE})
    assert out.returncode == 0, out.stderr
    project: dict[str, Any] = json.loads(out.stdout)
    return project


def _volumes(service: dict[str, Any]) -> set[str]:
    return {v["source"] for v in service.get("volumes", []) if v.get("type") == "volume"}


def test_compose_is_valid_and_needs_a_jwt_secret() -> None:
    # compose-go: the Compose spec's schema, interpolation, and the model's consistency.
    project = _project()
    assert set(TICKETRY_SERVICES) | {"init", "redis", "mongo"} == set(project["services"])
    missing = _composecheck({})
    assert missing.returncode != 0 and "TICKETRY_JWT_SECRET" in missing.stderr


def test_compose_validation_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "compose.yaml"
    bad.write_text(COMPOSE.read_text().replace("stop_grace_period: 60s", "stop_grace_periodx: 60s"))
    tool = str(BIN / "composecheck")
    env = {**os.environ, "TICKETRY_JWT_SECRET": SECRET_VALUE}
    out = subprocess.run([tool, str(bad)], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode != 0 and "stop_grace_periodx" in out.stderr
    bad.write_text(COMPOSE.read_text().replace("init: {condition: service_completed_successfully}", "nope: {}", 1))
    out = subprocess.run([tool, str(bad)], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode != 0 and "nope" in out.stderr


def test_compose_gives_secrets_and_volumes_only_where_needed() -> None:
    services = _project()["services"]
    for name in TICKETRY_SERVICES:
        env = services[name]["environment"]
        assert env["TICKETRY_DEV_MODE"] == "0", name
        assert ("TICKETRY_JWT_SECRET" in env) == (name in ("api", "notifier")), name
        assert ("keys" in _volumes(services[name])) == (name == "api"), name
        assert ("tickets" in _volumes(services[name])) == (name in ("api", "renderer")), name
    # The api and the renderers start once the one-shot init has set the volumes up.
    for name in ("api", "renderer"):
        assert services[name]["depends_on"]["init"]["condition"] == "service_completed_successfully", name
    api_env = services["api"]["environment"]
    assert api_env["TICKETRY_API_PUBLIC_URL"] and api_env["TICKETRY_NOTIFIER_PUBLIC_URL"]


def test_compose_init_owns_the_volumes_and_makes_the_first_key_once() -> None:
    init = _project()["services"]["init"]
    assert init["user"] == "0:0" and init["restart"] == "no"
    script = " ".join(init["command"])
    assert "chown 10001:10001 /data/tickets /data/keys" in script
    assert "ls /data/keys/*.pem" in script and "|| ticketryctl keys rotate" in script
    assert _volumes(init) == {"tickets", "keys"}


def test_compose_services_have_health_checks() -> None:
    services = _project()["services"]
    for name, path in (("api", ":8000/readyz"), ("notifier", ":8001/readyz"), ("renderer", ":9101/metrics")):
        assert path in " ".join(services[name]["healthcheck"]["test"]), name
    assert services["renderer"]["environment"]["TICKETRY_METRICS_PORT"] == "9101"


def test_every_service_would_start_with_the_compose_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # The environment compose gives each service (plus the image's ENV), read by
    # that service's own settings class: its start-up validation passes.
    from ticketry_api.config import ApiSettings
    from ticketry_notifier.config import NotifierSettings
    from ticketry_renderer.config import RendererSettings
    from ticketry_scaler.config import ScalerSettings

    image_env = dict(re.findall(r"(TICKETRY_[A-Z_]+)=(\S+)", (ROOT / "infra" / "Dockerfile").read_text()))
    services = _project()["services"]
    kinds = {"api": ApiSettings, "notifier": NotifierSettings, "renderer": RendererSettings, "scaler": ScalerSettings}
    for name, kind in [*kinds.items(), ("init", ApiSettings)]:  # init runs `ticketryctl keys rotate`
        for key in [k for k in os.environ if k.startswith("TICKETRY_")]:
            monkeypatch.delenv(key)
        for key, value in {**image_env, **services[name]["environment"]}.items():
            monkeypatch.setenv(key, value)
        assert not kind().dev_mode, name


def test_compose_serves_every_metrics_port_to_other_containers(monkeypatch: pytest.MonkeyPatch) -> None:
    # Prometheus runs in a container of its own: each scrape target listens on
    # every interface (the settings default to loopback), read as each service
    # reads its environment, so a misspelt variable is caught too.
    from ticketry_api.config import ApiSettings
    from ticketry_notifier.config import NotifierSettings
    from ticketry_renderer.config import RendererSettings
    from ticketry_scaler.config import ScalerSettings

    services = _project()["services"]
    targets: dict[str, tuple[type[Any], str, str]] = {
        "api": (ApiSettings, "api_host", "api_port"),
        "notifier": (NotifierSettings, "notifier_host", "notifier_port"),
        "renderer": (RendererSettings, "metrics_host", "metrics_port"),
        "scaler": (ScalerSettings, "scaler_metrics_host", "scaler_metrics_port"),
    }
    for name, (kind, host, port) in targets.items():
        for key in [k for k in os.environ if k.startswith("TICKETRY_")]:
            monkeypatch.delenv(key)
        for key, value in services[name]["environment"].items():
            monkeypatch.setenv(key, value)
        settings = kind()
        assert getattr(settings, host) == "0.0.0.0", name  # noqa: S104 - scraped from another container
        assert getattr(settings, port) > 0, name


def test_image_runs_as_10001_owning_its_data_dirs_with_the_rendering_packages() -> None:
    dockerfile = (ROOT / "infra" / "Dockerfile").read_text()
    assert "USER 10001:10001" in dockerfile
    assert "chown -R 10001:10001 /data" in dockerfile and "mkdir -p /data/tickets /data/keys" in dockerfile
    # What the renderers and the api's name check need from Debian, as bootstrap installs it here.
    bootstrap = (ROOT / "infra" / "bootstrap.sh").read_text()
    block = re.search(r"^APT_PACKAGES=\($(.*?)^\)$", bootstrap, re.M | re.S)
    assert block is not None
    wanted = {word for line in block.group(1).splitlines() for word in line.split("#")[0].split()}
    rendering = {p for p in wanted if p.startswith(("libpango", "libharfbuzz", "fonts-", "fontconfig"))}
    assert rendering, block
    installed = set(re.findall(r"[a-z0-9.+-]+", dockerfile[dockerfile.index("apt-get install") :]))
    assert rendering <= installed, rendering - installed
