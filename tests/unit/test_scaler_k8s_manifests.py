"""infra/k8s parses and agrees with the code (names, streams, commands, RBAC)."""

from __future__ import annotations

import json
import os
import subprocess
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
    # Every overlay runs ticketry-scaler (its leader exports the cluster-wide
    # gauges), and exactly one autoscaler: the scaler's kubernetes backend or KEDA.
    assert "ticketry-scaler" in deployments
    scales = _scaler_env(deployments["ticketry-scaler"])["TICKETRY_SCALER_BACKEND"] == "kubernetes"
    has_keda = bool(_by(docs, "ScaledObject"))
    assert scales != has_keda


def _scaler_env(deployment: dict[str, Any]) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}


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


def test_keda_overlay_runs_the_scaler_for_its_gauges_without_scaling() -> None:
    # Beside KEDA the scaler only observes: the dry-run backend, no Kubernetes
    # API access at all, within the ScaledObject's bounds (its "desired" gauge
    # then means what it would choose there), a standby for its leader.
    docs = _build(K8S / "keda")
    scaler = _by(docs, "Deployment")["ticketry-scaler"]
    pod = scaler["spec"]["template"]["spec"]
    env = _scaler_env(scaler)
    assert env["TICKETRY_SCALER_BACKEND"] == "dry-run"
    assert pod["automountServiceAccountToken"] is False and "serviceAccountName" not in pod
    assert not _by(docs, "Role") and not _by(docs, "RoleBinding") and not _by(docs, "ServiceAccount")
    (obj,) = _by(docs, "ScaledObject").values()
    assert int(env["TICKETRY_RENDERERS_MIN"] or "") == obj["spec"]["minReplicaCount"]
    assert int(env["TICKETRY_RENDERERS_MAX"] or "") == obj["spec"]["maxReplicaCount"]
    assert scaler["spec"]["replicas"] >= 2, "a standby takes over from a dead leader"


def test_keda_scaledobject_watches_both_lanes_of_the_renderers_group() -> None:
    docs = _build(K8S / "keda")
    (obj,) = _by(docs, "ScaledObject").values()
    assert obj["spec"]["scaleTargetRef"]["name"] in _by(docs, "Deployment")
    triggers = obj["spec"]["triggers"]
    assert {t["type"] for t in triggers} == {"redis-sentinel-streams"}
    # KEDA asks the same sentinels as the services, for the same primary.
    config = _by(docs, "ConfigMap")["ticketry-config"]["data"]
    for t in triggers:
        assert t["metadata"]["addresses"] == config["TICKETRY_REDIS_SENTINELS"], t
        assert t["metadata"]["sentinelMaster"] == config["TICKETRY_REDIS_SENTINEL_MASTER"], t
    assert {t["metadata"]["consumerGroup"] for t in triggers} == {streams.RENDERERS_GROUP}
    lag_lanes = {t["metadata"]["stream"] for t in triggers if "lagCount" in t["metadata"]}
    pending_lanes = {t["metadata"]["stream"] for t in triggers if "pendingEntriesCount" in t["metadata"]}
    assert lag_lanes == pending_lanes == set(streams.RENDER_LANES)
    # lagCount mode needs its activation threshold, and all metadata values are strings.
    for t in triggers:
        assert all(isinstance(v, str) for v in t["metadata"].values()), t
        if "lagCount" in t["metadata"]:
            assert "activationLagCount" in t["metadata"]


def _spread_over_nodes(pod: dict[str, Any], name: str, *, required: bool) -> bool:
    """``pod`` keeps away from the nodes of other ``name`` pods (required or preferred)."""
    anti = pod.get("affinity", {}).get("podAntiAffinity", {})
    if required:
        terms = anti.get("requiredDuringSchedulingIgnoredDuringExecution", [])
    else:
        terms = [t["podAffinityTerm"] for t in anti.get("preferredDuringSchedulingIgnoredDuringExecution", [])]
    return any(
        t["topologyKey"] == "kubernetes.io/hostname"
        and t["labelSelector"]["matchLabels"] == {"app.kubernetes.io/name": name}
        for t in terms
    )


