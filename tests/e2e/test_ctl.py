"""``ticketryctl`` as operators run it: the real console script against a real stack."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import IO, Any

import httpx
import orjson
import pytest
from ticketry import streams
from ticketry.auth import decode_token, issue_token
from ticketry.ids import ticket_ids
from ticketry.settings import DEV_JWT_SECRET
from ticketry_devstack.procs import Stack, tool

from tests.chaos.support import actl, db_of, mongo_of, ok_json, order_events, redis_of, wait_until
from tests.conftest import TokenFactory, stack_of_its_own
from tests.helpers import bearer, create_event, place_order

pytestmark = pytest.mark.e2e

ENV = {"TICKETRY_RENDER_MAX_ATTEMPTS": "2", "TICKETRY_RETRY_BASE_S": "0.1", "TICKETRY_RETRY_CAP_S": "0.5"}
WAIT_S = 120  # a bound on a hang, far above need
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# What makes rich draw a live bar on a pipe as on a terminal (rich.console reads these).
TERMINAL = {"TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1", "TERM": "xterm", "COLUMNS": "120"}


@pytest.fixture(scope="module")
def ctl_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with stack_of_its_own(tmp_path_factory, "ctl", 1, ENV) as stack:
        yield stack


@pytest.fixture
async def capi(ctl_stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=ctl_stack.api_url, timeout=60) as client:
        yield client


@pytest.mark.timeout(600)
async def test_status_shows_streams_renderers_outbox_and_dead_letters(
    ctl_stack: Stack, capi: httpx.AsyncClient
) -> None:
    # Given a paused waiting room with two buyers in line
    org = issue_token("ctl-room-org", "organizer", key=DEV_JWT_SECRET)
    room = await create_event(capi, org, capacity=5, waiting_room=True)
    assert (await capi.post(f"/v1/events/{room['id']}/queue/pause", headers=bearer(org))).status_code == 200
    for n in range(2):
        buyer = issue_token(f"ctl-room-buyer-{n}", "buyer", key=DEV_JWT_SECRET)
        assert (await capi.post(f"/v1/events/{room['id']}/queue", headers=bearer(buyer))).status_code == 201
    redis = redis_of(ctl_stack)
    try:

        async def a_renderer_beats() -> bool:
            return bool([k async for k in redis.scan_iter(match=streams.renderer_heartbeat("*"))])

        await wait_until(a_renderer_beats, WAIT_S)
    finally:
        await redis.aclose()
    s = ok_json(await actl(ctl_stack, "status", "--json"))
    assert set(s) >= {"streams", "lag", "pending", "renderers", "scaler", "outbox", "dead_letters", "webhooks"}
    render = s["streams"][streams.RENDER_VIP]
    assert render["exists"] and set(render["groups"][streams.RENDERERS_GROUP]) == {
        "consumers", "pending", "lag", "last_delivered_id",
    }  # fmt: skip
    events = s["streams"][streams.TICKET_EVENTS]["groups"]
    assert {streams.PROJECTOR_GROUP, streams.WEBHOOKS_GROUP} <= set(events)
    assert isinstance(s["lag"], int) and isinstance(s["pending"], int)
    assert len(s["renderers"]) == 1 and s["renderers"][0]["pid"] == ctl_stack.renderers[0].pid
    assert s["scaler"]["leader"] is None  # the test stack runs no scaler
    assert isinstance(s["outbox"]["in_flight"], int)
    assert set(s["dead_letters"]) == {"render", "webhooks"} and "retries_waiting" in s["webhooks"]
    [shown] = [r for r in s["rooms"] if r["event_id"] == room["id"]]
    assert (shown["waiting"], shown["admitted"], shown["paused"], shown["sold_out"]) == (2, 0, True, False)

    plain = await actl(ctl_stack, "status")
    assert plain.returncode == 0 and "ticketry:ticket-events" in plain.stdout and "dead letters" in plain.stdout
    assert "waiting rooms" in plain.stdout and "paused" in plain.stdout

    # --watch --json: one JSON line per refresh, until stopped
    proc = await asyncio.to_thread(
        subprocess.Popen,
        [tool("ticketryctl"), "status", "--watch", "--json", "--interval", "0.2"],
        env=ctl_stack.service_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        lines = [orjson.loads(await asyncio.to_thread(proc.stdout.readline)) for _ in range(2)]
        assert all("streams" in line for line in lines) and lines[0]["at"] < lines[1]["at"]
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, 60)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.mark.timeout(600)
async def test_tokens_events_and_a_watched_order(ctl_stack: Stack) -> None:
    # tokens mint: dev mode only
    tok = await actl(ctl_stack, "tokens", "mint", "--sub", "op-1", "--role", "staff", "--event", "ev_1")
    assert tok.returncode == 0, tok.stderr
    who = decode_token(tok.stdout.strip(), key=DEV_JWT_SECRET)
    assert (who.sub, who.role, who.events) == ("op-1", "staff", frozenset({"ev_1"}))
    # a staff token is bound: to an organizer's events (--org) or to events (--event), never to nothing
    by_org = await actl(ctl_stack, "tokens", "mint", "--sub", "op-2", "--role", "staff", "--org", "ctl-organizer")
    assert by_org.returncode == 0, by_org.stderr
    assert decode_token(by_org.stdout.strip(), key=DEV_JWT_SECRET).org == "ctl-organizer"
    unbound = await actl(ctl_stack, "tokens", "mint", "--sub", "op-3", "--role", "staff")
    assert unbound.returncode == 2 and "--org" in unbound.stderr and not unbound.stdout.strip()
    refused = await actl(ctl_stack, "tokens", "mint", "--sub", "x", "--role", "admin", env={"TICKETRY_DEV_MODE": "0"})
    assert refused.returncode == 2 and "dev mode" in refused.stderr

    # events create, through the API, with tiers
    ev = ok_json(
        await actl(
            ctl_stack, "events", "create", "--name", "Ctl Night", "--venue", "Shell Hall", "--starts-at",
            "2027-06-01T20:00:00+02:00", "--timezone", "Europe/Berlin", "--capacity", "50", "--price", "19.00",
            "--tier", "id=standard,name=Standard,price=19.00", "--tier", "id=vip,name=VIP,price=99.00,lane=vip",
            "--json",
        )
    )  # fmt: skip
    assert ev["id"].startswith("ev_") and [t["id"] for t in ev["tiers"]] == ["standard", "vip"]
    assert ev["starts_at"] == "2027-06-01T20:00:00+02:00"

    # orders place --watch: follows the progress socket to the end
    placed = ok_json(await actl(ctl_stack, "orders", "place", "--event", ev["id"], "-n", "3", "--watch", "--json"))
    assert (placed["status"], placed["rendered"], placed["failed"]) == ("completed", 3, 0)
    assert placed["id"].startswith("or_") and len(placed["tickets"]) == 3
    plain = await actl(ctl_stack, "orders", "place", "--event", ev["id"], "--tier", "vip", "--watch")
    assert plain.returncode == 0 and "completed: 1 rendered, 0 failed" in plain.stdout, plain.stdout + plain.stderr
    # ... a refusal is an exit 1 with the API's problem
    sold_out = await actl(ctl_stack, "orders", "place", "--event", ev["id"], "-n", "500")
    assert sold_out.returncode == 1 and "409" in sold_out.stderr


# Bounds on a hang: each console script run starts a Python process (seconds on a busy machine).
@pytest.mark.timeout(900)
async def test_dead_letters_shown_and_deleted_and_replay_rebuilds_the_read_models(
    ctl_stack: Stack, capi: httpx.AsyncClient, token: TokenFactory
) -> None:
    redis, mongo = redis_of(ctl_stack), mongo_of(ctl_stack)
    db = db_of(mongo)
    try:
        # Given an order with a ticket that cannot be rendered, a malformed request and
        # a cancelled order (no renderer running while they are set up)
        organizer, buyer = token("ctl-org", "organizer"), token("ctl-buyer", "buyer")
        event = await create_event(capi, organizer)
        await asyncio.to_thread(ctl_stack.renderers[-1].stop)
        r = await place_order(capi, buyer, event["id"], 4)
        assert r.status_code == 202, r.text
        order = r.json()
        poisoned = order["tickets"][0]
        squat = Path(ctl_stack.env["TICKETRY_STORAGE_DIR"]) / order["id"] / f"{poisoned}.pdf"
        (squat / "x").mkdir(parents=True)
        await redis.xadd(streams.RENDER_VIP, {"v": "1", "data": b"{not json"})
        r = await place_order(capi, buyer, event["id"], 2)
        cancelled = r.json()
        assert (await capi.post(f"/v1/orders/{cancelled['id']}/cancel", headers=bearer(buyer))).status_code == 200
        await asyncio.to_thread(ctl_stack.start_renderer)

        async def order_is(status: str) -> bool:
            doc = await db.order_states.find_one({"_id": order["id"]})
            return bool(doc and doc["status"] == status)

        await wait_until(lambda: order_is("partially_failed"), WAIT_S)

        # dlq list / show
        listed = ok_json(await actl(ctl_stack, "dlq", "list", "--json"))
        (dead,) = [d for d in listed if d["ticket_id"] == poisoned]
        (malformed,) = [d for d in listed if not d["redrivable"]]
        shown = ok_json(await actl(ctl_stack, "dlq", "show", dead["id"], "--json"))
        assert shown["request"]["ticket_id"] == poisoned and shown["request"]["order_id"] == order["id"]
        assert len(shown["history"]) == 2 and shown["reason"]
        bad = ok_json(await actl(ctl_stack, "dlq", "show", malformed["id"], "--json"))
        assert bad["request"] is None and bad["raw"]["data"] == "{not json"
        plain = await actl(ctl_stack, "dlq", "show", dead["id"])
        assert plain.returncode == 0 and poisoned in plain.stdout
        assert (await actl(ctl_stack, "dlq", "show", "1-1")).returncode == 1

        # dlq delete: once, then not found; --all wants --yes
        gone = await actl(ctl_stack, "dlq", "delete", malformed["id"])
        assert gone.returncode == 0 and "deleted" in gone.stdout
        again = await actl(ctl_stack, "dlq", "delete", malformed["id"])
        assert again.returncode == 1 and "not found" in again.stdout
        assert (await actl(ctl_stack, "dlq", "delete", "--all")).returncode == 2
        assert [d["id"] for d in ok_json(await actl(ctl_stack, "dlq", "list", "--json"))] == [dead["id"]]

        # replay: the rebuilt read models equal the live ones (failed ticket, cancelled order)
        report = ok_json(await actl(ctl_stack, "replay", "--json"))
        assert report["identical"] and report["differences"] == [], report
        assert report["ticket_states"]["compared"] >= 4 and report["order_states"]["compared"] >= 1
        assert report["events"]["replayed"] >= 5 and report["events"]["retention_s"] == streams.EVENTS_RETENTION_S
        assert report["database"] not in await mongo.list_database_names()  # dropped

        # ... and after the failed ticket is re-driven and renders (failed → rendered)
        shutil.rmtree(squat)
        assert (await actl(ctl_stack, "dlq", "redrive", dead["id"])).returncode == 0
        await wait_until(lambda: order_is("completed"), WAIT_S)
        report = ok_json(await actl(ctl_stack, "replay", "--json"))
        assert report["identical"], report
        state = await db.ticket_states.find_one({"_id": poisoned})
        assert state["status"] == "rendered"

        # When a live document is wrong, replay says which and exits 1
        saved = await db.order_states.find_one({"_id": order["id"]})
        await db.ticket_states.update_one({"_id": poisoned}, {"$set": {"status": "failed"}})
        await db.order_states.delete_one({"_id": order["id"]})
        try:
            differs = await actl(ctl_stack, "replay", "--json")
            assert differs.returncode == 1, differs.stderr
            diffs = {(d["collection"], d["id"], d["kind"]) for d in orjson.loads(differs.stdout)["differences"]}
            assert diffs == {("ticket_states", poisoned, "differs"), ("order_states", order["id"], "missing_in_live")}
        finally:
            await db.ticket_states.update_one({"_id": poisoned}, {"$set": {"status": "rendered"}})
            await db.order_states.insert_one(saved)
        # --keep leaves the rebuilt database for a look (the order's state is in it)
        kept = ok_json(await actl(ctl_stack, "replay", "--json", "--keep", "--database", "ticketry_replay_kept"))
        assert kept["kept"] and kept["database"] == "ticketry_replay_kept"
        rebuilt = await mongo["ticketry_replay_kept"].order_states.find_one({"_id": order["id"]})
        assert rebuilt["status"] == "completed"
        assert (await actl(ctl_stack, "replay", "--database", "ticketry_replay_kept")).returncode == 2
        await mongo.drop_database("ticketry_replay_kept")
    finally:
        await redis.aclose()
        await mongo.close()


@pytest.mark.timeout(600)
async def test_a_watched_order_draws_its_progress_on_a_terminal(
    ctl_stack: Stack, capi: httpx.AsyncClient, token: TokenFactory
) -> None:
    # Given no renderer running when an operator places an order of 5 with --watch on a terminal
    event = await create_event(capi, token("ctl-bar-org", "organizer"))
    for proc in ctl_stack.renderers:
        await asyncio.to_thread(proc.stop)
    argv = [tool("ticketryctl"), "orders", "place", "--event", event["id"], "-n", "5", "--as", "ctl-bar-buyer"]
    watch = await asyncio.to_thread(
        subprocess.Popen, [*argv, "--watch", "--json"], env=ctl_stack.service_env(TERMINAL),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    drawn = bytearray()
    assert watch.stderr is not None
    reader = asyncio.create_task(asyncio.to_thread(_read_all, watch.stderr, drawn))
    patient = None

    def counts() -> list[int]:
        return [int(m) for m in re.findall(r"(\d+)/5\b", ANSI.sub("", drawn.decode(errors="replace")))]

    try:
        buyer = token("ctl-bar-buyer", "buyer")

        async def placed() -> list[dict[str, Any]]:
            items: list[dict[str, Any]] = (await capi.get("/v1/orders", headers=bearer(buyer))).json()["items"]
            return items

        await wait_until(placed, WAIT_S)
        (order,) = await placed()
        # And its last ticket cannot be stored (a directory squats its PDF's path) by a
        # renderer that retries it for as long as the test needs: the order holds at 4 of 5
        last = ticket_ids(order["id"], 5)[-1]
        squat = Path(ctl_stack.env["TICKETRY_STORAGE_DIR"]) / order["id"] / f"{last}.pdf"
        (squat / "x").mkdir(parents=True)
        patient = await asyncio.to_thread(ctl_stack.start_renderer, {"TICKETRY_RENDER_MAX_ATTEMPTS": "100000"})

        async def held_at_four() -> bool:
            return 4 in counts()

        # Then the bar shows the 4 tickets done while the order waits
        await wait_until(held_at_four, WAIT_S)
        # When the notifier dies under the watching socket and comes back
        notifier = ctl_stack.procs["notifier"]
        await asyncio.to_thread(notifier.kill)
        await asyncio.to_thread(ctl_stack.start_notifier)

        async def resumed() -> bool:
            return "resuming after" in ANSI.sub("", drawn.decode(errors="replace"))

        await wait_until(resumed, WAIT_S)
        # and the ticket can be stored again
        shutil.rmtree(squat)
        await asyncio.to_thread(watch.wait, WAIT_S)
        assert watch.stdout is not None
        out = watch.stdout.read()
    finally:
        if watch.poll() is None:
            watch.kill()
            await asyncio.to_thread(watch.wait, 60)
        await reader
        for pipe in (watch.stdout, watch.stderr):
            if pipe is not None:
                pipe.close()
        # (the stack's renderer as the other tests know it)
        if patient is not None:
            await asyncio.to_thread(patient.stop)
        await asyncio.to_thread(ctl_stack.start_renderer)
    # Then the watch went on through the notifier's restart (from the last
    # message it had: after=<its id>), the bar ended at 5/5 after 4/5, never
    # moving back, and the order completed
    assert counts() == sorted(counts()), counts()
    result = orjson.loads(out)
    assert (result["status"], result["rendered"], result["failed"]) == ("completed", 5, 0), result
    shown = counts()
    assert shown[-1] == 5 and 4 in shown[: shown.index(5)], shown


def _read_all(stream: IO[bytes], into: bytearray) -> None:
    while chunk := stream.read1(4096):  # type: ignore[attr-defined]
        into += chunk


# Last in the module: it trims the stack's ticket-event stream for good.
@pytest.mark.timeout(900)
async def test_replay_of_a_trimmed_stream_counts_the_older_documents_apart(
    ctl_stack: Stack, capi: httpx.AsyncClient, token: TokenFactory
) -> None:
    redis, mongo = redis_of(ctl_stack), mongo_of(ctl_stack)
    db = db_of(mongo)
    try:
        # Given an order whose events are then trimmed from the ticket-event stream
        # (XTRIM MINID at a later order's first event), every group having read them
        organizer, buyer = token("ctl-trim-org", "organizer"), token("ctl-trim-buyer", "buyer")
        event = await create_event(capi, organizer)

        async def completed(order_id: str) -> bool:
            doc = await db.order_states.find_one({"_id": order_id})
            return bool(doc and doc["status"] == "completed")

        placed = []
        for quantity in (3, 2):
            r = await place_order(capi, buyer, event["id"], quantity)
            assert r.status_code == 202, r.text
            placed.append(r.json())
            await wait_until(lambda: completed(placed[-1]["id"]), WAIT_S)
        old, kept = placed

        async def every_group_read_all() -> bool:
            groups = await redis.xinfo_groups(streams.TICKET_EVENTS)
            return all(int(g["pending"]) == 0 and int(g.get("lag") or 0) == 0 for g in groups)

        await wait_until(every_group_read_all, WAIT_S)
        first_kept = (await order_events(redis, kept["id"]))[0][0]
        # (exact, not ``~``: https://redis.io/docs/latest/commands/xtrim/)
        old_events = await order_events(redis, old["id"])
        assert await redis.xtrim(streams.TICKET_EVENTS, minid=first_kept, approximate=False) >= len(old_events)
        assert await order_events(redis, old["id"]) == []

        # When the read models are rebuilt from what is left
        report = ok_json(await actl(ctl_stack, "replay", "--json"))

        # Then the older documents are counted as older than the stream, not as differences
        assert report["identical"] and report["differences"] == [], report
        assert report["events"]["trimmed_before_first"] and report["events"]["first"] == first_kept, report["events"]
        tickets, orders = report["ticket_states"], report["order_states"]
        assert tickets["older_than_stream"] >= old["quantity"] and orders["older_than_stream"] >= 1, report
        # ... while the later order's documents are rebuilt and compared
        assert tickets["compared"] >= kept["quantity"] and orders["compared"] >= 1, report
        live_tickets = await db.ticket_states.count_documents({})
        assert tickets["compared"] + tickets["older_than_stream"] + tickets["moved_on"] == live_tickets, report
    finally:
        await redis.aclose()
        await mongo.close()
