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
    renderers_min: int = Field(default=1, ge=0)
    renderers_max: int = Field(default_factory=_default_max, ge=1)

    scaler_backend: Backend = "local"
    # The backlog (lag + pending) should be drained within this many seconds. 20 s is
    # the largest order (10,000) at the ≥ 500 tickets/s end-to-end target, and well
    # above a renderer's start-up under load (~6 s), so an added renderer still helps.
    scaler_target_drain_s: float = Field(default=20.0, gt=0)
    scaler_interval_s: float = Field(default=1.0, gt=0)
    # HPA-style stabilisation: up takes the *lowest* recommendation of the up-window,
    # down the *highest* of the down-window (fast up, slow down).
    scaler_up_window_s: float = Field(default=0.0, ge=0)
    scaler_down_window_s: float = Field(default=60.0, ge=0)
    # No scale-down within this long after any change (lets new renderers report a rate).
    scaler_cooldown_s: float = Field(default=15.0, ge=0)
    # Per-renderer rate (tickets/s) assumed until heartbeats report a measured one;
    # set from the measured capacity (250-330/s per renderer on 2 cores with the
    # fast path), below it so a fresh stack errs towards scaling up.
    scaler_default_rate: float = Field(default=200.0, gt=0)
    # "drain": renderers from the backlog and the drain target only. "throughput":
    # also the burst and plateau rules of policy.py (one more renderer while a burst
    # lasts over TICKETRY_SCALER_BURST_S at the measured aggregate rate; none past
    # the count whose last addition did not raise it). "auto": throughput with the
    # local backend, drain with the others (pods on other nodes add capacity).
    scaler_policy: Policy = "auto"
    scaler_burst_s: float = Field(default=2.0, gt=0)
    # Throughput policy: renderers kept live above TICKETRY_RENDERERS_MIN (within the
    # CPU cap and TICKETRY_RENDERERS_MAX), so a burst starts on warm renderers
    # instead of forking while the cores are busiest. An idle one costs memory only.
    renderers_spare: int = Field(default=1, ge=0)
    # An added renderer must raise the aggregate rate by this share of the average
    # renderer's, or the count before it is a ceiling (a plateau).
    scaler_min_gain: float = Field(default=0.25, ge=0)
    # A rate is measured over this long with the same live renderers (plus 1 s to
    # settle): two ticks, ~600 tickets at a 2-core machine's pace, batches of 32.
    scaler_rate_window_s: float = Field(default=2.0, gt=0)
    # When XINFO GROUPS reports lag as NULL, count undelivered entries up to this many.
    scaler_lag_scan_cap: int = Field(default=10_000, ge=1)
    # Instance name: leader-lock holder and prefix of the local renderers' consumer names.
    scaler_instance: str = Field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")

    # Metrics: 0 turns the /metrics server off. Bind loopback unless told otherwise.
    scaler_metrics_port: int = Field(default=8002, ge=0, le=65535)
    scaler_metrics_host: str = "127.0.0.1"

    # Local backend.
    renderer_command: str = "ticketry-renderer"
    # A command that is a console script of this environment (the default) is
    # forked from a server that imported it once (backends/prefork.py); false:
    # always exec it.
    scaler_prefork: bool = True
    # The local backend's CPU cap (cpu.py): more renderers than this only while they
    # leave CPU unused. Unset = the cores this process may use (affinity, cgroup
    # quota); 0 = no cap.
    scaler_cpu_cap: int | None = Field(default=None, ge=0)
    scaler_restart_backoff_s: float = Field(default=0.5, gt=0)
    scaler_restart_backoff_max_s: float = Field(default=30.0, gt=0)
    # A process that ran this long before dying starts its backoff afresh.
    scaler_restart_reset_s: float = Field(default=30.0, gt=0)
    # SIGTERM → SIGKILL bound. The renderer finishes in-flight work within ~10 s + one render.
    scaler_drain_timeout_s: float = Field(default=30.0, gt=0)

    # Kubernetes backend (scale subresource of the renderer Deployment).
    scaler_k8s_api_url: str = "https://kubernetes.default.svc"
    scaler_k8s_namespace: str | None = None  # None: the pod's own namespace
    scaler_k8s_deployment: str = "ticketry-renderer"
    scaler_k8s_token_file: Path | None = _SA_DIR / "token"
    scaler_k8s_ca_file: Path | None = _SA_DIR / "ca.crt"
    scaler_k8s_timeout_s: float = Field(default=3.0, gt=0)

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
