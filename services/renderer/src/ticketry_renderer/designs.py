"""Designs shared by every renderer process: built once, stored in Redis, loaded
by the others (see ``ticketry.designs``).

A design is a ``fastpath.Template``, serialized without pickle (a stored value
is data, never code): ``TKD2``, the length of a JSON header, the header (slots,
fonts' widths and charsets, object numbers), then the template's PDF bytes.
An empty value records a design the fast path cannot stamp.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import time
from collections.abc import Iterable
from typing import Any

import orjson
from redis.asyncio import Redis
from ticketry import designs
from ticketry.events import RenderRequest

from ticketry_renderer import fastpath
from ticketry_renderer.render import Design, build_event_template, event_key

log = logging.getLogger(__name__)
# TKD2: the overlay stream opens with the Q that closes WeasyPrint's content (a
# TKD1 design has a Q stream of its own): a design of the other kind is rebuilt.
MAGIC = b"TKD2"
# A process that finds another building a design waits this long for it, then builds it itself.
WAIT_FOR_PEER_S = 5.0


def digest(key: tuple[Any, ...]) -> str:
    """The stored name of a design: its template key (``render.template_key``), hashed."""
    return hashlib.sha256(repr(key).encode()).hexdigest()[:32]


def dumps(template: fastpath.Template | None) -> bytes:
    if template is None:
        return b""
    meta = {
        "overlay_obj": template.overlay_obj,
        "trailer_tail": base64.b64encode(template.trailer_tail).decode(),
        "size": template.size,
        "prev_xref": template.prev_xref,
        "texts": [
            {
                "field": s.field, "x": s.x, "y": s.y, "size": s.size, "rgb": s.rgb,
                "placeholder_len": s.placeholder_len, "max_width": s.max_width,
                "font": {"resource": s.font.resource, "widths": s.font.widths, "cmap": "".join(sorted(s.font.cmap))},
            }
            for s in template.texts
        ],
        "qr": [template.qr.x, template.qr.y, template.qr.size],
        "holder": {
            "x": template.holder.x, "top": template.holder.top, "line_height": template.holder.line_height,
            "rgb": template.holder.rgb, "fonts": template.holder.fonts,
        },
    }  # fmt: skip
    header = orjson.dumps(meta)
    return MAGIC + len(header).to_bytes(4, "big") + header + template.base


def loads(blob: bytes) -> fastpath.Template | None:
    """A template from :func:`dumps`; None for a design the fast path cannot stamp."""
    if not blob:
        return None
    if blob[:4] != MAGIC:
        raise ValueError("not a stored design")
    n = int.from_bytes(blob[4:8], "big")
    meta: dict[str, Any] = orjson.loads(blob[8 : 8 + n])
    h = meta["holder"]
    return fastpath.Template(
        base=blob[8 + n :],
        overlay_obj=meta["overlay_obj"],
        trailer_tail=base64.b64decode(meta["trailer_tail"]),
        size=meta["size"],
        prev_xref=meta["prev_xref"],
        texts=tuple(
            fastpath.TextSlot(
                field=s["field"], x=s["x"], y=s["y"], size=s["size"], rgb=tuple(s["rgb"]),
                font=fastpath.EmbeddedFont(s["font"]["resource"], s["font"]["widths"], frozenset(s["font"]["cmap"])),
                placeholder_len=s["placeholder_len"], max_width=s["max_width"],
            )
            for s in meta["texts"]
        ),
        qr=fastpath.QrSlot(*meta["qr"]),
        holder=fastpath.HolderSlot(x=h["x"], top=h["top"], line_height=h["line_height"], rgb=tuple(h["rgb"]),
                                   fonts=tuple(h["fonts"])),
    )  # fmt: skip


async def prepare(redis: Redis, design: Design, requests: Iterable[RenderRequest], builder: str) -> int:
    """Make the designs of ``requests`` ready in ``design``'s cache: loaded from
    Redis when another process stored them, else built here (one builder at a
    time per design) and stored for the others. Returns how many were built.
    Redis trouble never stops a render: the design is then built locally."""
    built = 0
    seen: set[tuple[Any, ...]] = set()
    for req in requests:
        if not design.fast:
            return built
        try:
            key = event_key(req, design)
        except Exception:  # noqa: S112 - a bad request fails in render_ticket, with its reason
            continue
        if key in design.templates or key in seen:
            continue
        seen.add(key)
        name = digest(key)
        blob = await designs.load(redis, name)
        if blob is None and not await designs.claim_build(redis, name, builder):
            blob = await _wait_for_peer(redis, name)
        if blob is not None:
            try:
                design.remember(key, loads(blob))
                continue
            except (ValueError, KeyError, TypeError, orjson.JSONDecodeError):
                log.warning("renderer: a stored design did not load; building it", extra={"design": name})
        try:
            template = build_event_template(req, design)
        except Exception as exc:
            log.info("renderer: design not built", extra={"design": name, "error": repr(exc)[:200]})
            await designs.release_build(redis, name)
            continue  # render_ticket reports it
        design.remember(key, template)
        await designs.store(redis, name, dumps(template))
        built += 1
    return built


async def _wait_for_peer(redis: Redis, name: str) -> bytes | None:
    # Looks once more after the deadline: a deadline passed while this process
    # was busy (a build of its own holds the loop) must not skip a stored design.
    deadline = time.monotonic() + WAIT_FOR_PEER_S
    while True:
        await asyncio.sleep(0.05)
        blob = await designs.load(redis, name)
        if blob is not None or time.monotonic() >= deadline:
            return blob
