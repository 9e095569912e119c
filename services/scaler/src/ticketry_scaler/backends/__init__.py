"""Where replicas come from: ``local`` processes, a ``kubernetes`` Deployment, or ``dry-run``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ticketry_scaler.config import ScalerSettings


class BackendError(RuntimeError):
    """The backend could not report or apply a replica count (retried next tick)."""


@dataclass(frozen=True, slots=True)
class BackendStatus:
    """``target``: replicas asked for; ``running``: replicas actually up;
    ``cpu_cap``: the cores the local backend's renderers may fill (0: no cap);
    ``cores_full``: its renderers get those cores (another would only compete)."""

    target: int
    running: int
    consumers: frozenset[str] = field(default_factory=frozenset)
    cpu_cap: int = 0
    cores_full: bool = False


class Backend(Protocol):
    """What the controller needs from a backend."""

    name: str

    async def start(self) -> None:
        """Begin (the local backend starts its floor of renderers here)."""

    async def status(self) -> BackendStatus:
        """Current target and running replicas."""

    async def scale(self, replicas: int) -> None:
        """Set the target replica count (absolute, idempotent)."""

    async def aclose(self) -> None:
        """Stop; the local backend drains its renderers."""


def make_backend(settings: ScalerSettings) -> Backend:
    """The backend ``TICKETRY_SCALER_BACKEND`` names."""
    if settings.scaler_backend == "local":
        from ticketry_scaler.backends.local import LocalBackend

        return LocalBackend.from_settings(settings)
    if settings.scaler_backend == "kubernetes":
        from ticketry_scaler.backends.kubernetes import KubernetesBackend

        return KubernetesBackend.from_settings(settings)
    from ticketry_scaler.backends.dryrun import DryRunBackend

    return DryRunBackend(initial=settings.renderers_min)
