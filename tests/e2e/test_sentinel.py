"""Services that find Redis through Sentinel: a wrong setting stops each one
at start in one line, and ``/readyz`` names Redis when no primary can be found.

Real processes and real ``redis-sentinel``s (``tests.redis_ha``); the
sentinel list "with no live sentinel" is free loopback ports nothing
listens on.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis.asyncio
from ticketry_devstack.procs import free_port, start_stack, tool

from tests.helpers import eventually
from tests.redis_ha import MASTER, redis_ha

SERVICES = ("api", "notifier", "renderer", "scaler")


def _start(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``argv`` in a fresh process with only ``env`` of TICKETRY_* (dev mode)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TICKETRY_", "OTEL_"))}
    return subprocess.run(
        argv, env={**base, "TICKETRY_DEV_MODE": "1", **env}, capture_output=True, text=True, timeout=120, check=False
    )


def _service(service: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return _start([sys.executable, "-c", f"from ticketry_{service}.main import run; run()"], env)


def _stop_line(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The one ``critical`` line of a refused start (every line is one JSON object)."""
    assert proc.returncode != 0, proc.stderr[-2000:]
    lines = [orjson.loads(raw) for raw in proc.stderr.splitlines()]
    (stop,) = [ln for ln in lines if ln["level"] == "critical"]
    return dict(stop)


def _no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("service", SERVICES)
def test_a_sentinel_list_with_no_live_sentinel_stops_the_start_in_one_line(service: str) -> None:
    # Given sentinels at two addresses where nothing listens
    dead = f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
    # When the service starts
    proc = _service(service, {"TICKETRY_REDIS_SENTINELS": dead})
    # Then it stops, and its one line says no sentinel answered, naming them and the master
    stop = _stop_line(proc)
    _no_traceback(proc)
    assert stop["service"] == service
    assert stop["msg"] == (
        f"stopped: NoSentinelAnswers: no sentinel answers: asked sentinels {dead} for master '{MASTER}'"
    ), stop


def test_a_sentinel_list_that_is_no_list_is_refused(tmp_path: Path) -> None:
    stop = _stop_line(_service("api", {"TICKETRY_REDIS_SENTINELS": "127.0.0.1"}))
    assert stop["msg"].startswith("stopped: TICKETRY_REDIS_SENTINELS: not a sentinel address"), stop


def test_a_master_nobody_serves_stops_every_start_and_ticketryctl_in_one_line(tmp_path: Path) -> None:
    with redis_ha(tmp_path / "redis") as ha:
        env = {**ha.env(), "TICKETRY_REDIS_SENTINEL_MASTER": "nobody"}
        # Live sentinels that monitor no master of that name: refused at once, for each service
        for service in SERVICES:
            proc = _service(service, env)
            stop = _stop_line(proc)
            _no_traceback(proc)
            assert stop["msg"] == (
                f"stopped: UnknownMaster: no sentinel knows master 'nobody': "
                f"asked sentinels {ha.sentinels_setting} for master 'nobody'"
            ), stop
        # ticketryctl too: one line on stderr, exit code 2, no traceback
        ctl = _start([tool("ticketryctl"), "dlq", "list"], env)
        assert ctl.returncode == 2, ctl.stderr
        assert ctl.stderr.strip().splitlines() == [
            f"no sentinel knows master 'nobody': asked sentinels {ha.sentinels_setting} for master 'nobody'"
        ]
        # And the right name works: ticketryctl reads through the sentinels' primary
        ok = _start([tool("ticketryctl"), "dlq", "list", "--json"], ha.env())
        assert ok.returncode == 0 and orjson.loads(ok.stdout) == [], ok.stderr


@pytest.mark.timeout(300)
async def test_readyz_names_redis_when_the_sentinels_name_no_primary(tmp_path: Path) -> None:
    with redis_ha(tmp_path / "redis") as ha:
        env = ha.env()
        stack = await asyncio.to_thread(
            start_stack, tmp_path / "stack", 0, env,
            redis_url=env["TICKETRY_REDIS_URL"], mongo_url=os.environ.get("TICKETRY_TEST_MONGO_URL"),
        )  # fmt: skip
        try:
            async with httpx.AsyncClient(timeout=30) as http:
                api_ready = f"{stack.api_url}/readyz"
                notifier_ready = f"http://127.0.0.1:{stack.notifier_port}/readyz"
                # Given a stack ready through the sentinels
                for url in (api_ready, notifier_ready):
                    r = await http.get(url)
                    assert r.status_code == 200 and r.json()["redis"] == "ok", r.text
                # When the sentinels stop monitoring the master and every connection to it is cut
                node = await ha.primary_node()
                for port in ha.sentinel_ports:
                    sentinel = redis.asyncio.Redis(port=port)
                    await sentinel.execute_command("SENTINEL", "REMOVE", MASTER)
                    await sentinel.aclose()
                primary = redis.asyncio.Redis.from_url(ha.node_url(node))
                await primary.client_kill_filter(_type="normal", skipme=True)
                await primary.aclose()

                # Then both answer 503 + Retry-After, naming Redis and why (and the store as fine)
                async def not_ready(url: str) -> dict[str, Any] | None:
                    r = await http.get(url)
                    if r.status_code != 503:
                        return None
                    assert r.headers["retry-after"] == "1"
                    return dict(r.json())

                for url in (api_ready, notifier_ready):
                    body = await eventually(lambda url=url: not_ready(url), f"{url} says not ready")
                    assert body["redis"] == f"down (no sentinel knows master '{MASTER}')", body
                    assert body["store"] == "ok", body
        finally:
            await asyncio.to_thread(stack.stop)
