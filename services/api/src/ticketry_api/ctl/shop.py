"""``ticketryctl tokens / events / orders``: what an organiser or buyer does, from a shell.

``events create`` and ``orders place`` go through the REST API like any
client, with a bearer token from ``--token`` or ``TICKETRY_TOKEN``; in dev mode
(``TICKETRY_DEV_MODE=1``) the command mints one itself for ``--as``.
"""

from __future__ import annotations

import asyncio
import random
from typing import Annotated, Any

import httpx
import orjson
import typer
import websockets
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from ticketry.auth import MAX_ID_CLAIM, ROLES, Role, issue_token
from ticketry.backoff import backoff_ceiling
from ticketry.settings import DEV_JWT_SECRET

from ticketry_api.adapters.readmodel import completed_status
from ticketry_api.ctl.common import JsonOpt, console, err, fail, print_json, run, settings

tokens = typer.Typer(help="Bearer tokens (dev mode only).", no_args_is_help=True)
events = typer.Typer(help="Events, through the API.", no_args_is_help=True)
orders = typer.Typer(help="Orders, through the API.", no_args_is_help=True)

TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token", help="Bearer token (default: $TICKETRY_TOKEN; dev mode: minted for --as).", show_default=False
    ),
]


def mint(sub: str, role: Role, *, ttl_s: int = 3600, events: list[str] | None = None, org: str | None = None) -> str:
    """A token signed with the stack's secret; refused outside dev mode, and
    for a staff token bound to no organizer and no events (the api refuses those)."""
    s = settings()
    if not s.dev_mode:
        raise fail("tokens are minted in dev mode only (TICKETRY_DEV_MODE=1); use your identity provider's tokens")
    if role == "staff" and not events and org is None:
        raise fail("a staff token needs --org ORGANIZER (scan at that organizer's events) or --event EV (repeat)")
    key = s.jwt_secret.get_secret_value() if s.jwt_secret is not None else DEV_JWT_SECRET
    return issue_token(sub, role, key=key, ttl_s=ttl_s, events=events, org=org)


def bearer(token: str | None, as_: str, role: Role) -> str:
    """The token to use: given, from the environment, or minted in dev mode."""
    if token:
        return token
    if (env := settings().token) is not None:
        return env.get_secret_value()
    return mint(as_, role)


@tokens.command("mint")
def mint_cmd(
    sub: Annotated[str, typer.Option("--sub", help="the user id")],
    role: Annotated[str, typer.Option("--role", help="buyer | organizer | staff | admin")],
    events_: Annotated[
        list[str] | None, typer.Option("--event", help="limit a staff token to this event (repeat)")
    ] = None,
    org: Annotated[
        str | None, typer.Option("--org", help="limit a staff token to this organizer's events (its sub)")
    ] = None,
    ttl: Annotated[int, typer.Option("--ttl", help="seconds until it expires", min=1)] = 3600,
    json: JsonOpt = False,
) -> None:
    """Mint a bearer token (dev mode only) and print it. A staff token needs
    ``--org`` or ``--event`` (or both: each limits it)."""
    if role not in ROLES:
        raise fail(f"unknown role {role!r} (buyer, organizer, staff, admin)")
    if org is not None and not 0 < len(org) <= MAX_ID_CLAIM:
        raise fail(f"--org must be 1-{MAX_ID_CLAIM} characters")
    tok = mint(sub, role, ttl_s=ttl, events=events_, org=org)  # type: ignore[arg-type]
    if json:
        print_json({"token": tok, "sub": sub, "role": role, "ttl_s": ttl, "events": events_, "org": org})
    else:
        console.print(tok, markup=False)


def _tier(spec: str) -> dict[str, Any]:
    """``id=vip,name=VIP Lounge,price=120.00,capacity=200,lane=vip,max_per_buyer=4``."""
    out: dict[str, Any] = {}
    for part in spec.split(","):
        key, sep, value = part.partition("=")
        if not sep:
            raise fail(f"--tier wants key=value pairs, got {part!r}")
        key = key.strip()
        out[key] = int(value) if key in ("capacity", "max_per_buyer") else value.strip()
    return out


