"""Scaler settings (environment, prefix ``TICKETRY_``): ``TICKETRY_<FIELD>``."""

from __future__ import annotations

import os
import shlex
import socket
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from ticketry.settings import CommonSettings, ConfigurationError

Backend = Literal["local", "kubernetes", "dry-run"]
Policy = Literal["auto", "throughput", "drain"]

# In-cluster service-account files (https://kubernetes.io/docs/tasks/run-application/access-api-from-pod/)
_SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def _default_max() -> int:
    return (os.cpu_count() or 1) * 2


class ScalerSettings(CommonSettings):
    """Everything the scaler reads; see the README's configuration table."""

    # Bounds. With the local backend they are per host (max defaults to this host's CPUs x 2).
    renderers_min: int = Field(
        default=1, ge=0, json_schema_extra={"unit": "renderers"},
        description="the fewest renderers kept running (with the local backend: on this host)",
    )  # fmt: skip
    renderers_max: int = Field(
        default_factory=_default_max, ge=1, json_schema_extra={"unit": "renderers"},
        description="the most renderers run (with the local backend: on this host; default its CPUs x 2)",
    )  # fmt: skip

    scaler_backend: Backend = Field(
        default="local",
        description="who runs the renderers: `local` processes on this host, the `kubernetes` Deployment's "
        "replicas, or `dry-run` (decide and log only)",
    )
    # 20 s is the largest order (10,000) at the ≥ 500 tickets/s end-to-end target,
    # and well above a renderer's start-up under load (~6 s), so an added renderer still helps.
    scaler_target_drain_s: float = Field(
        default=20.0, gt=0, description="the backlog (lag + pending) should be drained within this long"
    )
    scaler_interval_s: float = Field(default=1.0, gt=0, description="how often the scaler observes and decides")
    # HPA-style stabilisation (fast up, slow down).
    scaler_up_window_s: float = Field(
        default=0.0, ge=0, description="scaling up takes the lowest recommendation of this past window"
    )
    scaler_down_window_s: float = Field(
        default=60.0, ge=0, description="scaling down takes the highest recommendation of this past window"
    )
    scaler_cooldown_s: float = Field(
        default=15.0, ge=0,
        description="no scale-down within this long after any change (new renderers first report a rate)",
    )  # fmt: skip
    # Set from the measured capacity (250-330/s per renderer on 2 cores with the
    # fast path), below it so a fresh stack errs towards scaling up.
    scaler_default_rate: float = Field(
        default=200.0, gt=0, json_schema_extra={"unit": "tickets/s"},
        description="one renderer's rate assumed until heartbeats report a measured one",
    )  # fmt: skip
    scaler_policy: Policy = Field(
        default="auto",
        description="`drain`: renderers from the backlog and the drain target only; `throughput`: also one more "
        "while a burst lasts, none past a plateau (policy.py); `auto`: throughput with the local backend, "
        "drain with the others (pods on other nodes add capacity)",
    )
    scaler_burst_s: float = Field(
        default=2.0, gt=0, description="throughput policy: a burst this long adds one renderer at the measured rate"
    )
    # An idle spare costs memory only; a burst then starts on warm renderers
    # instead of forking while the cores are busiest.
    renderers_spare: int = Field(
        default=1, ge=0, json_schema_extra={"unit": "renderers"},
        description="throughput policy: renderers kept live above TICKETRY_RENDERERS_MIN (within the CPU cap "
        "and TICKETRY_RENDERERS_MAX)",
    )  # fmt: skip
    scaler_min_gain: float = Field(
        default=0.25, ge=0, json_schema_extra={"unit": "share of one renderer's rate"},
        description="an added renderer must raise the aggregate rate by this much, or the count before it is "
        "a ceiling (a plateau)",
    )  # fmt: skip
    # Two ticks, ~600 tickets at a 2-core machine's pace, batches of 32.
    scaler_rate_window_s: float = Field(
        default=2.0, gt=0, description="a rate is measured over this long with the same live renderers (+1 s to settle)"
    )
    scaler_lag_scan_cap: int = Field(
        default=10_000, ge=1, json_schema_extra={"unit": "entries"},
        description="when XINFO GROUPS reports lag as NULL, undelivered entries are counted up to this many",
    )  # fmt: skip
    scaler_instance: str = Field(
        default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}",
        description="this scaler's name: the leader lock's holder and the prefix of its local renderers' "
        "consumer names; default `<host>-<pid>`",
    )

    scaler_metrics_port: int = Field(
        default=8002, ge=0, le=65535, description="the port of the scaler's /metrics (its renderers' too); 0: off"
    )
    scaler_metrics_host: str = Field(default="127.0.0.1", description="the address of the scaler's /metrics")

    renderer_command: str = Field(
        default="ticketry-renderer",
        description="local backend: the command that starts one renderer (split like a shell would, no shell)",
    )
    scaler_prefork: bool = Field(
        default=True,
        description="local backend: a command that is a console script of this environment is forked from a "
        "server that imported it once (backends/prefork.py); false: always exec it",
    )
    scaler_cpu_cap: int | None = Field(
        default=None, ge=0, json_schema_extra={"unit": "cores"},
        description="local backend: more renderers than this only while they leave CPU unused; none: the cores "
        "this process may use (affinity, cgroup quota); 0: no cap",
    )  # fmt: skip
    scaler_restart_backoff_s: float = Field(
        default=0.5, gt=0, description="local backend: the first delay before restarting a renderer that died"
    )
    scaler_restart_backoff_max_s: float = Field(
        default=30.0, gt=0, description="local backend: the longest delay before restarting a renderer"
    )
    scaler_restart_reset_s: float = Field(
        default=30.0, gt=0, description="local backend: a renderer that ran this long before dying starts backoff anew"
    )
    # The renderer finishes in-flight work within ~10 s + one render.
    scaler_drain_timeout_s: float = Field(
        default=30.0, gt=0, description="local backend: from SIGTERM to SIGKILL of a renderer scaled away"
    )

    # Kubernetes backend (scale subresource of the renderer Deployment).
    scaler_k8s_api_url: str = Field(
        default="https://kubernetes.default.svc", description="kubernetes backend: the cluster's API server"
    )
    scaler_k8s_namespace: str | None = Field(
        default=None, description="kubernetes backend: the renderer Deployment's namespace; none: the pod's own"
    )
    scaler_k8s_deployment: str = Field(
        default="ticketry-renderer", description="kubernetes backend: the renderer Deployment scaled"
    )
    scaler_k8s_token_file: Path | None = Field(
        default=_SA_DIR / "token", description="kubernetes backend: the service-account token sent to the API server"
    )
    scaler_k8s_ca_file: Path | None = Field(
        default=_SA_DIR / "ca.crt", description="kubernetes backend: the CA that signs the API server's certificate"
    )
    scaler_k8s_timeout_s: float = Field(
        default=3.0, gt=0, description="kubernetes backend: one request to the API server, at most"
    )

    @model_validator(mode="after")
    def _bounds(self) -> ScalerSettings:
        if self.renderers_min > self.renderers_max:
            raise ConfigurationError(
                f"TICKETRY_RENDERERS_MIN ({self.renderers_min}) exceeds TICKETRY_RENDERERS_MAX ({self.renderers_max})"
            )
        if not self.renderer_argv:
            raise ConfigurationError("TICKETRY_RENDERER_COMMAND is empty")
        return self

    @property
    def throughput_policy(self) -> bool:
        """Whether the burst and plateau rules apply (see ``scaler_policy``)."""
        if self.scaler_policy == "auto":
            return self.scaler_backend == "local"
        return self.scaler_policy == "throughput"

    @property
    def renderer_argv(self) -> list[str]:
        """The renderer command split like a shell would (no shell is involved)."""
        return shlex.split(self.renderer_command)

    @property
    def k8s_namespace(self) -> str:
        """The configured namespace, else the pod's own, else ``default``."""
        if self.scaler_k8s_namespace:
            return self.scaler_k8s_namespace
        ns_file = _SA_DIR / "namespace"
        if ns_file.is_file():
            return ns_file.read_text().strip()
        return "default"
