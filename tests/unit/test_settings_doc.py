"""docs/configuration.md is generated from the settings classes, and stays so.

Regenerate with ``uv run --frozen python -m tests.unit.test_settings_doc > docs/configuration.md``.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import pytest
from pydantic import SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings
from ticketry.auth import JwtSettings
from ticketry.settings import CommonSettings, ServingSettings
from ticketry_api.adapters.ratelimit import RateSettings
from ticketry_api.config import ApiSettings
from ticketry_api.ctl.common import CtlSettings
from ticketry_api.mail.config import MailSettings
from ticketry_api.middleware.security import CorsSettings
from ticketry_api.service_layer.devices import DeviceSettings
from ticketry_api.wallet.config import WalletSettings
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
    (DeviceSettings, "api (scanner devices)"),
    (MailSettings, "api (tickets by email)"),
    (WalletSettings, "api (wallet passes)"),
    (CtlSettings, "ticketryctl"),
    (RendererSettings, "renderer"),
    (NotifierSettings, "notifier"),
    (ScalerSettings, "scaler"),
]


# A number's unit is said by its name's suffix (the house's naming), else declared
# with the field: ``json_schema_extra={"unit": ...}``.
SUFFIX_UNITS = {"_s": "s", "_ms": "ms", "_mb": "MiB", "_days": "days", "_bytes": "bytes", "_port": "TCP port"}
NUMBERS = (int, float)


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        return "(computed)"
    value = field.default
    if value is None:
        return "none"
    if hasattr(value, "get_secret_value"):
        return "(secret)"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value in ("", []):
        return "(empty)"
    return f"`{value}`"


def _kinds(annotation: Any) -> list[Any]:
    """The types a field may hold, none left out."""
    if get_origin(annotation) in (Union, types.UnionType):
        return [a for a in get_args(annotation) if a is not type(None)]
    return [annotation]


def _numeric(field: FieldInfo) -> bool:
    return any(k in NUMBERS for k in _kinds(field.annotation))


def _unit(name: str, field: FieldInfo) -> str:
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    if "unit" in extra:
        return str(extra["unit"])
    for suffix, unit in SUFFIX_UNITS.items():
        if name.endswith(suffix):
            return unit
    if _numeric(field):
        return ""  # refused by the test: a number says what it counts
    (kind,) = _kinds(field.annotation)[:1]
    if get_origin(kind) is Literal:
        return "choice"
    if kind is bool:
        return "flag"
    if kind is SecretStr:
        return "secret"
    if kind is Path:
        return "path"
    if get_origin(kind) is list:
        return "comma-separated list"
    return "URL" if name.endswith("_url") else "text"


def _bounds(field: FieldInfo) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for m in field.metadata:
        for key in ("ge", "gt", "le", "lt", "min_length", "max_length", "pattern"):
            if getattr(m, key, None) is not None:
                found[key] = getattr(m, key)
    return found


def _number(v: Any) -> str:
    return f"{v:,}" if isinstance(v, int) else f"{v:g}"


def _range(field: FieldInfo) -> str:
    b = _bounds(field)
    (kind,) = _kinds(field.annotation)[:1]
    if get_origin(kind) is Literal:
        return " | ".join(f"`{v}`" for v in get_args(kind))
    if kind is bool:
        return "true | false"
    if _numeric(field):
        low = f"≥ {_number(b['ge'])}" if "ge" in b else f"> {_number(b['gt'])}" if "gt" in b else ""
        high = f"≤ {_number(b['le'])}" if "le" in b else f"< {_number(b['lt'])}" if "lt" in b else ""
        return ", ".join(x for x in (low, high) if x)  # empty: refused by the test
    if "pattern" in b:
        return f"matches `{b['pattern']}`"
    if "min_length" in b:
        return f"≥ {b['min_length']} characters"
    return "any"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def own_fields(cls: type[BaseSettings]) -> dict[str, FieldInfo]:
    """``cls``'s own settings (inherited ones are listed once, where defined)."""
    parent_fields: set[str] = set()
    for base in cls.__mro__[1:]:
        parent_fields |= set(getattr(base, "model_fields", {}))
    return {name: f for name, f in cls.model_fields.items() if name not in parent_fields}


def generate() -> str:
    lines = [
        "# Configuration",
        "",
        "Every setting is an environment variable. Generated from the settings classes",
        "(`tests/unit/test_settings_doc.py` checks it is current; the README explains the",
        "main ones). A value set in the environment always wins, `just up` included. A",
        "value out of its range stops the service at start, with one line naming the variable.",
        "",
    ]
    for cls, where in CLASSES:
        prefix = str(cls.model_config.get("env_prefix", "")).upper()
        own = own_fields(cls)
        if not own:
            continue
        lines += [
            f"## {cls.__name__} — {where}",
            "",
            "| variable | default | unit | range | what it does |",
            "| --- | --- | --- | --- | --- |",
        ]
        for name, field in own.items():
            cells = [
                f"`{prefix}{name.upper()}`",
                _default(field),
                _unit(name, field),
                _range(field),
                field.description or "",
            ]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        lines.append("")
    return "\n".join(lines)


def test_configuration_doc_is_generated_from_the_settings() -> None:
    want = generate()
    assert DOC.read_text() == want, (
        "docs/configuration.md is stale: uv run --frozen python -m tests.unit.test_settings_doc > docs/configuration.md"
    )
    # (and it is not empty: every class contributes its own settings)
    assert want.count("`TICKETRY_") > 100


@pytest.mark.parametrize("cls", [cls for cls, _ in CLASSES], ids=lambda cls: cls.__name__)
def test_every_setting_says_what_it_does_in_what_unit_within_what_range(cls: type[BaseSettings]) -> None:
    unexplained = [name for name, f in own_fields(cls).items() if len((f.description or "").strip()) < 10]
    unitless = [name for name, f in own_fields(cls).items() if not _unit(name, f)]
    # A number is bounded at least from below (ge/gt): a count below 0, a time below 0, never makes sense.
    unbounded = [name for name, f in own_fields(cls).items() if _numeric(f) and not _range(f)]
    assert (unexplained, unitless, unbounded) == ([], [], []), (
        "each setting needs Field(description=...), a number its unit (name suffix or json_schema_extra) and ge/gt"
    )


if __name__ == "__main__":
    sys.stdout.write(generate())
