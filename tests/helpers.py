"""Small steps shared by the end-to-end and chaos tests."""

from __future__ import annotations

import asyncio
import contextlib
import io
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import orjson
import pypdfium2
import websockets
import zxingcpp
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from pymongo import MongoClient
from ticketry_devstack.procs import Proc, Stack, ferretdb_proc, free_port, tool, wait_port

if TYPE_CHECKING:
    from tests.netns import Host


async def ws_outcome(url: str) -> tuple[str, int | None]:
    """The progress WebSocket's first message type, or ``("closed", code)``
    (the timeout is only a bound on a hang: either comes at once)."""
    try:
        async with asyncio.timeout(60), websockets.connect(url) as ws:
            msg = orjson.loads(await ws.recv())
            return str(msg["type"]), None
    except websockets.ConnectionClosed as exc:
        return "closed", exc.rcvd.code if exc.rcvd else None


def metric_samples(text: str, name: str, **labels: str) -> list[Sample]:
    """The samples named ``name`` (no labels in it: those go in ``labels``) in
    a ``/metrics`` ``text`` whose labels include ``labels`` (parsed as
    Prometheus does, not by line prefixes)."""
    assert "{" not in name, name
    return [
        s
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and labels.items() <= s.labels.items()
    ]


def metric_sum(text: str, name: str, **labels: str) -> float:
    """The sum of :func:`metric_samples`: 0 when there is none (a counter not
    counted yet is absent)."""
    return sum(s.value for s in metric_samples(text, name, **labels))


def metric_one(text: str, name: str, **labels: str) -> float:
    """The value of the one sample :func:`metric_samples` finds (asserted)."""
    found = metric_samples(text, name, **labels)
    assert len(found) == 1, (name, labels, found, text[:2000])
    return found[0].value


async def eventually(check: Any, what: str, timeout_s: float = 120, *, interval_s: float = 0.2) -> Any:
    """Poll the async ``check()`` every ``interval_s`` until it returns
    something truthy, and return that (a bound on a hang, not a timing claim).
    The one polling wait of the tests: the others are made of it."""
    deadline = time.monotonic() + timeout_s
    while not (got := await check()):
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(interval_s)
    return got


async def until(pred: Callable[[], bool], timeout_s: float = 60.0) -> None:
    """:func:`eventually` for a plain predicate of in-process state, looked at often."""

    async def check() -> bool:
        return pred()

    await eventually(check, getattr(pred, "__name__", "condition"), timeout_s, interval_s=0.02)


def bearer(tok: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {tok}"}


async def create_event(api: httpx.AsyncClient, organizer: str, capacity: int = 1000, **over: Any) -> dict[str, Any]:
    body = {
        "name": "Night of Tests", "venue": "Loopback Arena", "starts_at": "2027-06-01T19:30:00Z",
        "capacity": capacity, "price": "25.00", "currency": "EUR", **over,
    }  # fmt: skip
    r = await api.post("/v1/events", json=body, headers=bearer(organizer))
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


async def place_order(api: httpx.AsyncClient, buyer: str, event_id: str, quantity: int, **over: Any) -> httpx.Response:
    body = {"event_id": event_id, "quantity": quantity, "holder_name": "Ada Lovelace", "tier": "standard", **over}
    headers = bearer(buyer)
    if "idempotency_key" in over:
        headers["Idempotency-Key"] = body.pop("idempotency_key")
    return await api.post("/v1/orders", json=body, headers=headers)


async def honouring_retry_after(send: Callable[[], Awaitable[httpx.Response]]) -> httpx.Response:
    """``send()`` again after each 429 or 503 once its Retry-After has passed, as a
    client that honours it does; the first other answer. Buyers of one test share
    one address, which may have only so many bodies in transit at once (429 past
    ``TICKETRY_MAX_SLOW_BODIES_PER_CLIENT``)."""
    while True:
        r = await send()
        if r.status_code not in (429, 503):
            return r
        await asyncio.sleep(int(r.headers["retry-after"]))


def ledger_sold(entries: list[dict[str, Any]], capacity: int) -> int:
    """What an event's ledger ``entries`` (by ``seq``) say is sold, once checked
    to be a gap-free chain of sums (entry n is seq n and sold what n - 1 sold
    plus its delta), each within 0 and ``capacity``."""
    running = 0
    for n, e in enumerate(entries, 1):
        running += e["delta"]
        assert (e["seq"], e["sold_after"]) == (n, running) and 0 <= running <= capacity, (n, e)
    return running


async def collect_progress(
    progress_url: str, token: str, *, after: str | None = "0-0", timeout_s: float = 120, stop_after: int | None = None
) -> list[dict[str, Any]]:
    """Messages of one order's progress socket, until ``order.completed``
    (or ``stop_after`` messages).

    ``after="0-0"`` (the default) asks for the order's whole history: the fast
    path renders a small order before a socket opened after the 202 connects,
    so "connect, then watch" alone would race. ``after=None`` is live-only."""
    url = f"{progress_url}?token={token}" + (f"&after={after}" if after else "")
    out: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout_s), websockets.connect(url, max_size=2**20) as ws:
        while True:
            msg = orjson.loads(await ws.recv())
            out.append(msg)
            if msg["type"] == "order.completed" or (stop_after and len(out) >= stop_after):
                return out


