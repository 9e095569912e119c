"""``ticketryctl``'s console-script entry point (the commands: ``ticketry_api.ctl``).

``status``, ``events create``, ``orders place [--watch]``, ``tokens mint``,
``dlq list/show/redrive/delete``, ``webhooks list/dead/redrive/delete``,
``replay`` and ``keys rotate``; docs/cli.md. The dead-letter helpers stay
importable from here.
"""

from __future__ import annotations

from ticketry_api.ctl import main
from ticketry_api.ctl.dlq import describe, list_dead_letters, redrive

__all__ = ["describe", "list_dead_letters", "main", "redrive"]