@pytest.mark.parametrize("overlay", [K8S, K8S / "keda"], ids=["scaler", "keda"])
def test_redis_is_a_primary_two_replicas_and_three_sentinels_that_every_service_asks(overlay: Path) -> None:
    docs = _build(overlay)
    (redis,) = [d for d in _by(docs, "StatefulSet").values() if d["metadata"]["name"] == "ticketry-redis"]
    spec = redis["spec"]
    pod = spec["template"]["spec"]
    assert spec["replicas"] == 3
    assert {c["name"] for c in pod["containers"]} == {"redis", "sentinel"}  # a sentinel beside each redis
    assert _spread_over_nodes(pod, "ticketry-redis", required=True), "one redis pod per node"
    assert _by(docs, "PodDisruptionBudget")["ticketry-redis"]["spec"]["maxUnavailable"] == 1  # 2 of 3 stay
    headless = _by(docs, "Service")[spec["serviceName"]]["spec"]
    assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"] is True
    # Quorum 2 of 3, the master the services ask for, each redis pod's sentinel listed.
    scripts = _by(docs, "ConfigMap")["ticketry-redis"]["data"]
    config = _by(docs, "ConfigMap")["ticketry-config"]["data"]
    master = config["TICKETRY_REDIS_SENTINEL_MASTER"]
    assert f"sentinel monitor {master} $PRIMARY 6379 2" in scripts["sentinel.sh"]
    pods = [f"ticketry-redis-{i}.{spec['serviceName']}:26379" for i in range(spec["replicas"])]
    assert config["TICKETRY_REDIS_SENTINELS"].split(",") == pods
    assert f"get-master-addr-by-name {master}" in scripts["primary.sh"]  # a restarted pod follows the primary
    assert "appendonly yes" in scripts["redis.conf"]


