"""The environment ``just up`` gives its services.

The devstack only fills in what the user left unset: every ``TICKETRY_*``
variable of the caller's environment wins over the devstack's own defaults
(dev mode, ``.data/tickets``, ``.data/keys``, the notifier's public URL, the
local Redis and FerretDB it starts). The test suite's stacks do *not* use this:
they must not pick up a developer's settings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

PREFIX = "TICKETRY_"

# What `just up` sets on top of Stack's own defaults (which start_infra fills
# in only where nothing is set yet).
UP_DEFAULTS: Mapping[str, str] = {"TICKETRY_DEV_MODE": "1"}


def user_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """The ``TICKETRY_*`` variables of ``environ`` (the user's choices)."""
    return {k: v for k, v in environ.items() if k.startswith(PREFIX)}


def merge(defaults: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """``defaults`` with every ``TICKETRY_*`` value of ``environ`` on top: the
    environment always wins."""
    return {**defaults, **user_settings(environ)}


def up_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The settings ``just up`` starts its stack with (before the stack adds
    its defaults for what is still unset)."""
    return merge(UP_DEFAULTS, environ)


_SECRET_WORDS = ("SECRET", "PASSWORD", "TOKEN", "PRIVATE")
_USERINFO = re.compile(r"(://[^:/@]+:)[^@/]+@")


def redacted(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` fit to print: secret values hidden, passwords cut out of URLs."""
    out = {}
    for k, v in env.items():
        if any(w in k for w in _SECRET_WORDS):
            out[k] = "<set>"
        else:
            out[k] = _USERINFO.sub(r"\1***@", v)
    return out
