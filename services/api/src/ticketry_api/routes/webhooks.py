"""/v1/events/{id}/webhooks: an event's webhook endpoints (its organiser, or admin).

``POST`` registers a URL and answers its signing secret, once; ``GET`` lists
the endpoints without secrets; ``DELETE`` removes one (what was queued for it
is dropped). An unknown event, or one the caller does not organise, is 404.
Both writes keep the set of events with endpoints (``index``) that the
dispatcher reads instead of the store.
"""

from __future__ import annotations

import re
import secrets
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, ConfigDict, Field
from ticketry.auth import Principal
from ticketry.webhook_documents import WEBHOOK_TYPES, WebhookEndpoint, WebhookType

from ticketry_api.core.problem import Problem
from ticketry_api.core.signing import new_secret
from ticketry_api.deps import State, require
from ticketry_api.edge.events_read import own_event
from ticketry_api.http.errors import problems
from ticketry_api.webhooks import index
from ticketry_api.webhooks.config import WebhookSettings
from ticketry_api.webhooks.destinations import RefusedDestination, check_destination

router = APIRouter(prefix="/v1/events/{event_id}/webhooks", tags=["webhooks"])
Organizer = Annotated[Principal, Depends(require("organizer"))]
_WEBHOOK_ID = re.compile(r"^wh_[0-9a-f]{20}$")


def webhook_settings(state: State) -> WebhookSettings:
    """The webhook settings, read with the app's state (a dependency so tests could override it)."""
    return state.webhooks


Settings = Annotated[WebhookSettings, Depends(webhook_settings)]


class WebhookIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=8, max_length=2000, examples=["https://shop.example/hooks/ticketry"])
    types: list[WebhookType] = Field(
        default_factory=lambda: list(WEBHOOK_TYPES), min_length=1, max_length=len(WEBHOOK_TYPES)
    )
    description: str = Field(default="", max_length=200)


class WebhookOut(BaseModel):
    id: str
    event_id: str
    url: str
    types: list[WebhookType]
    description: str
    created_at: datetime


class WebhookCreated(WebhookOut):
    # Shown only in this answer: store it, it signs every delivery.
    secret: str


class WebhookList(BaseModel):
    items: list[WebhookOut]
    next: str | None = None


def _out(hook: WebhookEndpoint) -> WebhookOut:
    return WebhookOut(
        id=hook.id, event_id=hook.event_id, url=hook.url, types=hook.types, description=hook.description,
        created_at=hook.created_at,
    )  # fmt: skip


@router.post("", status_code=201, response_model=WebhookCreated, responses=problems(401, 403, 404, 409, 422))
async def create_webhook(
    event_id: str, body: WebhookIn, who: Organizer, settings: Settings, state: State
) -> WebhookCreated:
    event = await own_event(state.store, event_id, who)
    try:
        await check_destination(body.url, allow_private=settings.allow_private)
    except RefusedDestination as exc:
        raise Problem(422, "refused webhook URL", str(exc), kind="webhook-url") from None
    if await state.store.endpoints.count(event.id) >= settings.max_endpoints_per_event:
        raise Problem(409, "too many webhooks", f"an event has at most {settings.max_endpoints_per_event}")
    hook = WebhookEndpoint(
        id=f"wh_{secrets.token_hex(10)}", event_id=event.id, url=body.url, secret=new_secret(),
        types=sorted(set(body.types), key=body.types.index), description=body.description, created_by=who.sub,
    )  # fmt: skip
    await index.adding(state.redis, event.id)  # a crash after the insert leaves the event in
    await state.store.endpoints.insert(hook)
    await index.adding(state.redis, event.id)  # again: a concurrent delete may have removed it meanwhile
    return WebhookCreated(**_out(hook).model_dump(), secret=hook.secret)


@router.get("", response_model=WebhookList, responses=problems(401, 403, 404, 422))
async def list_webhooks(event_id: str, who: Organizer, state: State) -> WebhookList:
    event = await own_event(state.store, event_id, who)
    found = await state.store.endpoints.of_event(event.id)
    return WebhookList(items=[_out(h) for h in found])


@router.delete("/{webhook_id}", status_code=204, responses=problems(401, 403, 404, 422))
async def delete_webhook(event_id: str, webhook_id: str, who: Organizer, state: State) -> Response:
    event = await own_event(state.store, event_id, who)
    hook = await state.store.endpoints.get(webhook_id) if _WEBHOOK_ID.match(webhook_id) else None
    if hook is None or hook.event_id != event.id:
        raise Problem(404, "webhook not found")
    await state.store.endpoints.delete(hook.id)
    await index.removed(state.redis, state.store.endpoints, event.id)
    return Response(status_code=204)
