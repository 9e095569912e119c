"""The operator's console (``/ops``, docs/contract.md) in a real headless
Chromium, and the admin-only JSON it reads, against a stack of its own that
starts with no renderer: an order waits (its lag shows) until a test starts one.

A poisoned ticket is one whose PDF path is squatted by a directory, so every
render of it fails until the directory goes (as tests/e2e/test_ctl.py makes
them). Every wait is for something to happen, bounded far above need.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Dialog, Page, expect
from ticketry import streams
from ticketry.messages import ScalerDecisionEntry
from ticketry.replies import as_text
from ticketry_devstack.procs import Stack

from tests.chaos.support import redis_of
from tests.conftest import TokenFactory, stack_of_its_own
from tests.e2e.pages_support import WAIT_MS, browser
from tests.helpers import bearer, create_event, eventually, place_order

pytestmark = pytest.mark.e2e

ENV = {
    "TICKETRY_RENDER_MAX_ATTEMPTS": "2", "TICKETRY_RETRY_BASE_S": "0.1", "TICKETRY_RETRY_CAP_S": "0.5",
    "TICKETRY_OPS_HISTORY_INTERVAL_S": "1",  # the throughput kept in Redis: a sample a second
}  # fmt: skip
WAIT_S = WAIT_MS / 1000
XSS = "<img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def ops_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with stack_of_its_own(tmp_path_factory, "ops-stack", renderers=0, extra_env=ENV) as s:
        yield s


@pytest.fixture
async def oapi(ops_stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=ops_stack.api_url, timeout=60) as client:
        yield client


async def poisoned_order(
    stack: Stack, api: httpx.AsyncClient, token: TokenFactory, name: str, quantity: int, poisoned: int
) -> tuple[dict[str, Any], list[Path]]:
    """An order that waits (every renderer stopped) with its first ``poisoned`` tickets poisoned."""
    for r in stack.renderers:
        await asyncio.to_thread(r.stop)
    event = await create_event(api, token(f"{name}-org", "organizer"), capacity=50)
    placed = await place_order(api, token(f"{name}-buyer", "buyer"), event["id"], quantity)
    assert placed.status_code == 202, placed.text
    order: dict[str, Any] = placed.json()
    squats = [Path(stack.env["TICKETRY_STORAGE_DIR"]) / order["id"] / f"{t}.pdf" for t in order["tickets"][:poisoned]]
    for squat in squats:
        (squat / "x").mkdir(parents=True)
    return order, squats


async def dead_letters_of(api: httpx.AsyncClient, admin: str, order_id: str, n: int) -> list[dict[str, Any]]:
    async def found() -> list[dict[str, Any]]:
        got = (await api.get("/v1/ops/dead-letters", headers=bearer(admin))).json()["render"]
        mine = [d for d in got if d["order_id"] == order_id]
        return mine if len(mine) == n else []

    out: list[dict[str, Any]] = await eventually(found, f"{n} dead letters of {order_id}", WAIT_S)
    return out


async def ticket_status(api: httpx.AsyncClient, buyer: str, ticket: str) -> str:
    r = await api.get(f"/v1/tickets/{ticket}", headers=bearer(buyer))
    return str(r.json().get("status", "")) if r.status_code == 200 else ""


def stream_row(page: Page, stream: str, group: str) -> Any:
    return page.locator(f"[data-testid=ops-stream][data-stream='{stream}'][data-group='{group}']")


async def test_console_shows_lag_throughput_and_a_poison_message_and_redrives_it(
    ops_stack: Stack, oapi: httpx.AsyncClient, token: TokenFactory, tmp_path: Path
) -> None:
    admin = token("ops-admin-1", "admin")
    alerts: list[str] = []

    async def on_dialog(dialog: Dialog) -> None:
        if dialog.type != "confirm":
            alerts.append(dialog.message)
        await dialog.accept()

    # Given a three-ticket order waiting (no renderer), its first ticket poisoned
    order, [squat] = await poisoned_order(ops_stack, oapi, token, "ops-page", 3, 1)
    buyer = token("ops-page-buyer", "buyer")
    async with browser(tmp_path / "profile") as context:
        page = await context.new_page()
        page.on("dialog", on_dialog)
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        # When an admin opens the console with the token in the fragment
        await page.goto(f"{ops_stack.api_url}/ops#token={admin}")
        # Then the token is gone from the URL, and the vip lane's lag shows the waiting tickets
        assert "token" not in page.url
        await expect(page.get_by_test_id("ops-live")).to_have_attribute("data-state", "live")
        row = stream_row(page, streams.RENDER_VIP, streams.RENDERERS_GROUP)
        await expect(row).to_have_attribute("data-lag", "3")
        # When a renderer starts: the lag returns to 0, the chart draws tickets rendered
        busy = "() => [...document.querySelectorAll('[data-testid=ops-renderer]')].some((r) => +r.dataset.recent > 0)"
        recent = asyncio.ensure_future(page.wait_for_function(busy, timeout=WAIT_MS))  # watched from now on
        await asyncio.to_thread(ops_stack.start_renderer)
        await expect(row).to_have_attribute("data-lag", "0")
        await expect(page.locator("[data-testid=ops-renderer]")).to_have_count(1)
        # ... its tickets/s over the last 10 s above 0 while it rendered them
        await recent
        # ... with its resident memory, from its heartbeat
        await expect(page.locator("[data-testid=ops-renderer]")).not_to_have_attribute("data-rss", "0")
        rss = int(await page.locator("[data-testid=ops-renderer]").get_attribute("data-rss") or 0)
        assert 10 * 2**20 < rss < 8 * 2**30, rss
        chart = page.get_by_test_id("ops-throughput")
        await expect(chart.locator("canvas")).to_have_count(1)
        await expect(chart).not_to_have_attribute("data-peak", "0")
        # ... and, for an order placed now, orders accepted per second
        more = await place_order(oapi, buyer, order["event_id"], 1)
        assert more.status_code == 202, more.text
        await expect(chart).not_to_have_attribute("data-orders-peak", "0")
        # ... and once nothing is left to render, the chart's newest point is back at 0
        await expect(row).to_have_attribute("data-lag", "0")
        await expect(chart).to_have_attribute("data-last", "0")
        # ... and the first-ticket latency of the order (it waited for a renderer: some time, not hours)
        latency = page.get_by_test_id("ops-latency")
        await expect(latency).not_to_have_attribute("data-p50", "")
        p50, p99 = [float(await latency.get_attribute(a) or 0) for a in ("data-p50", "data-p99")]
        assert 0 < p50 <= p99 < 3_600_000, (p50, p99)
        # ... and the poisoned ticket appears among the dead letters with its reason
        (dead,) = await dead_letters_of(oapi, admin, order["id"], 1)
        item = page.locator(f"[data-testid=ops-deadletter][data-id='{dead['id']}']")
        await expect(item.get_by_test_id("ops-reason")).to_have_text(dead["reason"])
        assert dead["reason"] and dead["ticket_id"] == order["tickets"][0]
        # When the poison is fixed and the admin re-drives it from the page (confirmed)
        shutil.rmtree(squat)
        await item.get_by_test_id("ops-redrive").click()
        # Then it leaves the list, the audit log names the admin, and the ticket renders
        await expect(item).to_have_count(0)
        audit = page.locator("[data-testid=ops-audit][data-who='ops-admin-1'][data-action=redrive]")
        await expect(audit).to_have_count(1)
        await expect(audit).to_contain_text(dead["id"])
        await eventually(
            lambda: _is(ticket_status(oapi, buyer, dead["ticket_id"]), "rendered"), "re-driven ticket rendered", WAIT_S
        )
        if os.environ.get("TICKETRY_SCREENSHOT_DIR"):
            where = Path(os.environ["TICKETRY_SCREENSHOT_DIR"])
            where.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=str(where / "ops.png"), full_page=True)

        # When a dead letter's reason is markup
        redis = redis_of(ops_stack)
        try:
            xss_id = as_text(await redis.xadd(streams.DEAD_LETTERS, {"v": "1", "data": "{", streams.DLQ_REASON: XSS}))
        finally:
            await redis.aclose()
        # Then it shows as text: no image made of it, no script run
        xss = page.locator(f"[data-testid=ops-deadletter][data-id='{xss_id}']")
        await expect(xss.get_by_test_id("ops-reason")).to_have_text(XSS)
        # When the scaler decides (its entry as the leader writes it; no scaler runs here), with a markup reason
        decision = {
            "reason": XSS, "lag": "40", "pending": "2", "rate": "90.5", "running": "1", "live": "1",
            "from": "1", "to": "3", "recommended": "3", "drain_s": "0.4", "backend": "local", "instance": "ops-test",
            "ts": "1700000000",
        }  # fmt: skip
        ScalerDecisionEntry.model_validate(decision)  # the entry the catalogue describes
        redis = redis_of(ops_stack)
        try:
            await redis.xadd(streams.SCALER_DECISIONS, decision)  # type: ignore[arg-type]
        finally:
            await redis.aclose()
        # Then the page shows what it wants beside the renderers live, and the decision with its reason as text
        await expect(page.get_by_test_id("ops-scaler")).to_have_attribute("data-desired", "3")
        await expect(page.get_by_test_id("ops-scaler")).to_contain_text("desired 3, live 1")
        await expect(page.get_by_test_id("ops-decision").first).to_contain_text(f"1 → 3 ({XSS}")
        assert await page.locator("#dead img").count() == 0
        assert alerts == [] and errors == [], (alerts, errors)
        await xss.get_by_test_id("ops-delete").click()
        await expect(xss).to_have_count(0)

        # When another console opens after the rendering: the throughput kept in Redis
        # (a sample a second, by the api) has the tickets rendered and the orders accepted
        kept = (await oapi.get("/v1/ops/status", headers=bearer(admin))).json()["throughput"]
        assert max(p["tickets_rendered"] for p in kept) > 0 and max(p["orders_accepted"] for p in kept) > 0, kept
        later = await context.new_page()
        await later.goto(f"{ops_stack.api_url}/ops#token={admin}")
        # Then its chart starts with them, not from its opening
        await expect(later.get_by_test_id("ops-throughput")).not_to_have_attribute("data-seeded", "0")
        await expect(later.get_by_test_id("ops-throughput")).not_to_have_attribute("data-orders-peak", "0")


async def _is(status: Any, want: str) -> bool:
    return bool(await status == want)


@pytest.mark.parametrize("role", ["buyer", "organizer", "staff"])
async def test_the_console_data_is_for_admins_only(
    ops_stack: Stack, oapi: httpx.AsyncClient, token: TokenFactory, role: str
) -> None:
    tok = token(f"ops-{role}", role, org="ops-org" if role == "staff" else None)  # type: ignore[arg-type]
    for method, path in [
        ("GET", "/v1/ops/status"), ("GET", "/v1/ops/dead-letters"), ("GET", "/v1/ops/audit"),
        ("GET", "/v1/ops/feed"), ("GET", "/v1/ops/dead-letters/render/1-1"),
        ("POST", "/v1/ops/dead-letters/render/1-1/redrive"), ("DELETE", "/v1/ops/dead-letters/webhooks/1-1"),
    ]:  # fmt: skip
        r = await oapi.request(method, path, headers=bearer(tok))
        assert r.status_code == 403, (method, path, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
    assert (await oapi.get("/v1/ops/status")).status_code == 401


async def test_redrive_of_a_dead_letter_not_there_is_404(oapi: httpx.AsyncClient, token: TokenFactory) -> None:
    admin = token("ops-admin-2", "admin")
    for kind in ("render", "webhooks"):
        for dead_id in ("1-1", "not-an-id"):
            r = await oapi.post(f"/v1/ops/dead-letters/{kind}/{dead_id}/redrive", headers=bearer(admin))
            assert r.status_code == 404, r.text
    assert (await oapi.post("/v1/ops/dead-letters/mail/1-1/redrive", headers=bearer(admin))).status_code == 422


async def test_two_admins_redriving_one_letter_at_once_redrive_it_once(
    ops_stack: Stack, oapi: httpx.AsyncClient, token: TokenFactory
) -> None:
    # Given a dead letter of a poisoned ticket, the poison then fixed
    order, [squat] = await poisoned_order(ops_stack, oapi, token, "ops-twice", 1, 1)
    await asyncio.to_thread(ops_stack.start_renderer)
    first, second = token("ops-admin-3", "admin"), token("ops-admin-4", "admin")
    (dead,) = await dead_letters_of(oapi, first, order["id"], 1)
    shutil.rmtree(squat)
    # When two admins re-drive it at once
    answers = await asyncio.gather(*(
        oapi.post(f"/v1/ops/dead-letters/render/{dead['id']}/redrive", headers=bearer(t)) for t in (first, second)
    ))  # fmt: skip
    # Then one re-drove it and the other was told it is not there; the lane got it once
    assert sorted(r.status_code for r in answers) == [200, 404], [r.text for r in answers]
    log = (await oapi.get("/v1/ops/audit", headers=bearer(first))).json()
    mine = [a for a in log if a["target"] == dead["id"]]
    assert sorted(a["who"] for a in mine) == ["ops-admin-3", "ops-admin-4"]
    assert sum(o.startswith("re-driven") for a in mine for o in a["outcome"].values()) == 1
    buyer = token("ops-twice-buyer", "buyer")
    await eventually(lambda: _is(ticket_status(oapi, buyer, dead["ticket_id"]), "rendered"), "rendered", WAIT_S)
