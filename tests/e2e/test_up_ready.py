"""``just up`` (``python -m ticketry_devstack up``) says it is up only once a
renderer is live, so the first order never waits for one to start; and it says
why it is not up when the scaler cannot start one. Each run has its own data
directory and ports. How soon the demo's first ticket comes after "up" is a
timing figure: ``bench/burst.py`` measures it."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import redis
from ticketry import streams
from ticketry_devstack.procs import free_port

from tests.devstack_run import alive, lines, stop, up

pytestmark = [pytest.mark.e2e]


def _up(data: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    return up(
        data, *args,
        TICKETRY_API_PORT=str(free_port()), TICKETRY_NOTIFIER_PORT=str(free_port()),
        TICKETRY_DEV_REDIS_PORT=str(free_port()), TICKETRY_DEV_MONGO_PORT=str(free_port()),
        TICKETRY_DEV_LB_PORT=str(free_port()),
        TICKETRY_SCALER_METRICS_PORT="0", TICKETRY_LOG_LEVEL="WARNING", **env,
    )  # fmt: skip


@pytest.mark.timeout(900)
def test_up_only_with_a_live_renderer_then_the_demo_renders(tmp_path: Path) -> None:
    proc = _up(tmp_path / "data", "--demo", "5")
    seen: list[str] = []
    try:
        output = lines(proc)
        # Given `up` starting the stack, when it prints that it is up …
        for line in output:
            seen.append(line)
            if "Ticketry is up" in line:
                up_at = time.time()
                break
        else:
            pytest.fail(f"never up: {seen[-20:]}")
        banner = []
        for line in output:
            banner.append(line)
            if "Redis" in line:
                break
        redis_url = next(m.group(1) for line in banner if (m := re.search(r"Redis\s+(redis://\S+)", line)))
        # … then a renderer was live already: its heartbeat is there, started before the line
        client = redis.Redis.from_url(redis_url)
        try:
            beats = [client.hgetall(k) for k in client.scan_iter(match=streams.renderer_heartbeat("*"))]
        finally:
            client.close()
        assert beats, "up, but no renderer live"
        assert min(float(b[b"started"]) for b in beats) <= up_at + 1  # "started" is whole seconds
        assert any("waiting for the first renderer" in line for line in seen)
        # … and the api answers through the load balancer it printed (HAProxy, infra/haproxy/)
        lb = next(m.group(1) for line in banner if (m := re.search(r"load balancer: (http://\S+)", line)))
        assert httpx.get(f"{lb}/readyz", timeout=30).status_code == 200
        pids = [int(b[b"pid"]) for b in beats]

        # And the demo order placed after it renders completely
        for line in output:
            seen.append(line)
            if line.startswith("PDFs:"):
                break
        assert any("order.completed  5/5 rendered, 0 failed" in line for line in seen), seen[-20:]
        # ...its progress only ever moving forward (the replay after the snapshot is older)
        progress = [int(m.group(1)) for line in seen if (m := re.search(r"(\d+)/5 rendered", line))]
        assert progress == sorted(progress), progress
        # ...with its buyer's page linked, and served
        page = next(line.partition(": ")[2] for line in seen if line.startswith("buyer's page"))
        assert "#t=" in page, page
        got = httpx.get(page.partition("#")[0], timeout=30)
        assert got.status_code == 200 and got.headers["content-type"].startswith("text/html"), got.text
    finally:
        code = stop(proc)
    # When stopped (Ctrl-C), it exits cleanly and its renderer with it
    assert code == 0, seen[-20:]
    assert not any(alive(p) for p in pids)


@pytest.mark.timeout(900)
def test_not_up_when_the_scaler_cannot_start_a_renderer(tmp_path: Path) -> None:
    # Given bounds the scaler refuses (min above max), it exits before any renderer
    proc = _up(tmp_path / "data", TICKETRY_RENDERERS_MIN="3", TICKETRY_RENDERERS_MAX="2")
    try:
        out = list(lines(proc))
    finally:
        code = stop(proc)
    # Then `up` never says it is up, says why, and fails
    assert code == 1, out[-20:]
    assert not any("Ticketry is up" in line for line in out)
    assert any(line.startswith("not up: scaler exited") for line in out), out[-20:]
