"""Door scanners paired as devices (the pretix model): no staff token on the phone.

- ``POST /v1/events/{id}/devices`` (the event's organiser, or admin): a device
  for one of the event's check-in lists, with a one-time pairing code
  (``TICKETRY_DEVICE_PAIRING_TTL_S``, ``devices.DeviceSettings``), its link ``<api>/scan#pair=<code>``
  and that link as a QR code;
- ``GET`` lists the event's devices; ``DELETE …/{device_id}`` revokes one
  (idempotent: the first revocation's time stays);
- ``POST /v1/devices/pair`` exchanges a code, once, for the device's secret
  (kept only on the device; the store keeps its SHA-256) and a first access
  token;
- ``POST /v1/devices/token`` exchanges the secret for a fresh access token
  (``TICKETRY_DEVICE_TOKEN_TTL_S``), scoped to the device's list.

A revoked device's token and refreshes get 401 ``device-revoked`` with its
``revoked_at``: its page makes every scan it queued after that time a
conflict (docs/door.md). An unknown event, or one the caller does not
organise, is 404.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, ConfigDict, Field
from ticketry.auth import Principal
from ticketry.device_documents import DevicePairing, ScanDevice
from ticketry.documents import utcnow
from ticketry.ids import new_id

from ticketry_api.core import devices as rules
from ticketry_api.core.problem import Problem
from ticketry_api.deps import AppState, State, require
from ticketry_api.edge.events_read import own_event
from ticketry_api.http.errors import problems
from ticketry_api.http.schemas import Name, id_pattern
from ticketry_api.service_layer import devices

router = APIRouter(tags=["devices"])
Organizer = Annotated[Principal, Depends(require("organizer"))]
_DEVICE_ID = re.compile(r"^dv_[0-9a-f]{20}$")
PAIR_FRAGMENT = "/scan#pair="


class DeviceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    list_id: str = Field(pattern=id_pattern("cl"), description="the check-in list the device scans on")
    name: Name = Field(description="what staff call the device (e.g. 'North gate phone 2')")


class DeviceOut(BaseModel):
    id: str
    event_id: str
    list_id: str
    name: str
    created_at: datetime
    paired_at: datetime | None = None
    last_seen_at: datetime | None = Field(default=None, description="its last token refresh")
    revoked_at: datetime | None = None


class DeviceCreated(DeviceOut):
    # Shown only in this answer: the code pairs one scanner, once, until it expires.
    pairing_code: str = Field(description="typed on the scanner page (dashes and case do not matter)")
    pairing_url: str = Field(description="<api>/scan#pair=<pairing_code>: opening it pairs that page")
    pairing_qr: str = Field(description="pairing_url as a QR code (a PNG data URL)")
    pairing_expires_at: datetime


class DeviceList(BaseModel):
    items: list[DeviceOut]
    next: str | None = None


class PairIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str = Field(min_length=1, max_length=40, description="the pairing code")


class DeviceTokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    secret: str = Field(min_length=1, max_length=200, description="the device secret its pairing answered")


class DeviceToken(BaseModel):
    device_id: str
    event_id: str
    list_id: str
    access_token: str
    token_type: Literal["Bearer"] = "Bearer"  # noqa: S105  # the scheme, no secret
    expires_in: int = Field(description="seconds the access token lasts")


class DeviceCredential(DeviceToken):
    # Shown only in this answer: keep it on the device, it buys every later token.
    secret: str
    name: str


def _utc(at: datetime | None) -> datetime | None:
    """A store time (UTC, without a zone) as UTC."""
    return at if at is None or at.tzinfo is not None else at.replace(tzinfo=UTC)


def _out(d: ScanDevice) -> DeviceOut:
    return DeviceOut(
        id=d.id, event_id=d.event_id, list_id=d.list_id, name=d.name, created_at=_utc(d.created_at) or d.created_at,
        paired_at=_utc(d.paired_at), last_seen_at=_utc(d.last_seen_at), revoked_at=_utc(d.revoked_at),
    )  # fmt: skip


def _token(state: AppState, device: ScanDevice) -> DeviceToken:
    ttl = devices.settings().device_token_ttl_s
    token = devices.issue_token(device, secret=state.settings.jwt_key, ttl_s=ttl)
    return DeviceToken(
        device_id=device.id, event_id=device.event_id, list_id=device.list_id, access_token=token, expires_in=ttl
    )


@router.post(
    "/v1/events/{event_id}/devices", status_code=201, response_model=DeviceCreated,
    responses=problems(401, 403, 404, 409, 422),
)  # fmt: skip
async def create_device(event_id: str, body: DeviceIn, who: Organizer, state: State) -> DeviceCreated:
    """A scanner device for one of the event's check-in lists, with its
    one-time pairing code, link and QR code (shown only here)."""
    event = await own_event(state.store, event_id, who)
    lst = await state.store.checkins.checkin_list(body.list_id)
    if lst is None or lst.event_id != event.id:
        raise Problem(409, "unknown check-in list", "this event has no such check-in list", kind="unknown-list")
    code = rules.new_pairing_code()
    now = utcnow()
    expires = datetime.fromtimestamp(now.timestamp() + devices.settings().device_pairing_ttl_s, UTC)
    device = ScanDevice(
        id=new_id(rules.DEVICE_PREFIX), event_id=event.id, list_id=lst.id, name=body.name, created_by=who.sub
    )
    await state.store.devices.create(
        device, DevicePairing(id=rules.digest(code), device_id=device.id, expires_at=expires)
    )
    url = state.links.public_url() + PAIR_FRAGMENT + rules.shown(code)
    return DeviceCreated(
        **_out(device).model_dump(), pairing_code=rules.shown(code), pairing_url=url,
        pairing_qr=devices.qr_png_data_url(url), pairing_expires_at=expires,
    )  # fmt: skip


@router.get("/v1/events/{event_id}/devices", response_model=DeviceList, responses=problems(401, 403, 404, 422))
async def list_devices(event_id: str, who: Organizer, state: State) -> DeviceList:
    """The event's scanner devices, revoked ones too."""
    event = await own_event(state.store, event_id, who)
    return DeviceList(items=[_out(d) for d in await state.store.devices.of_event(event.id)])


