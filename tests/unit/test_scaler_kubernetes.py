"""The kubernetes backend against a local server implementing the scale subresource."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from ticketry_scaler.backends import BackendError, BackendStatus
from ticketry_scaler.backends.kubernetes import KubernetesBackend

NS, NAME, TOKEN = "ticketry", "ticketry-renderer", "sa-token-1"
SCALE_PATH = f"/apis/apps/v1/namespaces/{NS}/deployments/{NAME}/scale"


@dataclass
class FakeApiServer:
    """Just the Deployment ``scale`` subresource (GET + merge-patch PATCH), with auth."""

    replicas: int = 1
    ready: int = 1
    token: str = TOKEN
    fail_next: int = 0
    requests: list[tuple[str, str, dict[str, str], Any]] = field(default_factory=list)

    def scale_object(self) -> dict[str, Any]:
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {"name": NAME, "namespace": NS},
            "spec": {"replicas": self.replicas},
            "status": {"replicas": self.ready, "selector": "app=ticketry-renderer"},
        }


def _handler(api: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return None

        def _reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _guard(self, body: Any = None) -> bool:
            api.requests.append((self.command, self.path, dict(self.headers), body))
            if self.headers.get("Authorization") != f"Bearer {api.token}":
                self._reply(401, {"kind": "Status", "code": 401, "reason": "Unauthorized"})
                return False
            if api.fail_next:
                api.fail_next -= 1
                self._reply(500, {"kind": "Status", "code": 500})
                return False
            if self.path != SCALE_PATH:
                self._reply(404, {"kind": "Status", "code": 404, "reason": "NotFound"})
                return False
            return True

        def do_GET(self) -> None:
            if self._guard():
                self._reply(200, api.scale_object())

        def do_PATCH(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            body = json.loads(raw or b"null")
            if not self._guard(body):
                return
            if self.headers.get("Content-Type") != "application/merge-patch+json":
                self._reply(415, {"kind": "Status", "code": 415})
                return
            replicas = (body or {}).get("spec", {}).get("replicas")
            if not isinstance(replicas, int) or replicas < 0:
                self._reply(422, {"kind": "Status", "code": 422, "reason": "Invalid"})
                return
            api.replicas = replicas
            self._reply(200, api.scale_object())

    return Handler


@pytest.fixture
def api() -> Iterator[tuple[FakeApiServer, str]]:
    state = FakeApiServer()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


def _backend(url: str, token_file: Path | None, deployment: str = NAME) -> KubernetesBackend:
    return KubernetesBackend(url, NS, deployment, token_file=token_file, timeout_s=2.0)


async def test_status_reads_spec_and_status(api: tuple[FakeApiServer, str], token_file: Path) -> None:
    state, url = api
    state.replicas, state.ready = 3, 2
    backend = _backend(url, token_file)
    try:
        assert await backend.status() == BackendStatus(target=3, running=2)
    finally:
        await backend.aclose()
    method, path, headers, _ = state.requests[-1]
    assert (method, path) == ("GET", SCALE_PATH)
    assert headers["Authorization"] == f"Bearer {TOKEN}"


async def test_scale_sends_a_merge_patch(api: tuple[FakeApiServer, str], token_file: Path) -> None:
    state, url = api
    backend = _backend(url, token_file)
    try:
        await backend.scale(4)
        assert state.replicas == 4
        assert (await backend.status()).target == 4
        await backend.scale(0)  # scale-to-zero is a valid target (KEDA-style)
        assert state.replicas == 0
    finally:
        await backend.aclose()
    patches = [r for r in state.requests if r[0] == "PATCH"]
    assert [p[3] for p in patches] == [{"spec": {"replicas": 4}}, {"spec": {"replicas": 0}}]
    assert all(p[2]["Content-Type"] == "application/merge-patch+json" for p in patches)


async def test_token_is_reread_after_rotation(api: tuple[FakeApiServer, str], token_file: Path) -> None:
    state, url = api
    backend = _backend(url, token_file)
    try:
        await backend.status()
        # Given kubelet rotated the projected token, when we call again, the new one is sent.
        state.token = "sa-token-2"
        token_file.write_text("sa-token-2")
        assert (await backend.status()).target == 1
    finally:
        await backend.aclose()


@pytest.mark.parametrize(
    ("deployment", "token", "fail", "match"),
    [
        ("nope", True, 0, "HTTP 404"),
        (NAME, False, 0, "HTTP 401"),
        (NAME, True, 1, "HTTP 500"),
    ],
    ids=["unknown-deployment", "no-token", "server-error"],
)
async def test_errors_become_backend_errors(
    api: tuple[FakeApiServer, str],
    token_file: Path,
    deployment: str,
    token: bool,
    fail: int,
    match: str,
) -> None:
    state, url = api
    state.fail_next = fail
    backend = _backend(url, token_file if token else None, deployment)
    try:
        with pytest.raises(BackendError, match=match):
            await backend.scale(2)
        assert state.replicas == 1, "nothing changed"
    finally:
        await backend.aclose()


async def test_unreachable_api_is_a_backend_error(token_file: Path) -> None:
    backend = _backend("http://127.0.0.1:9", token_file)  # discard port: refused
    try:
        with pytest.raises(BackendError):
            await backend.status()
    finally:
        await backend.aclose()
