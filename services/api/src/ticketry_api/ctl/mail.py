"""``ticketryctl mail``: mails that died (``ticketry:mail:dead``)."""

from __future__ import annotations

import typer

from ticketry_api.ctl.common import AllOpt, IdsArg, JsonOpt, YesOpt, act_on_dead_letters, fail, print_dead_letters
from ticketry_api.mail import deadletters

app = typer.Typer(help="Tickets by email: dead letters, re-drive.", no_args_is_help=True)


@app.command("dead")
def dead_cmd(json: JsonOpt = False) -> None:
    """Dead-lettered mails: order, tries, reason."""
    print_dead_letters(
        deadletters.list_dead,
        lambda it: f"{it['id']}  order={it['order_id']}  attempts={it['attempts']}  reason={it['reason']}",
        json,
    )


@app.command("redrive")
def redrive_cmd(ids: IdsArg = None, every: AllOpt = False) -> None:
    """Mail dead-lettered orders again (a fresh run of tries; an order mailed
    meanwhile is not mailed twice); exit 1 if any was not re-driven."""
    act_on_dead_letters(
        ids, every, deadletters.list_dead, deadletters.redrive, "nothing to re-drive (give IDs or --all)",
        lambda outcome: outcome == "re-driven",
    )  # fmt: skip


@app.command("delete")
def delete_cmd(ids: IdsArg = None, every: AllOpt = False, yes: YesOpt = False) -> None:
    """Drop dead-lettered mails for good; exit 1 if any was missing."""
    if every and not yes:
        raise fail("--all deletes every mail dead letter: add --yes")
    act_on_dead_letters(
        ids, every, deadletters.list_dead, deadletters.delete, "nothing to delete (give IDs or --all --yes)",
        lambda outcome: outcome == "deleted",
    )  # fmt: skip
