"""infra/k8s parses and agrees with the code (names, streams, commands, RBAC)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from ticketry import streams

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "infra" / "k8s"


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _build(kustomization_dir: Path) -> list[dict[str, Any]]:
    """A tiny ``kustomize build``: resources (files or dirs), recursively."""
    kust = _docs(kustomization_dir / "kustomization.yaml")[0]
    out: list[dict[str, Any]] = []
    for res in kust["resources"]:
        target = (kustomization_dir / res).resolve()
        assert target.exists(), f"{kustomization_dir}: missing resource {res}"
        out += _build(target) if target.is_dir() else _docs(target)
    return out


def _by(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def _console_scripts() -> set[str]:
    scripts: set[str] = set()
    for pyproject in (ROOT / "services").glob("*/pyproject.toml"):
        scripts |= set(tomllib.loads(pyproject.read_text())["project"].get("scripts", {}))
    return scripts


@pytest.mark.parametrize("path", sorted(K8S.rglob("*.yaml")), ids=lambda p: p.name)
def test_every_manifest_parses_and_is_a_k8s_object(path: Path) -> None:
    docs = _docs(path)
    assert docs, f"{path} is empty"
    for doc in docs:
        assert {"apiVersion", "kind"} <= doc.keys(), path
        if doc["kind"] != "Kustomization":
            assert doc["metadata"]["name"], path


@pytest.mark.parametrize("overlay", [K8S, K8S / "keda"], ids=["scaler", "keda"])
def test_overlays_deploy_every_service(overlay: Path) -> None:
    docs = _build(overlay)
    deployments = _by(docs, "Deployment")
    assert {"ticketry-api", "ticketry-renderer", "ticketry-notifier"} <= deployments.keys()
    assert {"ticketry-api", "ticketry-notifier"} <= _by(docs, "Service").keys()
    assert "ticketry-redis-groups" in _by(docs, "Job")
    scripts = _console_scripts()
    for name, dep in deployments.items():
        spec = dep["spec"]
        assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items(), name
        for container in spec["template"]["spec"]["containers"]:
            assert container["command"][0] in scripts, (name, container["command"])
    # Exactly one autoscaler per overlay.
    has_scaler = "ticketry-scaler" in deployments
    has_keda = bool(_by(docs, "ScaledObject"))
    assert has_scaler != has_keda


def test_scaler_deployment_uses_the_kubernetes_backend_with_least_rbac() -> None:
    docs = _build(K8S)
    scaler = _by(docs, "Deployment")["ticketry-scaler"]
    pod = scaler["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["TICKETRY_SCALER_BACKEND"] == "kubernetes"
    assert env["TICKETRY_SCALER_K8S_DEPLOYMENT"] in _by(docs, "Deployment")
    assert scaler["spec"]["replicas"] >= 2, "a standby takes over from a dead leader"
    (rule,) = _by(docs, "Role")["ticketry-scaler"]["rules"]
    assert rule["resources"] == ["deployments/scale"]
    assert set(rule["verbs"]) == {"get", "patch"}
    binding = _by(docs, "RoleBinding")["ticketry-scaler"]
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"]


def test_keda_scaledobject_watches_both_lanes_of_the_renderers_group() -> None:
    docs = _build(K8S / "keda")
    (obj,) = _by(docs, "ScaledObject").values()
    assert obj["spec"]["scaleTargetRef"]["name"] in _by(docs, "Deployment")
    triggers = obj["spec"]["triggers"]
    assert {t["type"] for t in triggers} == {"redis-streams"}
    assert {t["metadata"]["consumerGroup"] for t in triggers} == {streams.RENDERERS_GROUP}
    lag_lanes = {t["metadata"]["stream"] for t in triggers if "lagCount" in t["metadata"]}
    pending_lanes = {t["metadata"]["stream"] for t in triggers if "pendingEntriesCount" in t["metadata"]}
    assert lag_lanes == pending_lanes == set(streams.RENDER_LANES)
    # lagCount mode needs its activation threshold, and all metadata values are strings.
    for t in triggers:
        assert all(isinstance(v, str) for v in t["metadata"].values()), t
        if "lagCount" in t["metadata"]:
            assert "activationLagCount" in t["metadata"]