@router.delete("/v1/events/{event_id}/devices/{device_id}", status_code=204, responses=problems(401, 403, 404, 422))
async def revoke_device(event_id: str, device_id: str, who: Organizer, state: State) -> Response:
    """Revokes a device: its next refresh and upload get 401, and the scans it
    made offline after now are conflicts. Again: 204, the first time kept."""
    event = await own_event(state.store, event_id, who)
    device = await state.store.devices.get(device_id) if _DEVICE_ID.match(device_id) else None
    if device is None or device.event_id != event.id:
        raise Problem(404, "device not found")
    await state.store.devices.revoke(device.id, utcnow())
    return Response(status_code=204)


@router.post("/v1/devices/pair", response_model=DeviceCredential, responses=problems(404, 410, 422))
async def pair_device(body: PairIn, state: State) -> DeviceCredential:
    """Exchanges a pairing code, once, for the device's secret and a first
    access token: 404 for a code that is unknown, used or of a revoked
    device; 410 for one past its expiry."""
    code = rules.normalised(body.code)
    pairing = await state.store.devices.pairing(rules.digest(code)) if code is not None else None
    if pairing is None:
        raise Problem(404, "unknown pairing code", "no such code, or it was used already")
    if (_utc(pairing.expires_at) or pairing.expires_at) <= utcnow():
        await state.store.devices.take_pairing(pairing.id)
        raise Problem(410, "pairing code expired", "ask the organiser for a new device", kind="pairing-expired")
    device = await state.store.devices.get(pairing.device_id)
    # Only the call that deletes the code pairs: of two racing exchanges, one wins.
    if not await state.store.devices.take_pairing(pairing.id) or device is None or device.revoked_at is not None:
        raise Problem(404, "unknown pairing code", "no such code, or it was used already")
    secret = rules.new_secret(device.id)
    await state.store.devices.paired(device.id, rules.digest(secret), utcnow())
    token = _token(state, device)
    return DeviceCredential(**token.model_dump(), secret=secret, name=device.name)


@router.post("/v1/devices/token", response_model=DeviceToken, responses=problems(401, 422))
async def device_token(body: DeviceTokenIn, state: State) -> DeviceToken:
    """A fresh access token for the device whose secret this is; 401 for any
    other secret, and ``device-revoked`` (with ``revoked_at``) once revoked."""
    device_id = rules.device_of_secret(body.secret)
    device = await state.store.devices.get(device_id) if device_id is not None else None
    if device is None or not rules.secret_matches(body.secret, device.secret_digest):
        raise devices.revoked(None)
    if device.revoked_at is not None:
        raise devices.revoked(device)
    await state.store.devices.seen(device.id, utcnow())
    return _token(state, device)