def decode_qr(pdf: bytes) -> str:
    """Rasterise page 1 and decode its QR code with zxing-cpp."""
    doc = pypdfium2.PdfDocument(io.BytesIO(pdf))
    try:
        image = doc[0].render(scale=200 / 72).to_pil()
    finally:
        doc.close()
    results = zxingcpp.read_barcodes(image)
    assert results, "no QR code found on the page"
    text: str = results[0].text
    return text


@contextlib.contextmanager
def serving(make: Callable[[int], Proc]) -> Iterator[int]:
    """A server of ours (``make(port)``, e.g. ``lambda port: redis_proc(dir, port)``)
    on a free port, once it listens; its port. Stopped after."""
    port = free_port()
    proc = make(port).start()
    try:
        wait_port(port, 60, proc=proc.popen)
        yield port
    finally:
        proc.stop()


@contextlib.contextmanager
def ferretdb_client(data_dir: Path) -> Iterator[MongoClient[dict[str, Any]]]:
    """A FerretDB of our build of its own, on ``data_dir``, and a client of it."""
    with serving(lambda port: ferretdb_proc(data_dir, port)) as port:
        client: MongoClient[dict[str, Any]] = MongoClient(f"mongodb://127.0.0.1:{port}/")
        with client:
            yield client


async def checkin_list(
    api: httpx.AsyncClient, organizer: str, event_id: str, tiers: list[str] | None = None, name: str = "Main door"
) -> str:
    """A new check-in list of the event; its id."""
    body: dict[str, Any] = {"name": name, **({"tiers": tiers} if tiers is not None else {})}
    r = await api.post(f"/v1/events/{event_id}/checkin-lists", json=body, headers=bearer(organizer))
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def scan(api: httpx.AsyncClient, staff: str, code: str, list_id: str, **over: Any) -> httpx.Response:
    """``POST /v1/checkins`` of one code on one list."""
    return await api.post("/v1/checkins", json={"code": code, "list_id": list_id, **over}, headers=bearer(staff))


async def wait_rendered(api: httpx.AsyncClient, order_id: str, tok: str, timeout_s: float = 120) -> dict[str, Any]:
    """The order once none of its tickets is left to render (a bounded wait for the event)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got: dict[str, Any] = (await api.get(f"/v1/orders/{order_id}", headers=bearer(tok))).json()
        if got["status"] != "processing" and all(t["status"] != "queued" for t in got["tickets"]):
            return got
        assert time.monotonic() < deadline, got
        await asyncio.sleep(0.1)


async def codes_of(api: httpx.AsyncClient, order: dict[str, Any], tok: str) -> list[str]:
    """The check-in codes of an order's tickets, read from their PDFs' QR codes."""
    await wait_rendered(api, order["id"], tok)
    out = []
    for tid in order["tickets"]:
        pdf = await api.get(f"/v1/tickets/{tid}/pdf", headers=bearer(tok))
        assert pdf.status_code == 200, pdf.text
        out.append(decode_qr(pdf.content))
    return out


def start_api_of_its_own(
    stack: Stack, name: str, port: int, extra: dict[str, str], *, host: Host | None = None
) -> Proc:
    """Another api process of ``stack`` on ``port`` with settings ``extra``, once it listens
    (its log ``logs/<name>.log``); inside ``host``, listening on its address, if given."""
    listen = "127.0.0.1" if host is None else host.address
    inside = {} if host is None else {"TICKETRY_API_HOST": listen}
    env = stack.service_env({"TICKETRY_API_PORT": str(port), **inside, **extra})
    argv = [tool("ticketry-api")]
    proc = Proc(name, argv if host is None else host.argv(argv), env, stack.data_dir / "logs" / f"{name}.log").start()
    try:
        wait_port(port, 60, proc.popen, host=listen)
    except BaseException:
        proc.stop()
        raise
    return proc
