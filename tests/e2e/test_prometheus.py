"""The metrics of docs/contract.md reach a real Prometheus (Debian's, installed by
infra/bootstrap.sh) from the three scrape targets: the api, the notifier and
the scaler, whose target also carries its forked renderers' series. A ticket
counts once however many renderers there are (two processes render the order
here), the cluster gauges come from the scaler leader only (a standby scaler
exports none), every panel of the Grafana dashboard returns data and every
alert rule evaluates without error."""

from __future__ import annotations

import asyncio
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from redis.asyncio import Redis
from ticketry import streams
from ticketry.replies import as_text
from ticketry_devstack.procs import Proc, Stack, free_port, wait_port
from ticketry_scaler.metrics import RenderersCollector

from tests.chaos.support import wait_until
from tests.conftest import TokenFactory, make_stack
from tests.helpers import bearer, checkin_list, create_event, eventually, place_order, scan

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "infra" / "grafana" / "ticketry-dashboard.json"
RULES = sorted((ROOT / "infra" / "prometheus").glob("*.rules.yml"))
TICKETS = 30  # more than a small order: the standard lane
# The leader's renderers: two processes, reading a few entries at a time, so
# both take part in one order and the scaler's /metrics sums their files.
RENDERERS = 2
STD_BATCH = 4
CONTRACT = {
    "ticketry_orders_total", "ticketry_order_seconds", "ticketry_checkins_total", "ticketry_tickets_rendered_total",
    "ticketry_tickets_failed_total", "ticketry_render_seconds", "ticketry_stream_lag", "ticketry_stream_pending",
    "ticketry_dead_letters", "ticketry_renderers", "ticketry_websocket_connections",
}  # fmt: skip
API_METRICS = "prometheus-scrapes-0123456789"  # the api's TICKETRY_METRICS_TOKEN here
CLUSTER_GAUGES = ("ticketry_stream_lag", "ticketry_stream_pending", "ticketry_dead_letters", "ticketry_renderers")


class Prometheus:
    """A real Prometheus scraping ``targets`` every second, with our rules loaded."""

    def __init__(self, root: Path, targets: dict[str, list[int]], bearer: dict[str, str] | None = None) -> None:
        binary = shutil.which("prometheus")
        assert binary, "prometheus missing: run infra/bootstrap.sh (Debian package prometheus)"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        root.mkdir(parents=True, exist_ok=True)
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in RULES],
            "scrape_configs": [
                {
                    "job_name": job,
                    "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in ports]}],
                    **({"authorization": {"credentials": (bearer or {})[job]}} if job in (bearer or {}) else {}),
                }
                for job, ports in targets.items()
            ],
        }
        (root / "prometheus.yml").write_text(yaml.safe_dump(config))
        argv = [
            binary, f"--config.file={root / 'prometheus.yml'}", f"--storage.tsdb.path={root / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn",
        ]  # fmt: skip
        self.proc = Proc("prometheus", argv, {}, root / "prometheus.log")

    async def start(self) -> Prometheus:
        """Start it and wait until it is ready: it opens its port before its
        storage is loaded and answers 503 to queries until then."""
        self.proc.start()
        await asyncio.to_thread(wait_port, self.port, 60, self.proc.popen)

        async def ready() -> bool:
            assert self.proc.popen is not None and self.proc.popen.poll() is None, "prometheus exited while starting"
            async with httpx.AsyncClient(timeout=5) as client:
                return (await client.get(f"{self.url}/-/ready")).status_code == 200

        await eventually(ready, "prometheus ready", 60)
        return self

    async def get(self, path: str, **params: str) -> Any:
        async with httpx.AsyncClient(base_url=self.url, timeout=30) as client:
            r = await client.get(path, params=params)
        body = r.json()
        assert r.status_code == 200 and body["status"] == "success", body
        return body["data"]

    async def query(self, expr: str) -> list[dict[str, Any]]:
        data = await self.get("/api/v1/query", query=expr)
        result: list[dict[str, Any]] = data["result"]
        return result

    async def scalar(self, expr: str) -> float | None:
        """The one value of ``expr``, None while it has no data."""
        result = await self.query(expr)
        assert len(result) <= 1, (expr, result)
        return float(result[0]["value"][1]) if result else None


