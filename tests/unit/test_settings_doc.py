"""docs/configuration.md is generated from the settings classes, and stays so.

Regenerate with ``uv run --frozen python -m tests.unit.test_settings_doc > docs/configuration.md``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pydantic_settings import BaseSettings
from ticketry.auth import JwtSettings
from ticketry.settings import CommonSettings, ServingSettings
from ticketry_api.config import ApiSettings
from ticketry_api.ctl.common import CtlSettings
from ticketry_api.middleware.security import CorsSettings
from ticketry_api.ratelimit import RateSettings
from ticketry_api.web.links import LinkSettings
from ticketry_api.webhooks.config import WebhookSettings
from ticketry_notifier.config import NotifierSettings
from ticketry_renderer.config import RendererSettings
from ticketry_scaler.config import ScalerSettings

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
# Where each class's settings are read (a class's own fields only: inherited ones are listed once, where defined).
CLASSES: list[tuple[type[BaseSettings], str]] = [
    (JwtSettings, "every service (token verification)"),
    (CommonSettings, "every service"),
    (ServingSettings, "api, notifier"),
    (ApiSettings, "api"),
    (RateSettings, "api (per-user limits, 0 = off)"),
    (CorsSettings, "api"),
    (LinkSettings, "api (order links)"),
    (WebhookSettings, "api (shop webhooks)"),
    (CtlSettings, "ticketryctl"),
    (RendererSettings, "renderer"),
    (NotifierSettings, "notifier"),
    (ScalerSettings, "scaler"),
]


def _default(field: Any) -> str:
    if field.default_factory is not None:
        return "(computed)"
    value = field.default
    if value is None:
        return "none"
    if hasattr(value, "get_secret_value"):
        return "(secret)"
    return f"`{value}`"


def generate() -> str:
    lines = [
        "# Configuration",
        "",
        "Every setting is an environment variable. Generated from the settings classes",
        "(`tests/unit/test_settings_doc.py` checks it is current; the README explains the",
        "main ones). A value set in the environment always wins, `just up` included.",
        "",
    ]
    for cls, where in CLASSES:
        prefix = str(cls.model_config.get("env_prefix", "")).upper()
        parent_fields: set[str] = set()
        for base in cls.__mro__[1:]:
            parent_fields |= set(getattr(base, "model_fields", {}))
        own = {name: f for name, f in cls.model_fields.items() if name not in parent_fields}
        if not own:
            continue
        lines += [f"## {cls.__name__} — {where}", "", "| variable | default | notes |", "| --- | --- | --- |"]
        for name, field in own.items():
            note = (field.description or "").replace("|", "\\|").replace("\n", " ")
            lines.append(f"| `{prefix}{name.upper()}` | {_default(field)} | {note} |")
        lines.append("")
    return "\n".join(lines)


def test_configuration_doc_is_generated_from_the_settings() -> None:
    want = generate()
    assert DOC.read_text() == want, (
        "docs/configuration.md is stale: uv run --frozen python -m tests.unit.test_settings_doc > docs/configuration.md"
    )
    # (and it is not empty: every class contributes its own settings)
    assert want.count("`TICKETRY_") > 60


if __name__ == "__main__":
    sys.stdout.write(generate())
