"""``ticketryctl``: operator commands (typer + rich).

Every read command takes ``--json``. Subcommands live in their modules:
``status``, ``dlq``, ``webhooks``, ``mail``, ``shop`` (tokens, events, orders), ``replay``;
``keys rotate`` is here. docs/cli.md has the tour.
"""

from __future__ import annotations

from collections.abc import Sequence

import typer

from ticketry_api.ctl import dlq, mail, replay, shop, status, webhooks
from ticketry_api.ctl.common import console

app = typer.Typer(
    name="ticketryctl",
    help="Ticketry operator commands. Reads the stack's TICKETRY_* environment (Redis, store, API).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("status")(status.status)
app.command("replay", help=replay.HELP, short_help="Rebuild the read models from the ticket events; compare.")(
    replay.replay_cmd
)
app.add_typer(dlq.app, name="dlq")
app.add_typer(webhooks.app, name="webhooks")
app.add_typer(mail.app, name="mail")
app.add_typer(shop.tokens, name="tokens")
app.add_typer(shop.events, name="events")
app.add_typer(shop.orders, name="orders")

keys = typer.Typer(help="Check-in code signing keys.", no_args_is_help=True)
app.add_typer(keys, name="keys")


@keys.command("rotate")
def rotate_keys() -> None:
    """Create a new signing key and make it active (old codes keep verifying);
    the CLI twin of POST /v1/checkins/keys/rotate."""
    from ticketry.codes import rotate_key

    from ticketry_api.config import ApiSettings

    kid = rotate_key(ApiSettings().keys_dir)
    console.print(f"active signing key: {kid}", markup=False)


def main(argv: Sequence[str] | None = None) -> None:
    """The console script: runs one command and exits (``SystemExit``) with its code."""
    typer.main.get_command(app).main(args=list(argv) if argv is not None else None, prog_name="ticketryctl")