async def renders_by_renderer(redis_url: str) -> dict[str, int]:
    """Each live renderer's renders so far, from its heartbeat (refreshed every second)."""
    client = Redis.from_url(redis_url)
    try:
        out: dict[str, int] = {}
        async for key in client.scan_iter(match=streams.renderer_heartbeat("*")):
            beat = {as_text(k): as_text(v) for k, v in (await client.hgetall(key)).items()}
            if streams.HEARTBEAT_CONSUMER in beat and streams.HEARTBEAT_RENDERED in beat:
                out[beat[streams.HEARTBEAT_CONSUMER]] = int(beat[streams.HEARTBEAT_RENDERED])
        return out
    finally:
        await client.aclose()


def panel_queries() -> list[tuple[str, str]]:
    dash = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dash["panels"] for t in p["targets"]]


async def exposition(port: int, headers: dict[str, str] | None = None) -> str:
    async with httpx.AsyncClient(timeout=30) as client:
        r = await client.get(f"http://127.0.0.1:{port}/metrics", headers=headers)
    assert r.status_code == 200
    return r.text


async def metric_names(port: int) -> set[str]:
    return {m.group(1) for m in re.finditer(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", await exposition(port), re.M)}


def promtool_lint(text: str) -> str:
    """``promtool check metrics``: the text parses (each family once) and follows
    Prometheus' naming conventions (units, ``_total``); its complaints, if any."""
    binary = shutil.which("promtool")
    assert binary, "promtool missing: run infra/bootstrap.sh (Debian package prometheus)"
    done = subprocess.run(
        [binary, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60, check=False
    )
    return "" if done.returncode == 0 else done.stdout + done.stderr


@pytest.mark.timeout(300)
async def test_prometheus_scrapes_every_contract_metric(tmp_path: Path, token: TokenFactory) -> None:
    # The api's /metrics behind its token, as a deployment scrapes it
    stack: Stack = await asyncio.to_thread(make_stack, tmp_path / "stack", 0, {"TICKETRY_METRICS_TOKEN": API_METRICS})
    prom: Prometheus | None = None
    try:
        # Given a scaler leading with two forked renderers, a standby scaler, and a
        # Prometheus scraping the api, the notifier and both scalers
        leader_port, standby_port = free_port(), free_port()
        stack.start_service(
            "scaler",
            {
                "TICKETRY_RENDERERS_MIN": str(RENDERERS),
                "TICKETRY_RENDERERS_MAX": str(RENDERERS),
                "TICKETRY_STD_BATCH": str(STD_BATCH),
                "TICKETRY_SCALER_METRICS_PORT": str(leader_port),
            },
        )
        await asyncio.to_thread(wait_port, leader_port, 60)
        prom = await Prometheus(
            tmp_path / "prometheus",
            {"api": [stack.api_port], "notifier": [stack.notifier_port], "scaler": [leader_port, standby_port]},
            bearer={"api": API_METRICS},
        ).start()

        async def leading_with_its_renderers() -> bool:
            running = await prom.scalar('max(ticketry_renderers{state="running"})')
            return running == RENDERERS and await prom.scalar("sum(ticketry_tickets_rendered_total)") is not None

        await wait_until(leading_with_its_renderers, 120)
        standby = stack.procs["standby"] = Proc(
            "standby",
            stack.procs["scaler"].argv,
            stack.service_env(
                {
                    "TICKETRY_RENDERERS_MIN": "0",
                    "TICKETRY_RENDERERS_MAX": "1",
                    "TICKETRY_SCALER_METRICS_PORT": str(standby_port),
                }
            ),
            stack.data_dir / "logs" / "standby.log",
        ).start()
        await asyncio.to_thread(wait_port, standby_port, 60, standby.popen)

        async def all_targets_up() -> bool:
            active = (await prom.get("/api/v1/targets"))["activeTargets"]
            return len(active) == 4 and all(t["health"] == "up" for t in active)

        await wait_until(all_targets_up, 60)
        rendered_before = await prom.scalar("sum(ticketry_tickets_rendered_total)")
        orders_before = {
            o: await prom.scalar(f'sum(ticketry_orders_total{{outcome="{o}"}})')
            for o in ("accepted", "sold_out", "rejected")
        }
        unknown_before = await prom.scalar('sum(ticketry_checkins_total{outcome="unknown"})')
        assert rendered_before is not None and unknown_before is not None and None not in orders_before.values()
        renders_before = await renders_by_renderer(stack.env["TICKETRY_REDIS_URL"])
        assert len(renders_before) == RENDERERS, renders_before

        # When a buyer orders 30 tickets (accepted), more than are left (sold out) and
        # a tier the event does not have (rejected), and the door scans a forged code
        async with httpx.AsyncClient(base_url=stack.api_url, timeout=60) as api:
            organizer, buyer = token("prom-org", "organizer"), token("prom-buyer", "buyer")
            event = await create_event(api, organizer, capacity=TICKETS + 5)
            assert (await place_order(api, buyer, event["id"], TICKETS)).status_code == 202
            assert (await place_order(api, buyer, event["id"], 10)).status_code == 409
            assert (await place_order(api, buyer, event["id"], 1, tier="no-such-tier")).status_code == 422
            list_id = await checkin_list(api, organizer, event["id"])
            assert (
                await scan(api, token("prom-staff", "staff", org="prom-org"), "TK1.k1.tk_x.forged", list_id)
            ).status_code == 404
            # A buyer's token is no metrics token: refused
            assert (await api.get("/metrics", headers=bearer(buyer))).status_code == 401

        # Then Prometheus sees the tickets rendered once each, and each answer counted once
        # (each target is scraped on its own: wait until every one has been since)
        async def scraped() -> bool:
            now = await prom.scalar("sum(ticketry_tickets_rendered_total)")
            checkins = await prom.scalar('sum(ticketry_checkins_total{outcome="unknown"})')
            orders = [await prom.scalar(f'sum(ticketry_orders_total{{outcome="{o}"}})') for o in orders_before]
            return (
                now is not None and now - rendered_before >= TICKETS
                and checkins is not None and checkins > unknown_before
                and all(n is not None and b is not None and n > b
                        for n, b in zip(orders, orders_before.values(), strict=True))
            )  # fmt: skip

        await wait_until(scraped, 120)
        assert await prom.scalar("sum(ticketry_tickets_rendered_total)") == rendered_before + TICKETS

        # (rendered by both renderer processes, the same ones as before the order)
        async def renders_of_the_order() -> dict[str, int] | None:
            now = await renders_by_renderer(stack.env["TICKETRY_REDIS_URL"])
            done = {c: now[c] - renders_before.get(c, 0) for c in now}
            return done if now.keys() == renders_before.keys() and sum(done.values()) >= TICKETS else None

        done = await eventually(renders_of_the_order, "the renderers' heartbeats count the order")
        assert sum(done.values()) == TICKETS and all(n > 0 for n in done.values()), done
        assert await prom.scalar("sum(ticketry_tickets_failed_total)") == 0
        for outcome, before in orders_before.items():
            assert await prom.scalar(f'sum(ticketry_orders_total{{outcome="{outcome}"}})') == before + 1, outcome  # type: ignore[operator]
        assert await prom.scalar('sum(ticketry_checkins_total{outcome="unknown"})') == unknown_before + 1
        assert await prom.scalar("sum(ticketry_order_seconds_count)") == 3
        assert await prom.scalar('sum(ticketry_render_seconds_count{lane="standard"})') == TICKETS
        assert await prom.scalar("sum(ticketry_websocket_connections)") == 0

        # And the cluster gauges come from the leader alone: one series per stream and group
        leader_names, standby_names = await metric_names(leader_port), await metric_names(standby_port)
        assert set(CLUSTER_GAUGES) <= leader_names
        assert not set(CLUSTER_GAUGES) & standby_names
        lag = await prom.query("count by (stream, group) (ticketry_stream_lag)")
        assert {(s["metric"]["stream"], s["metric"]["group"]): s["value"][1] for s in lag} == {
            ("ticketry:render:vip", "renderers"): "1",
            ("ticketry:render:std", "renderers"): "1",
            ("ticketry:ticket-events", "projector"): "1",
        }

        # And every target's text parses (each family once), and the contract's names
        # follow Prometheus' conventions (units, _total)
        for port in (stack.api_port, stack.notifier_port, leader_port, standby_port):
            complaints = promtool_lint(await exposition(port, bearer(API_METRICS) if port == stack.api_port else None))
            assert "error while linting" not in complaints, (port, complaints)
            assert not [c for c in complaints.splitlines() if c.split(" ", 1)[0] in CONTRACT], (port, complaints)

        # And every dashboard panel and every alert rule has data or evaluates cleanly
        for title, expr in panel_queries():
            assert await prom.query(expr), f"panel {title!r}: no data for {expr}"

        async def rules_evaluated() -> bool:
            groups = (await prom.get("/api/v1/rules"))["groups"]
            rules = [r for g in groups for r in g["rules"]]
            return bool(rules) and all(r.get("lastEvaluation", "").startswith("20") for r in rules)

        await wait_until(rules_evaluated, 60)
        groups = (await prom.get("/api/v1/rules"))["groups"]
        rules = [r for g in groups for r in g["rules"]]
        assert len(rules) >= 12
        assert [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"] == []
        firing = [r["name"] for r in rules if r["type"] == "alerting" and r["state"] == "firing"]
        assert firing == []  # a healthy stack
    finally:
        if prom is not None:
            await asyncio.to_thread(prom.proc.stop)
        if "standby" in stack.procs:
            await asyncio.to_thread(stack.procs["standby"].stop, 60)
        await asyncio.to_thread(stack.stop)


RENDERER = textwrap.dedent(
    """
    import sys
    from prometheus_client import Counter, Histogram
    rendered = Counter("ticketry_tickets_rendered", "Tickets rendered", ["lane"])
    seconds = Histogram("ticketry_render_seconds", "One render", ["lane"], buckets=(0.1, 1.0))
    n = int(sys.argv[1])
    rendered.labels("vip").inc(n)
    seconds.labels("vip").observe(0.05 * n)
    """
)


def merged(path: Path) -> Iterable[Metric]:
    """What the files in ``path`` sum to, read as prometheus_client reads them (no folding)."""
    out: Iterable[Metric] = MultiProcessCollector.merge(glob.glob(str(path / "*.db")), accumulate=True)  # type: ignore[no-untyped-call]
    return out


def values(metrics: Iterable[Metric]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for m in metrics for s in m.samples}


def test_the_files_of_exited_renderers_fold_into_one_archive(tmp_path: Path) -> None:
    # Given three renderer processes that counted into the scaler's directory and exited
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}

    def renderer(n: int) -> None:
        subprocess.run([sys.executable, "-c", RENDERER, str(n)], env=env, check=True, timeout=60)

    for n in (1, 2, 3):
        renderer(n)
    files = glob.glob(str(tmp_path / "*.db"))
    assert len(files) == 6
    as_they_were = values(merged(tmp_path))
    # When the scaler's /metrics collects them
    collected = values(RenderersCollector(tmp_path).collect())
    # Then the sums are the same, from one archive file per type
    assert collected == as_they_were
    assert collected[("ticketry_tickets_rendered_total", (("lane", "vip"),))] == 6
    assert collected[("ticketry_render_seconds_count", (("lane", "vip"),))] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["counter_archive.db", "histogram_archive.db"]
    # And a later renderer's counts add to them, folded or not
    renderer(4)
    assert values(merged(tmp_path))[("ticketry_tickets_rendered_total", (("lane", "vip"),))] == 10
    again = values(RenderersCollector(tmp_path).collect())
    assert again[("ticketry_tickets_rendered_total", (("lane", "vip"),))] == 10
    assert again[("ticketry_render_seconds_bucket", (("lane", "vip"), ("le", "0.1")))] == 2  # 0.05 and 0.1
    assert again[("ticketry_render_seconds_bucket", (("lane", "vip"), ("le", "1.0")))] == 4
