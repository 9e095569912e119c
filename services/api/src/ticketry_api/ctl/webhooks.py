"""``ticketryctl webhooks``: endpoints, and deliveries that died (``ticketry:webhooks:dead``)."""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Any

import orjson
import typer
from rich.table import Table
from ticketry import streams
from ticketry.replies import as_text
from ticketry.webhook_documents import WebhookEndpoint

from ticketry_api.ctl.common import (
    AllOpt,
    IdsArg,
    JsonOpt,
    YesOpt,
    act_on_dead_letters,
    console,
    fail,
    mongo_client,
    print_dead_letters,
    print_json,
    redis_client,
    run,
)
from ticketry_api.ops import audit
from ticketry_api.webhooks import deadletters

app = typer.Typer(help="Shop webhooks: endpoints, dead letters, re-drive.", no_args_is_help=True)


async def _retries_by_endpoint() -> Counter[str]:
    async with redis_client() as redis:
        members = await redis.zrange(streams.WEBHOOK_RETRIES, 0, -1)
    out: Counter[str] = Counter()
    for m in members:
        try:
            out[orjson.loads(as_text(m)).get("endpoint", "")] += 1
        except (orjson.JSONDecodeError, AttributeError):
            out["?"] += 1
    return out


@app.command("list")
def list_cmd(
    event: Annotated[str | None, typer.Option("--event", help="only this event's endpoints")] = None,
    json: JsonOpt = False,
) -> None:
    """Registered endpoints (never their secrets), with retries waiting and dead letters."""

    async def go() -> list[dict[str, Any]]:
        async with mongo_client():
            query = {} if event is None else {"event_id": event}
            hooks = await WebhookEndpoint.find(query).sort("_id").to_list()
        async with redis_client() as redis:
            dead = Counter(d.get("endpoint_id", "?") for d in await deadletters.list_dead(redis))
        waiting = await _retries_by_endpoint()
        return [
            {"id": h.id, "event_id": h.event_id, "url": h.url, "types": h.types, "description": h.description,
             "created_by": h.created_by, "created_at": h.created_at.isoformat(),
             "retries_waiting": waiting[h.id], "dead_letters": dead[h.id]}
            for h in hooks
        ]  # fmt: skip

    items = run(go)
    if json:
        print_json(items)
        return
    table = Table("id", "event", "url", "types", "retrying", "dead")
    for it in items:
        table.add_row(
            it["id"], it["event_id"], it["url"], ", ".join(it["types"]),
            str(it["retries_waiting"]), str(it["dead_letters"]),
        )  # fmt: skip
    console.print(table)
    console.print(f"{len(items)} endpoint(s)")


@app.command("dead")
def dead_cmd(json: JsonOpt = False) -> None:
    """Dead-lettered deliveries: endpoint, webhook-id, type, order, reason, attempts."""
    print_dead_letters(
        deadletters.list_dead,
        lambda it: (
            f"{it['id']}  endpoint={it.get('endpoint_id')}  {it.get('type')}  order={it.get('order_id')}  "
            f"webhook-id={it.get('webhook_id')}  attempts={it.get('attempts')}  reason={it['reason']}"
        ),
        json,
    )


@app.command("redrive")
def redrive_cmd(ids: IdsArg = None, every: AllOpt = False) -> None:
    """Send dead-lettered deliveries again: a fresh run of attempts with the same
    webhook-id (the shop dedupes); exit 1 if any was not re-driven."""
    act_on_dead_letters(
        ids, every, deadletters.list_dead, audit.by_ctl("redrive", "webhooks", deadletters.redrive),
        "nothing to re-drive (give IDs or --all)",
        lambda outcome: outcome.startswith("re-driven"),
    )  # fmt: skip


@app.command("delete")
def delete_cmd(ids: IdsArg = None, every: AllOpt = False, yes: YesOpt = False) -> None:
    """Drop dead-lettered deliveries for good; exit 1 if any was missing."""
    if every and not yes:
        raise fail("--all deletes every webhook dead letter: add --yes")
    act_on_dead_letters(
        ids, every, deadletters.list_dead, audit.by_ctl("delete", "webhooks", deadletters.delete),
        "nothing to delete (give IDs or --all --yes)",
        lambda outcome: outcome == "deleted",
    )  # fmt: skip
