"""A renderer on its own, one process as in a Kubernetes pod (no scaler, so no
``PROMETHEUS_MULTIPROC_DIR``), serves its own ``/metrics`` on
``TICKETRY_METRICS_PORT``: the series Prometheus scrapes per pod and the paths
the pod's probes ask (infra/k8s/base/renderer.yaml)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from ticketry_devstack.procs import Stack, free_port, wait_port
from ticketry_renderer.config import RendererSettings

from tests.conftest import TokenFactory, make_stack
from tests.helpers import create_event, eventually, metric_sum, place_order, wait_rendered

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
RENDERER_POD = ROOT / "infra" / "k8s" / "base" / "renderer.yaml"
TICKETS = 12


def niceness(pid: int) -> int:
    """A process's nice value (field 19 of ``/proc/<pid>/stat``)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[16])


def probe_paths() -> set[str]:
    """The HTTP paths the renderer pod's probes ask."""
    (deployment,) = [d for d in yaml.safe_load_all(RENDERER_POD.read_text()) if d and d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    probes = [container[p] for p in ("startupProbe", "livenessProbe", "readinessProbe") if p in container]
    return {p["httpGet"]["path"] for p in probes}


async def rendered_total(client: httpx.AsyncClient, port: int) -> float:
    """``ticketry_tickets_rendered_total`` of that port, every lane."""
    r = await client.get(f"http://127.0.0.1:{port}/metrics")
    assert r.status_code == 200, r.text
    return metric_sum(r.text, "ticketry_tickets_rendered_total")


@pytest.mark.timeout(300)
async def test_a_standalone_renderer_counts_each_ticket_on_its_own_port(tmp_path: Path, token: TokenFactory) -> None:
    stack: Stack = await asyncio.to_thread(make_stack, tmp_path / "stack", 0)
    try:
        # Given one renderer process alone, with its own metrics port (as in a pod),
        # told to run nicer than the api (TICKETRY_RENDERER_NICE; by default they are equal)
        port = free_port()
        renderer = stack.start_renderer({"TICKETRY_METRICS_PORT": str(port), "TICKETRY_RENDERER_NICE": "10"})
        await asyncio.to_thread(wait_port, port, 120, renderer.popen)
        await asyncio.to_thread(stack.wait_renderers, 1)
        assert RendererSettings.model_fields["renderer_nice"].default == 0
        assert niceness(stack.procs["api"].popen.pid) == 0
        assert niceness(renderer.popen.pid) == 10
        paths = probe_paths()
        assert "/metrics" in paths
        async with (
            httpx.AsyncClient(timeout=30) as metrics,
            httpx.AsyncClient(base_url=stack.api_url, timeout=60) as api,
        ):
            before = await rendered_total(metrics, port)

            # When a buyer orders TICKETS tickets and they are rendered
            organizer, buyer = token("rm-org", "organizer"), token("rm-buyer", "buyer")
            event = await create_event(api, organizer, capacity=TICKETS)
            placed = await place_order(api, buyer, event["id"], TICKETS)
            assert placed.status_code == 202, placed.text
            order: dict[str, Any] = await wait_rendered(api, placed.json()["id"], buyer)
            assert [t["status"] for t in order["tickets"]] == ["rendered"] * TICKETS

            # Then its own port counts each ticket once
            async def counted() -> float | None:
                now = await rendered_total(metrics, port)
                return now if now >= before + TICKETS else None

            assert await eventually(counted, "the renderer's port counts the order") == before + TICKETS

            # And every path its pod's probes ask answers
            for path in sorted(paths):
                r = await metrics.get(f"http://127.0.0.1:{port}{path}")
                assert r.status_code == 200, (path, r.status_code)
        assert renderer.alive()
    finally:
        await asyncio.to_thread(stack.stop)