def _problem(r: httpx.Response) -> str:
    try:
        body = r.json()
        return f"{r.status_code} {body.get('title', '')}: {body.get('detail', '')}"
    except ValueError:
        return f"{r.status_code} {r.text[:300]}"


@events.command("create")
def events_create(
    name: Annotated[str, typer.Option("--name")],
    venue: Annotated[str, typer.Option("--venue")],
    starts_at: Annotated[str, typer.Option("--starts-at", help="ISO 8601 with offset: 2027-06-01T20:00:00+02:00")],
    capacity: Annotated[int, typer.Option("--capacity", min=1)],
    price: Annotated[str, typer.Option("--price", help="the standard price: 39.00")],
    currency: Annotated[str, typer.Option("--currency")] = "EUR",
    timezone: Annotated[str, typer.Option("--timezone", help="IANA zone of the venue")] = "UTC",
    doors_at: Annotated[str | None, typer.Option("--doors-at")] = None,
    tier: Annotated[
        list[str] | None,
        typer.Option("--tier", help="id=vip,name=VIP,price=120.00[,capacity=200,lane=vip,max_per_buyer=4] (repeat)"),
    ] = None,
    token: TokenOpt = None,
    as_: Annotated[str, typer.Option("--as", help="dev mode: the organiser to mint a token for")] = "ctl-organizer",
    json: JsonOpt = False,
) -> None:
    """Create an event (you become its organiser); prints its id."""
    body: dict[str, Any] = {
        "name": name, "venue": venue, "starts_at": starts_at, "capacity": capacity, "price": price,
        "currency": currency, "timezone": timezone,
    }  # fmt: skip
    if doors_at:
        body["doors_at"] = doors_at
    if tier:
        body["tiers"] = [_tier(t) for t in tier]
    auth = bearer(token, as_, "organizer")
    r = httpx.post(f"{settings().api_base}/v1/events", json=body, headers={"Authorization": f"Bearer {auth}"})
    if r.status_code != 201:
        raise fail(f"the event was refused: {_problem(r)}", 1)
    ev = r.json()
    if json:
        print_json(ev)
    else:
        tiers = ", ".join(f"{t['id']} {t['price']}" for t in ev["tiers"])
        console.print(f"{ev['id']}  {ev['name']} at {ev['venue']}, {ev['starts_at']}, tiers: {tiers}", markup=False)


# Close codes after which a new socket would be refused too (docs/contract.md, WebSocket).
REFUSED = {4400: "a bad after=", 4401: "the token was refused", 4404: "no such order, or not yours"}
RESUME_CAP_S = 5.0  # the longest pause between two tries to open the socket again
_JITTER = random.SystemRandom()


class ProgressRefused(Exception):
    """The notifier will not show this order's progress (a close code of :data:`REFUSED`)."""


def final_message(msg: dict[str, Any]) -> dict[str, Any] | None:
    """The order's end, if ``msg`` tells it: its ``order.completed`` or
    ``order.cancelled``, or a snapshot of an order already finished (a socket
    opened, or opened again, after the end), as those events."""
    if msg["type"] in ("order.completed", "order.cancelled"):
        return msg
    if msg["type"] == "snapshot" and msg.get("status") in ("completed", "cancelled"):
        return {**msg, "type": f"order.{msg['status']}"}
    return None


def final_status(last: dict[str, Any]) -> str:
    """The order's status as its last message (:func:`final_message`) tells it."""
    return "cancelled" if last["type"] == "order.cancelled" else completed_status(last["rendered"], last["failed"])