@pytest.mark.parametrize("overlay", [K8S, K8S / "keda"], ids=["scaler", "keda"])
def test_apis_and_notifiers_are_several_spread_over_nodes_and_orders_wait_for_a_replica(
    overlay: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ticketry_api.config import ApiSettings
    from ticketry_notifier.config import NotifierSettings

    docs = _build(overlay)
    deployments = _by(docs, "Deployment")
    budgets = _by(docs, "PodDisruptionBudget")
    for name, settings in (("ticketry-api", ApiSettings), ("ticketry-notifier", NotifierSettings)):
        dep = deployments[name]
        assert dep["spec"]["replicas"] >= 2, name
        assert budgets[name]["spec"]["maxUnavailable"] == 1, name  # a drain leaves one serving
        pod = dep["spec"]["template"]["spec"]
        assert _spread_over_nodes(pod, name, required=False), name
        env, _ = _env_of(pod["containers"][0], docs)
        for key in [k for k in os.environ if k.startswith("TICKETRY_")]:
            monkeypatch.delenv(key)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        loaded = settings()
        assert len(loaded.redis_target.sentinels) == 3, name
        if name == "ticketry-api":
            assert loaded.redis_min_replicas == 1


# -- kustomize build + kubeconform -strict (tools and schemas: infra/bootstrap.sh) --

BIN = ROOT / ".bin"
SCHEMAS = BIN / "k8s-schemas"
# The CRD kubeconform has no schema for (KEDA's; the test above checks its fields).
NO_SCHEMA = {"ScaledObject"}
SECRET_VALUE = "k" * 64


def _tool(name: str) -> str:
    path = BIN / name
    assert path.exists(), f"{path} missing: run infra/bootstrap.sh"
    return str(path)


def _kustomize(overlay: Path) -> str:
    out = subprocess.run(
        [_tool("kustomize"), "build", str(overlay)], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def _schema_versions() -> list[str]:
    versions = sorted(p.name.split("-")[0][1:] for p in SCHEMAS.glob("v*-standalone-strict"))
    assert len(versions) >= 2, f"no Kubernetes schemas under {SCHEMAS}: run infra/bootstrap.sh"
    return versions


@pytest.mark.parametrize("overlay", [K8S, K8S / "keda"], ids=["scaler", "keda"])
def test_kustomize_build_passes_kubeconform_strict(overlay: Path) -> None:
    rendered = _kustomize(overlay)
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    # kustomize and the parser above agree on what an overlay deploys.
    assert sorted((d["kind"], d["metadata"]["name"]) for d in docs) == sorted(
        (d["kind"], d["metadata"]["name"]) for d in _build(overlay)
    )
    assert all(d["metadata"].get("namespace") == "ticketry" for d in docs if d["kind"] != "Namespace")
    location = str(SCHEMAS / "{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}")
    location += "/{{ .ResourceKind }}{{ .KindSuffix }}.json"
    for version in _schema_versions():
        out = subprocess.run(
            [
                _tool("kubeconform"), "-strict", "-summary", "-output", "json", "-kubernetes-version", version,
                "-schema-location", location, "-skip", ",".join(sorted(NO_SCHEMA)), "-",
            ],
            input=rendered, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        report = json.loads(out.stdout)
        assert out.returncode == 0, (version, [r for r in report["resources"] if r["status"] != "statusValid"])
        summary = report["summary"]
        skipped = sum(1 for d in docs if d["kind"] in NO_SCHEMA)
        assert summary == {"valid": len(docs) - skipped, "invalid": 0, "errors": 0, "skipped": skipped}, version


def test_kubeconform_refuses_a_manifest_with_a_mistake() -> None:
    # The validation can fail: a misspelt field and a wrong type are caught.
    version = _schema_versions()[-1]
    location = str(SCHEMAS / f"v{version}-standalone-strict" / "{{ .ResourceKind }}{{ .KindSuffix }}.json")
    broken = _kustomize(K8S).replace("terminationGracePeriodSeconds: 60", "terminationGracePeriodSecond: 60")
    broken = broken.replace("replicas: 2", 'replicas: "2"', 1)
    out = subprocess.run(
        [_tool("kubeconform"), "-strict", "-summary", "-schema-location", location, "-"],
        input=broken, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode != 0
    assert "terminationGracePeriodSecond" in out.stdout and "want null or integer" in out.stdout


def _env_of(container: dict[str, Any], docs: list[dict[str, Any]]) -> tuple[dict[str, str], set[str]]:
    """A container's environment from its ConfigMaps and literal env, and the
    names of the Secrets it reads (their keys count as set to SECRET_VALUE)."""
    config = _by(docs, "ConfigMap")
    env: dict[str, str] = {}
    secrets: set[str] = set()
    for src in container.get("envFrom", []):
        if "configMapRef" in src:
            env |= config[src["configMapRef"]["name"]]["data"]
        if "secretRef" in src:
            secrets.add(src["secretRef"]["name"])
            env["TICKETRY_JWT_SECRET"] = SECRET_VALUE
    for item in container.get("env", []):
        env[item["name"]] = item.get("value", "from-field")
    return env, secrets


def _pods(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    pods = {name: d["spec"]["template"]["spec"] for name, d in _by(docs, "Deployment").items()}
    pods |= {name: d["spec"]["template"]["spec"] for name, d in _by(docs, "Job").items()}
    return pods


@pytest.mark.parametrize("overlay", [K8S, K8S / "keda"], ids=["scaler", "keda"])
def test_only_the_api_and_notifier_hold_the_jwt_secret_and_only_the_api_the_keys(overlay: Path) -> None:
    docs = _build(overlay)
    pods = _pods(docs)
    for name, pod in pods.items():
        containers = pod["containers"] + pod.get("initContainers", [])
        secrets = set().union(*(_env_of(c, docs)[1] for c in containers))
        claims = {
            v["persistentVolumeClaim"]["claimName"] for v in pod.get("volumes", []) if "persistentVolumeClaim" in v
        }
        holds_secret = name in ("ticketry-api", "ticketry-notifier")
        assert (secrets == {"ticketry-secrets"}) if holds_secret else not secrets, (name, secrets)
        assert ("ticketry-keys" in claims) == (name == "ticketry-api"), (name, claims)
        assert ("ticketry-tickets" in claims) == (name in ("ticketry-api", "ticketry-renderer")), (name, claims)
    assert {"ticketry-tickets", "ticketry-keys"} <= _by(docs, "PersistentVolumeClaim").keys()


@pytest.mark.parametrize("overlay", [K8S, K8S / "keda"], ids=["scaler", "keda"])
def test_pods_run_as_the_images_user_and_own_their_volumes(overlay: Path) -> None:
    docs = _build(overlay)
    for name, pod in _pods(docs).items():
        ctx = pod["securityContext"]
        assert (ctx["runAsNonRoot"], ctx["runAsUser"], ctx["runAsGroup"]) == (True, 10001, 10001), name
        for c in pod["containers"]:
            assert c["securityContext"]["allowPrivilegeEscalation"] is False, (name, c["name"])
        mounts = {m["mountPath"] for c in pod["containers"] for m in c.get("volumeMounts", [])}
        if mounts:
            # fsGroup where the volume type honours it, a chown init container where not.
            assert ctx["fsGroup"] == 10001, name
            (fix,) = [c for c in pod["initContainers"] if c["name"] == "volume-permissions"]
            assert "chown 10001:10001" in " ".join(fix["command"]), name
            assert mounts <= {m["mountPath"] for m in fix["volumeMounts"]}, name
            assert set(fix["securityContext"]["capabilities"]["add"]) <= {"CHOWN", "FOWNER"}, name


def test_the_api_creates_its_first_signing_key_and_is_set_for_production() -> None:
    docs = _build(K8S)
    api = _pods(docs)["ticketry-api"]
    (keys,) = [c for c in api["initContainers"] if c["name"] == "signing-keys"]
    script = " ".join(keys["command"])
    assert "ticketryctl keys rotate" in script and "ls /data/keys/*.pem" in script  # once, not on every start
    assert {m["mountPath"] for m in keys["volumeMounts"]} == {"/data/keys"}
    env, _ = _env_of(api["containers"][0], docs)
    assert env["TICKETRY_DEV_MODE"] == "0"
    assert env["TICKETRY_KEYS_DIR"] == "/data/keys"
    for url in ("TICKETRY_NOTIFIER_PUBLIC_URL", "TICKETRY_API_PUBLIC_URL"):
        assert "127.0.0.1" not in env[url] and "localhost" not in env[url], url
    # The api mounts the PDFs read-write: it deletes a cancelled order's.
    (mount,) = [m for m in api["containers"][0]["volumeMounts"] if m["mountPath"] == "/data/tickets"]
    assert not mount.get("readOnly")


@pytest.mark.parametrize("overlay", [K8S, K8S / "keda"], ids=["scaler", "keda"])
def test_every_service_would_start_with_the_manifests_environment(
    overlay: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each container's environment (ConfigMap + env + Secret keys), read by the
    # service's own settings class: the validation a pod runs at start passes.
    from ticketry_api.config import ApiSettings
    from ticketry_notifier.config import NotifierSettings
    from ticketry_renderer.config import RendererSettings
    from ticketry_scaler.config import ScalerSettings

    settings = {
        "ticketry-api": ApiSettings, "ticketry-notifier": NotifierSettings,
        "ticketry-renderer": RendererSettings, "ticketry-scaler": ScalerSettings,
    }  # fmt: skip
    docs = _build(overlay)
    for name, pod in _pods(docs).items():
        if name not in settings:
            continue
        env, _ = _env_of(pod["containers"][0], docs)
        for key in [k for k in os.environ if k.startswith("TICKETRY_")]:
            monkeypatch.delenv(key)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        loaded = settings[name]()
        assert not loaded.dev_mode, name


@pytest.mark.parametrize("overlay", [K8S, K8S / "keda"], ids=["scaler", "keda"])
def test_every_service_has_a_disruption_budget_and_probes(overlay: Path) -> None:
    docs = _build(overlay)
    deployments = _by(docs, "Deployment")
    budgets = _by(docs, "PodDisruptionBudget")
    for name, dep in deployments.items():
        pdb = budgets[name]["spec"]
        assert pdb["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"], name
        assert pdb.get("maxUnavailable") == 1, name  # never blocks a drain outright
        container = dep["spec"]["template"]["spec"]["containers"][0]
        assert "livenessProbe" in container, name
    renderer = deployments["ticketry-renderer"]["spec"]["template"]
    container = renderer["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    port = int(env["TICKETRY_METRICS_PORT"])
    assert env["TICKETRY_METRICS_HOST"] == "0.0.0.0"  # noqa: S104 - probed and scraped from outside the pod
    for probe in ("startupProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/metrics", probe
    assert {p["containerPort"] for p in container["ports"]} == {port}
    assert renderer["metadata"]["annotations"]["prometheus.io/port"] == str(port)


@pytest.mark.parametrize("overlay", [K8S, K8S / "keda"], ids=["scaler", "keda"])
def test_every_scrape_target_listens_beyond_loopback_on_its_annotated_port(
    overlay: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prometheus scrapes each pod from elsewhere: the port its annotation names
    # is the one the service binds (as its settings read the pod's environment),
    # on every interface (the settings default to loopback).
    from ticketry_api.config import ApiSettings
    from ticketry_notifier.config import NotifierSettings
    from ticketry_renderer.config import RendererSettings
    from ticketry_scaler.config import ScalerSettings

    targets: dict[str, tuple[type[Any], str, str]] = {
        "ticketry-api": (ApiSettings, "api_host", "api_port"),
        "ticketry-notifier": (NotifierSettings, "notifier_host", "notifier_port"),
        "ticketry-renderer": (RendererSettings, "metrics_host", "metrics_port"),
        "ticketry-scaler": (ScalerSettings, "scaler_metrics_host", "scaler_metrics_port"),
    }
    docs = _build(overlay)
    scraped = {
        name: d["spec"]["template"]
        for name, d in _by(docs, "Deployment").items()
        if d["spec"]["template"]["metadata"].get("annotations", {}).get("prometheus.io/scrape") == "true"
    }
    assert scraped.keys() == targets.keys()
    for name, template in scraped.items():
        kind, host, port = targets[name]
        container = template["spec"]["containers"][0]
        env, _ = _env_of(container, docs)
        for key in [k for k in os.environ if k.startswith("TICKETRY_")]:
            monkeypatch.delenv(key)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        settings = kind()
        assert getattr(settings, host) == "0.0.0.0", name  # noqa: S104 - scraped from outside the pod
        annotated = int(template["metadata"]["annotations"]["prometheus.io/port"])
        assert getattr(settings, port) == annotated, name
        assert annotated in {p["containerPort"] for p in container["ports"]}, name
