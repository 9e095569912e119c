"""``ticketryctl dlq``: the renderers' dead letters (``ticketry:render:dead``).

The work (and why a re-drive is exactly-once in effect) is in
``ticketry_api.ops.render_dead``, which the console at ``/ops`` calls too;
every re-drive and delete is written to the operators' audit log.
"""

from __future__ import annotations

from typing import Annotated, Any

import orjson
import typer

from ticketry_api.ctl.common import (
    AllOpt,
    IdsArg,
    JsonOpt,
    YesOpt,
    act_on_dead_letters,
    check_ids,
    console,
    fail,
    print_dead_letters,
    print_json,
    redis_client,
    run,
)
from ticketry_api.ops import audit
from ticketry_api.ops.render_dead import delete, describe, list_dead_letters, redrive, show_dead_letter

app = typer.Typer(help="The renderers' dead letters (ticketry:render:dead).", no_args_is_help=True)


@app.command("list")
def list_cmd(json: JsonOpt = False) -> None:
    """Every dead letter: id, source lane, order, ticket, reason, attempts."""
    print_dead_letters(
        list_dead_letters,
        lambda it: (
            f"{it['id']}  {it['source']}  order={it['order_id']}  ticket={it['ticket_id']}  "
            f"attempts={len(it['history'])}  reason={it['reason']}"
        ),
        json,
    )


@app.command("show")
def show_cmd(dlq_id: Annotated[str, typer.Argument(metavar="ID")], json: JsonOpt = False) -> None:
    """One dead letter in full: the request, why it died, every attempt."""
    check_ids([dlq_id])

    async def go() -> dict[str, Any] | None:
        async with redis_client() as redis:
            return await show_dead_letter(redis, dlq_id)

    item = run(go)
    if item is None:
        raise fail(f"{dlq_id}: not found", 1)
    if json:
        print_json(item)
        return
    for key in ("id", "source", "order_id", "ticket_id", "reason", "at", "consumer", "source_entry", "redrivable"):
        console.print(f"{key:>13}: {item[key]}", markup=False)
    for line in item["history"]:
        console.print(f"{'':>13}  {line}", markup=False)
    console.print(f"{'request':>13}: " + orjson.dumps(item["request"] or item.get("raw")).decode(), markup=False)


@app.command("redrive")
def redrive_cmd(ids: IdsArg = None, every: AllOpt = False) -> None:
    """Put dead letters back on their lane (exactly-once in effect); exit 1 if any was not."""
    act_on_dead_letters(
        ids, every, list_dead_letters, audit.by_ctl("redrive", "render", redrive),
        "nothing to re-drive (give IDs or --all)",
        lambda outcome: outcome.startswith("re-driven"),
    )  # fmt: skip


@app.command("delete")
def delete_cmd(ids: IdsArg = None, every: AllOpt = False, yes: YesOpt = False) -> None:
    """Delete dead letters for good (their tickets stay failed); exit 1 if any was missing."""
    if every and not yes:
        raise fail("--all deletes every dead letter: add --yes")
    act_on_dead_letters(
        ids, every, list_dead_letters, audit.by_ctl("delete", "render", delete),
        "nothing to delete (give IDs or --all --yes)",
        lambda outcome: outcome == "deleted",
    )  # fmt: skip


__all__ = ["app", "delete", "describe", "list_dead_letters", "redrive", "show_dead_letter"]