async def watch_progress(progress_url: str, token: str, total: int, out: Console, timeout_s: float) -> dict[str, Any]:
    """Follow an order's progress socket from its start (``after=0-0``) with a
    progress bar until it completes or is cancelled; the last message. The
    snapshot counts what is done so far, and the replay after it carries each
    event's own, older counts: the bar only ever moves forward. A socket that
    closes before the end (a notifier restarted, Redis failing over) is opened
    again with ``after=<last message id>``, with a growing pause: no event is
    missed, one may come twice, and the counts (the order's own) count each
    ticket once."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[failed]} failed"),
        TimeElapsedColumn(),
    )
    after, tries = "0-0", 0
    with Progress(*columns, console=out, transient=False) as bar:
        task = bar.add_task("rendering", total=total, failed=0)
        done = failed = 0
        async with asyncio.timeout(timeout_s):
            while True:
                code: int | None = None
                why = "closed"
                try:
                    async with websockets.connect(f"{progress_url}?token={token}&after={after}", max_size=2**20) as ws:
                        async for raw in ws:
                            msg = orjson.loads(raw)
                            tries, after = 0, msg.get("id") or after
                            done, failed = max(done, msg["rendered"] + msg["failed"]), max(failed, msg["failed"])
                            bar.update(task, completed=done, failed=failed)
                            if (last := final_message(msg)) is not None:
                                bar.update(task, description=final_status(last))
                                return last
                        code = ws.close_code
                except websockets.ConnectionClosed as exc:
                    code = exc.rcvd.code if exc.rcvd is not None else None
                except (OSError, TimeoutError, websockets.InvalidHandshake) as exc:
                    why = type(exc).__name__
                if code in REFUSED:
                    raise ProgressRefused(f"closed {code}: {REFUSED[code]}")
                if code == 1000:  # the order was cancelled (its snapshot said so first, unless it raced)
                    bar.update(task, description="cancelled")
                    return {"type": "order.cancelled", "rendered": done - failed, "failed": failed}
                why = f"closed {code}" if code is not None else why
                bar.console.print(f"progress socket lost ({why}); resuming after {after}", markup=False)
                tries += 1  # equal jitter: a crowd of watchers does not come back at once
                await asyncio.sleep(backoff_ceiling(tries, 0.25, RESUME_CAP_S) * (0.5 + _JITTER.random() / 2))


@orders.command("place")
def orders_place(
    event: Annotated[str, typer.Option("--event", help="the event's id")],
    quantity: Annotated[int, typer.Option("--quantity", "-n", min=1)] = 1,
    tier: Annotated[str, typer.Option("--tier")] = "standard",
    holder: Annotated[str, typer.Option("--holder", help="the buyer's name, printed on every ticket")] = "Ada Lovelace",
    idempotency_key: Annotated[str | None, typer.Option("--idempotency-key")] = None,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Show live progress until the order is done.")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="seconds --watch waits at most", min=1)] = 600,
    token: TokenOpt = None,
    as_: Annotated[str, typer.Option("--as", help="dev mode: the buyer to mint a token for")] = "ctl-buyer",
    json: JsonOpt = False,
) -> None:
    """Place an order; with --watch follow it live. Exit 0 when it completed
    (or without --watch, when it was accepted), 1 otherwise."""
    auth = bearer(token, as_, "buyer")
    headers = {"Authorization": f"Bearer {auth}"}
    if idempotency_key:
        headers["Idempotency-Key"] = idempotency_key
    body = {"event_id": event, "quantity": quantity, "tier": tier, "holder_name": holder}
    r = httpx.post(f"{settings().api_base}/v1/orders", json=body, headers=headers, timeout=60)
    if r.status_code != 202:
        raise fail(f"the order was refused: {_problem(r)}", 1)
    order = r.json()
    if not watch:
        if json:
            print_json(order)
        else:
            console.print(f"{order['id']}  {quantity} × {tier}, {order['status']}", markup=False)
        return
    if not json:
        console.print(f"order {order['id']}: {quantity} × {tier}", markup=False)
    try:
        last = run(lambda: watch_progress(order["progress_url"], auth, quantity, err if json else console, timeout))
    except (TimeoutError, ProgressRefused) as exc:
        raise fail(f"lost the order's progress: {type(exc).__name__}: {exc}", 1) from None
    status = final_status(last)
    if json:
        print_json({**order, "status": status, "rendered": last["rendered"], "failed": last["failed"]})
    else:
        console.print(f"{order['id']} {status}: {last['rendered']} rendered, {last['failed']} failed", markup=False)
    raise typer.Exit(0 if status == "completed" else 1)
