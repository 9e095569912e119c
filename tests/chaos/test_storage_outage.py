"""The PDF store (S3: our versitygw) SIGKILLed while tickets are rendered, then
started again on its data.

A store that is down is not the tickets' fault: renderers keep retrying them
(backoff, ``TICKETRY_STORAGE_PATIENCE_S``) past ``TICKETRY_RENDER_MAX_ATTEMPTS``,
so no ticket is failed or dead-lettered for an outage, the download-all answers
503 with Retry-After while it lasts, and when the store is back every ticket is
stored and announced exactly once. A ticket's own status still answers (from
the read model) while the store is down."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import httpx
import pypdf
import pytest
from ticketry import streams
from ticketry_devstack.procs import s3_proc, wait_port

from tests.chaos.support import completes_rendering_each_once, mongo_of, redis_of, wait_until
from tests.conftest import TokenFactory, make_stack
from tests.helpers import bearer, create_event, place_order, wait_rendered

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]

# Two attempts and quick retries: without the patience rule every ticket
# rendered during the outage would be dead-lettered within a second or two.
ENV = {
    "TICKETRY_STORAGE_BACKEND": "s3",
    "TICKETRY_RENDER_MAX_ATTEMPTS": "2",
    "TICKETRY_RETRY_BASE_S": "0.1",
    "TICKETRY_RETRY_CAP_S": "0.5",
}
QUANTITY = 20
DEADLINE_S = 180.0  # a bound on a hang; each event comes much sooner


async def _retried_past_the_last_attempt(redis: Any, order_id: str) -> bool:
    """A request of ``order_id`` delivered more often than the attempts allow."""
    for lane in streams.RENDER_LANES:
        if not await redis.exists(lane):
            continue
        rows = await redis.xpending_range(lane, streams.RENDERERS_GROUP, "-", "+", 1000)
        for row in rows:
            fields = await redis.xrange(lane, row["message_id"], row["message_id"])
            if fields and order_id.encode() in fields[0][1].get(b"data", b"") and row["times_delivered"] > 2:
                return True
    return False


async def test_a_store_outage_is_waited_out_not_failed(tmp_path: Any, token: TokenFactory) -> None:
    stack = await asyncio.to_thread(make_stack, tmp_path, 1, ENV)
    redis, mongo = redis_of(stack), mongo_of(stack)
    org, buyer = token("s3-outage-org", "organizer"), token("s3-outage-buyer", "buyer")
    try:
        async with httpx.AsyncClient(base_url=stack.api_url, timeout=60) as api:
            event = await create_event(api, org, capacity=1000)
            # Given tickets stored in S3
            first = (await place_order(api, buyer, event["id"], 2)).json()
            assert (await wait_rendered(api, first["id"], buyer))["rendered"] == 2

            # When the store is SIGKILLed and an order is placed
            await asyncio.to_thread(stack.procs["s3"].kill)
            r = await place_order(api, buyer, event["id"], QUANTITY)
            assert r.status_code == 202, r.text
            order = r.json()

            # Then its tickets are retried past the last attempt, none failed or dead-lettered
            await wait_until(lambda: _retried_past_the_last_attempt(redis, order["id"]), DEADLINE_S)
            progress = await redis.hgetall(streams.order_progress(order["id"]))
            assert int(progress.get(b"failed", 0)) == 0 and int(progress.get(b"rendered", 0)) == 0, progress
            assert await redis.xlen(streams.DEAD_LETTERS) == 0
            # and a download that needs the store answers 503 with Retry-After
            down = await api.get(f"/v1/orders/{first['id']}/pdf", headers=bearer(buyer))
            assert down.status_code == 503 and down.headers.get("retry-after"), down.text
            assert down.headers["content-type"].startswith("application/problem+json")
            # so does a ticket's PDF, while the ticket itself answers from the read model: queued
            ticket = order["tickets"][0]
            pdf = await api.get(f"/v1/tickets/{ticket}/pdf", headers=bearer(buyer))
            assert pdf.status_code == 503 and pdf.headers.get("retry-after"), pdf.text
            assert pdf.headers["content-type"].startswith("application/problem+json")
            got = await api.get(f"/v1/tickets/{ticket}", headers=bearer(buyer))
            assert got.status_code == 200 and got.json()["status"] == "queued", got.text

            # When the store is started again on its data
            stack.procs["s3"] = s3_proc(stack.data_dir / "s3", stack.s3_port).start()
            await asyncio.to_thread(wait_port, stack.s3_port, 60, stack.procs["s3"].popen)

            # Then every ticket is rendered and announced exactly once, none failed
            await completes_rendering_each_once(redis, mongo, order, DEADLINE_S)
            done = await wait_rendered(api, order["id"], buyer)
            assert (done["rendered"], done["failed"]) == (QUANTITY, 0), done
            assert await redis.xlen(streams.DEAD_LETTERS) == 0
            # and stored: the download-all has every page, the first order's too
            for o, n in ((order, QUANTITY), (first, 2)):
                got = await api.get(f"/v1/orders/{o['id']}/pdf", headers=bearer(buyer))
                assert got.status_code == 200, got.text
                assert len(pypdf.PdfReader(io.BytesIO(got.content)).pages) == n
    finally:
        await redis.aclose()
        await mongo.close()
        await asyncio.to_thread(stack.stop)
