"""Door scanners paired as devices (routes/devices.py) against the real stack:
the organiser's routes keep to their own events, a pairing code is used once
and not after it expires, a device's token scans only on its list and reads
only what a scanner reads, and a revoked device's refresh and uploads get 401
with the revocation time."""

from __future__ import annotations

import base64
import io
from datetime import timedelta
from typing import Any

import httpx
import pytest
import zxingcpp
from PIL import Image
from pymongo import MongoClient
from ticketry.documents import utcnow
from ticketry_api.core.devices import digest, normalised
from ticketry_devstack.procs import Stack

from tests.conftest import TokenFactory
from tests.e2e.test_scan_offline_queue import signed_codes
from tests.helpers import bearer, checkin_list, create_event, place_order, scan

pytestmark = pytest.mark.e2e


async def new_device(api: httpx.AsyncClient, org: str, event_id: str, list_id: str, name: str = "Gate 1") -> Any:
    r = await api.post(f"/v1/events/{event_id}/devices", json={"list_id": list_id, "name": name}, headers=bearer(org))
    assert r.status_code == 201, r.text
    return r.json()


async def pair(api: httpx.AsyncClient, code: str) -> httpx.Response:
    return await api.post("/v1/devices/pair", json={"code": code})


def qr_texts(data_url: str) -> list[str]:
    """What the pairing QR code (a PNG data URL) reads as."""
    assert data_url.startswith("data:image/png;base64,")
    picture = Image.open(io.BytesIO(base64.b64decode(data_url.split(",", 1)[1])))
    return [b.text for b in zxingcpp.read_barcodes(picture)]


async def test_an_organiser_pairs_a_device_once_and_it_scans_on_its_list_only(
    stack: Stack, api: httpx.AsyncClient, token: TokenFactory
) -> None:
    org, other_org, buyer = token("dev-org-1", "organizer"), token("dev-org-2", "organizer"), token("dev-b-1", "buyer")
    event = await create_event(api, org, capacity=20)
    door = await checkin_list(api, org, event["id"], name="North")
    side = await checkin_list(api, org, event["id"], name="South")
    order = (await place_order(api, buyer, event["id"], 2, holder_name="Ada Lovelace")).json()
    first, second = signed_codes(stack, event["id"], order["tickets"])

    # Another organiser's event, or its list: refused
    elsewhere = await create_event(api, other_org, capacity=5)
    foreign = await checkin_list(api, other_org, elsewhere["id"])
    r = await api.post(
        f"/v1/events/{event['id']}/devices", json={"list_id": door, "name": "x"}, headers=bearer(other_org)
    )
    assert r.status_code == 404 and r.headers["content-type"] == "application/problem+json"
    r = await api.post(f"/v1/events/{event['id']}/devices", json={"list_id": foreign, "name": "x"}, headers=bearer(org))
    assert r.status_code == 409 and r.json()["type"].endswith("/unknown-list")
    staff = token("dev-staff-1", "staff", events=[event["id"]])
    assert (await api.get(f"/v1/events/{event['id']}/devices", headers=bearer(staff))).status_code == 403

    # When the organiser creates a device for the north door
    created = await new_device(api, org, event["id"], door)
    code = created["pairing_code"]
    assert created["pairing_url"] == f"{stack.api_url}/scan#pair={code}"
    assert created["list_id"] == door and created["revoked_at"] is None and created["paired_at"] is None
    # ...its QR code is the pairing link
    assert qr_texts(created["pairing_qr"]) == [created["pairing_url"]]
    listed = (await api.get(f"/v1/events/{event['id']}/devices", headers=bearer(org))).json()["items"]
    assert [d["id"] for d in listed] == [created["id"]] and "pairing_code" not in listed[0]
    assert (await api.get(f"/v1/events/{event['id']}/devices", headers=bearer(other_org))).status_code == 404

    # Then the code pairs once (typed in lower case without dashes too), never twice
    paired = await pair(api, code.replace("-", "").lower())
    assert paired.status_code == 200, paired.text
    cred = paired.json()
    assert cred["device_id"] == created["id"] and cred["list_id"] == door and cred["secret"].startswith("dvs_")
    again = await pair(api, code)
    assert again.status_code == 404 and again.headers["content-type"] == "application/problem+json"

    # ...and its token scans on its list, reads what a scanner reads, and nothing else
    device = cred["access_token"]
    assert (await scan(api, device, first, door, nonce="dev-nonce-1")).status_code == 200
    assert (await scan(api, device, second, side)).status_code == 403
    for path in (f"/v1/checkin-lists/{door}", f"/v1/checkin-lists/{door}/tickets", "/v1/checkins/keys",
                 f"/v1/events/{event['id']}/revocations"):  # fmt: skip
        assert (await api.get(path, headers=bearer(device))).status_code == 200, path
    assert (await api.get(f"/v1/checkin-lists/{side}", headers=bearer(device))).status_code == 403
    assert (await api.get(f"/v1/orders/{order['id']}", headers=bearer(device))).status_code == 403
    assert (await api.post(f"/v1/orders/{order['id']}/cancel", headers=bearer(device))).status_code == 403
    assert (await api.get(f"/v1/events/{event['id']}/devices", headers=bearer(device))).status_code == 403
    # ...and the secret buys a fresh token; the device is seen
    fresh = await api.post("/v1/devices/token", json={"secret": cred["secret"]})
    assert fresh.status_code == 200 and fresh.json()["list_id"] == door and fresh.json()["expires_in"] > 0
    assert (await api.post("/v1/devices/token", json={"secret": cred["secret"][:-2] + "xx"})).status_code == 401
    seen = (await api.get(f"/v1/events/{event['id']}/devices", headers=bearer(org))).json()["items"][0]
    assert seen["paired_at"] is not None and seen["last_seen_at"] is not None

    # When the device is revoked (twice: the first time stays)
    url = f"/v1/events/{event['id']}/devices/{created['id']}"
    assert (await api.delete(url, headers=bearer(other_org))).status_code == 404
    assert (await api.delete(url, headers=bearer(org))).status_code == 204
    revoked_at = (await api.get(f"/v1/events/{event['id']}/devices", headers=bearer(org))).json()["items"][0][
        "revoked_at"
    ]
    assert revoked_at is not None
    assert (await api.delete(url, headers=bearer(org))).status_code == 204
    # Then its uploads and refreshes get 401, saying when it was revoked
    for r in (
        await scan(api, fresh.json()["access_token"], second, door, nonce="dev-nonce-2"),
        await api.post("/v1/devices/token", json={"secret": cred["secret"]}),
    ):
        assert r.status_code == 401 and r.headers["content-type"] == "application/problem+json", r.text
        assert r.json()["type"].endswith("/device-revoked")
        assert r.json()["revoked_at"].rstrip("Z")[:19] == revoked_at.rstrip("Z")[:19]
    listed = (await api.get(f"/v1/events/{event['id']}/devices", headers=bearer(org))).json()["items"]
    assert listed[0]["revoked_at"] == revoked_at


