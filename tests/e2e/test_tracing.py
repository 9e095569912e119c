"""One ticket's trace across the services: api → renderer → notifier, with the
context carried in the stream messages (a stack of its own, spans to a file)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.chaos.support import ProgressWatcher, wait_until
from tests.conftest import TokenFactory, make_stack
from tests.helpers import create_event, place_order

pytestmark = pytest.mark.e2e
TICKETS = 500  # enough that some events reach the socket live, not as a replay (a design is ready at once)


def spans(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


async def test_one_trace_follows_each_ticket_across_services(tmp_path: Path, token: TokenFactory) -> None:
    trace_file = tmp_path / "spans.jsonl"
    env = {"TICKETRY_TRACE_FILE": str(trace_file), "OTEL_BSP_SCHEDULE_DELAY": "100"}
    stack = await asyncio.to_thread(make_stack, tmp_path / "stack", 1, env)
    try:
        async with httpx.AsyncClient(base_url=stack.api_url, timeout=60) as api:
            buyer = token("trace-buyer", "buyer")
            event = await create_event(api, token("trace-org", "organizer"), capacity=TICKETS)
            order = (await place_order(api, buyer, event["id"], TICKETS)).json()
            watcher = ProgressWatcher(order["progress_url"], buyer, after=None)
            await asyncio.wait_for(watcher.run(timeout_s=60), 90)

        # Then every ticket's render continues the api's order.place span, and the
        # buyer's socket pushes continue the renders
        def of(name: str) -> list[dict[str, Any]]:
            return [s for s in spans(trace_file) if s["name"] == name]

        async def exported() -> bool:
            renders = [s for s in of("ticket.render") if s["attributes"].get("order.id") == order["id"]]
            return len(renders) == TICKETS and bool(of("progress.push"))

        await wait_until(exported, 30)
        (root,) = [s for s in of("order.place") if s["attributes"].get("order.id") == order["id"]]
        # (inside FastAPI's own request span, the trace's root)
        (http,) = [s for s in spans(trace_file) if s["trace_id"] == root["trace_id"] and s["parent_span_id"] is None]
        assert (http["service"], http["name"], root["service"]) == ("ticketry-api", "POST /v1/orders", "ticketry-api")
        renders = [s for s in of("ticket.render") if s["attributes"].get("order.id") == order["id"]]
        assert sorted(s["attributes"]["ticket.id"] for s in renders) == sorted(order["tickets"])
        assert {(s["service"], s["trace_id"], s["parent_span_id"]) for s in renders} == {
            ("ticketry-renderer", root["trace_id"], root["span_id"])
        }
        render_ids = {s["span_id"] for s in renders}
        pushes = [s for s in of("progress.push") if s["trace_id"] == root["trace_id"]]
        assert pushes and all(s["service"] == "ticketry-notifier" for s in pushes)
        assert {s["parent_span_id"] for s in pushes if s["attributes"]["event.type"] == "ticket.rendered"} <= render_ids
    finally:
        await asyncio.to_thread(stack.stop)
