"""Scale the renderer Deployment through its ``scale`` subresource.

``GET``/``PATCH /apis/apps/v1/namespaces/{ns}/deployments/{name}/scale``
(https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/deployment-v1/),
a JSON merge patch of ``{"spec": {"replicas": n}}``. In a pod, the service
account's token and CA are read from their mounted files (the token is re-read on
every call because kubelet rotates it). The role needs ``get`` and ``patch`` on
``deployments/scale`` only (see ``infra/k8s/scaler.yaml``).
"""

from __future__ import annotations

import logging
import ssl
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from ticketry_scaler.backends import BackendError, BackendStatus
from ticketry_scaler.config import ScalerSettings

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"


class KubernetesBackend:
    name = "kubernetes"

    def __init__(
        self,
        api_url: str,
        namespace: str,
        deployment: str,
        *,
        token_file: Path | None = None,
        ca_file: Path | None = None,
        timeout_s: float = 3.0,
    ) -> None:
        verify: ssl.SSLContext | bool = True
        if ca_file is not None and ca_file.is_file():
            verify = ssl.create_default_context(cafile=str(ca_file))
        self._client = httpx.AsyncClient(base_url=api_url.rstrip("/"), verify=verify, timeout=timeout_s)
        self._path = (
            f"/apis/apps/v1/namespaces/{quote(namespace, safe='')}/deployments/{quote(deployment, safe='')}/scale"
        )
        self._token_file = token_file

    @classmethod
    def from_settings(cls, s: ScalerSettings) -> KubernetesBackend:
        return cls(
            s.scaler_k8s_api_url,
            s.k8s_namespace,
            s.scaler_k8s_deployment,
            token_file=s.scaler_k8s_token_file,
            ca_file=s.scaler_k8s_ca_file,
            timeout_s=s.scaler_k8s_timeout_s,
        )

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self._token_file is not None and self._token_file.is_file():
            headers["Authorization"] = f"Bearer {self._token_file.read_text().strip()}"
        return headers

    async def _call(self, method: str, *, json: Any = None, content_type: str | None = None) -> dict[str, Any]:
        headers = self._headers()
        if content_type is not None:
            headers["Content-Type"] = content_type
        try:
            resp = await self._client.request(method, self._path, headers=headers, json=json)
        except httpx.HTTPError as exc:
            raise BackendError(f"{method} {self._path}: {exc!r}") from exc
        if resp.status_code >= 400:
            raise BackendError(f"{method} {self._path}: HTTP {resp.status_code} {resp.text[:200]}")
        body = resp.json()
        if not isinstance(body, dict):
            raise BackendError(f"{method} {self._path}: not a Scale object")
        return body

    @staticmethod
    def _status(scale: dict[str, Any]) -> BackendStatus:
        spec = scale.get("spec") or {}
        status = scale.get("status") or {}
        return BackendStatus(target=int(spec.get("replicas") or 0), running=int(status.get("replicas") or 0))

    async def start(self) -> None:
        return None

    async def status(self) -> BackendStatus:
        return self._status(await self._call("GET"))

    async def scale(self, replicas: int) -> None:
        if replicas < 0:
            raise ValueError("replicas must be >= 0")
        scale = await self._call("PATCH", json={"spec": {"replicas": replicas}}, content_type=MERGE_PATCH)
        log.info("deployment scaled", extra={"path": self._path, "replicas": replicas})
        applied = self._status(scale).target
        if applied != replicas:
            raise BackendError(f"PATCH {self._path}: asked {replicas}, got {applied}")

    async def aclose(self) -> None:
        await self._client.aclose()