async def test_a_pairing_code_past_its_expiry_is_refused(
    stack: Stack, api: httpx.AsyncClient, token: TokenFactory
) -> None:
    org = token("dev-org-3", "organizer")
    event = await create_event(api, org, capacity=5)
    door = await checkin_list(api, org, event["id"])
    created = await new_device(api, org, event["id"], door)
    # Given its code's expiry passed (set in the store: the setting's floor is a minute)
    code = normalised(created["pairing_code"])
    assert code is not None
    mongo: MongoClient[dict[str, Any]]
    with MongoClient(stack.env["TICKETRY_MONGO_URL"]) as mongo:
        pairings = mongo.get_default_database()["device_pairings"]
        done = pairings.update_one({"_id": digest(code)}, {"$set": {"expires_at": utcnow() - timedelta(seconds=1)}})
        assert done.matched_count == 1
    # Then it is refused as expired, and then as unknown
    r = await pair(api, created["pairing_code"])
    assert r.status_code == 410 and r.json()["type"].endswith("/pairing-expired"), r.text
    assert (await pair(api, created["pairing_code"])).status_code == 404
    # ...as are codes that are none, and a revoked device's unused code
    assert (await pair(api, "not a code")).status_code == 404
    unused = await new_device(api, org, event["id"], door, name="Gate 2")
    assert (
        await api.delete(f"/v1/events/{event['id']}/devices/{unused['id']}", headers=bearer(org))
    ).status_code == 204
    assert (await pair(api, unused["pairing_code"])).status_code == 404
    # ...and a bad device id is 404, a body with an unknown field 422
    assert (await api.delete(f"/v1/events/{event['id']}/devices/dv_nope", headers=bearer(org))).status_code == 404
    r = await api.post(
        f"/v1/events/{event['id']}/devices", json={"list_id": door, "name": "x", "x": 1}, headers=bearer(org)
    )
    assert r.status_code == 422
