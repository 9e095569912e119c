"""An example of every request and response body in the OpenAPI document, by
the name of its schema, so a generated client's docs (and a fuzzer's first
requests) show a real call. One event, one order of two tickets, one
check-in list throughout; tests/unit/test_openapi_document.py checks each
validates against its schema and that no body goes without one."""

from __future__ import annotations

import copy
from typing import Any

EVENT = "ev_3f9a1c2b7d4e5f6a8b9c"
ORDER = "or_8c1d2e3f4a5b6c7d8e9f"
TICKETS = ["tk_8c1d2e3f4a5b6c7d8e9f_00000", "tk_8c1d2e3f4a5b6c7d8e9f_00001"]
LIST = "cl_5e6f7a8b9c0d1e2f3a4b"
WEBHOOK = "wh_1a2b3c4d5e6f7a8b9c0d"
QUEUE = "qu_9b8a7c6d5e4f3a2b1c0d"
DEVICE = "dv_2b3c4d5e6f7a8b9c0d1e"
CURSOR = "MTA"  # opaque: whatever a page's ``next`` said

_TIER = {"id": "standard", "name": "Standard", "price": "25.00", "capacity": None, "lane": "standard"}
_TIER_OUT = {**_TIER, "max_per_buyer": None, "sold": 2}
_EVENT_OUT = {
    "id": EVENT, "name": "Spring Concert", "venue": "Town Hall", "timezone": "Europe/Berlin",
    "starts_at": "2027-06-01T20:00:00+02:00", "doors_at": "2027-06-01T19:00:00+02:00", "capacity": 500,
    "sold": 2, "price": "25.00", "currency": "EUR",
    "tiers": [_TIER_OUT],
    "on_sale_at": None, "waiting_room": False, "max_tickets_per_permission": None,
}  # fmt: skip
_ORDER_SUMMARY = {
    "id": ORDER, "event_id": EVENT, "tier": "standard", "quantity": 2, "unit_price": "25.00", "currency": "EUR",
    "status": "processing", "created_at": "2027-03-01T10:15:00Z",
}  # fmt: skip
_TICKET_REFS = [{"id": t, "status": "rendered", "pdf_url": f"/v1/tickets/{t}/pdf"} for t in TICKETS]
# A Save to Google Wallet link's JWT, cut short here (a real one is ~1.9 KB).
_WALLET = {
    "apple": f"/v1/tickets/{TICKETS[0]}/pkpass",
    "google": "https://pay.google.com/gp/v/save/eyJhbGciOiJSUzI1NiJ9.e30.c2ln",
}
_LIST_OUT = {"id": LIST, "event_id": EVENT, "name": "Main entrance", "tiers": []}
_WEBHOOK_OUT = {
    "id": WEBHOOK, "event_id": EVENT, "url": "https://shop.example/hooks/ticketry",
    "types": ["order.completed", "order.cancelled"], "description": "shop back office",
    "created_at": "2027-03-01T09:00:00Z",
}  # fmt: skip
_DOOR_TIER = {"id": "standard", "name": "Standard"}
_DEVICE_OUT = {
    "id": DEVICE, "event_id": EVENT, "list_id": LIST, "name": "North gate phone 2",
    "created_at": "2027-06-01T17:00:00Z", "paired_at": "2027-06-01T17:05:00Z",
    "last_seen_at": "2027-06-01T19:40:00Z", "revoked_at": None,
}  # fmt: skip
_DEVICE_TOKEN = {
    "device_id": DEVICE, "event_id": EVENT, "list_id": LIST,
    "access_token": "eyJhbGciOiJIUzI1NiJ9.e30.c2lnbmF0dXJl", "token_type": "Bearer", "expires_in": 900,
}  # fmt: skip

# Schema name → its example (for a generic page, FastAPI's name: ``Page_EventOut_``).
EXAMPLES: dict[str, Any] = {
    "EventIn": {
        "name": "Spring Concert", "venue": "Town Hall", "starts_at": "2027-06-01T20:00:00+02:00",
        "doors_at": "2027-06-01T19:00:00+02:00", "capacity": 500, "price": "25.00", "currency": "EUR",
        "timezone": "Europe/Berlin",
    },
    "TierIn": {"id": "vip", "name": "VIP", "price": "80.00", "capacity": 50, "lane": "vip", "max_per_buyer": 4},
    "EventOut": _EVENT_OUT,
    "TierOut": _TIER_OUT,
    "Page_EventOut_": {"items": [_EVENT_OUT], "next": None},
    "OrderIn": {
        "event_id": EVENT, "quantity": 2, "holder_name": "Ada Lovelace", "tier": "standard",
        "email": "ada@example.com",
    },
    "OrderAccepted": {
        "id": ORDER, "event_id": EVENT, "quantity": 2, "tier": "standard", "unit_price": "25.00", "currency": "EUR",
        "status": "processing", "tickets": TICKETS,
        "progress_url": f"http://localhost:8001/v1/orders/{ORDER}/progress",
        "status_page_url": f"http://localhost:8000/o/{ORDER}#t=eyJhbGciOiJIUzI1NiJ9.e30.c2lnbmF0dXJl",
    },
    "OrderOut": {
        "id": ORDER, "event_id": EVENT, "tier": "standard", "unit_price": "25.00", "currency": "EUR",
        "status": "completed", "total": 2, "rendered": 2, "failed": 0, "tickets": _TICKET_REFS, "tickets_next": None,
        "progress_url": f"http://localhost:8001/v1/orders/{ORDER}/progress",
    },
    "OrderSummary": _ORDER_SUMMARY,
    "Page_OrderSummary_": {"items": [_ORDER_SUMMARY], "next": CURSOR},
    "TicketRef": _TICKET_REFS[0],
    "Page_TicketRef_": {"items": _TICKET_REFS, "next": None},
    "TicketOut": {
        "id": TICKETS[0], "order_id": ORDER, "event_id": EVENT, "holder_name": "Ada Lovelace", "tier": "standard",
        "status": "rendered", "pdf_url": f"/v1/tickets/{TICKETS[0]}/pdf", "wallet": _WALLET,
    },
    "WalletLinks": _WALLET,
    "CancelOut": {"id": ORDER, "status": "cancelled", "revoked": 2},
    "ReissueIn": {"holder_name": "Grace Hopper"},
    "ReissueOut": {"id": TICKETS[0], "version": 1, "holder_name": "Grace Hopper"},
    "CheckinListIn": {"name": "Main entrance", "tiers": ["standard"]},
    "CheckinListOut": _LIST_OUT,
    "Page_CheckinListOut_": {"items": [_LIST_OUT], "next": None},
    "CheckinListStatusOut": {"list_id": LIST, "inside": 812, "admitted": 1040},
    "Reason": {"reason": "render failed: font not found for holder name"},
    "CheckinIn": {
        "code": f"TK2.k2027a.{TICKETS[0]}.{EVENT}.standard.c2lnbmF0dXJlIG9mIHRoZSBjb2Rl", "list_id": LIST,
        "nonce": "scan-0001-a",
    },
    "CheckinOut": {
        "ticket_id": TICKETS[0], "event_id": EVENT, "tier": "standard", "holder_name": "Ada Lovelace",
        "list_id": LIST, "checked_in_at": "2027-06-01T19:42:10+02:00",
    },
    "SigningKeysOut": {
        "active_kid": "k2027a",
        "keys": {"k2027a": "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA…\n-----END PUBLIC KEY-----\n"},
    },
    "RevocationsOut": {"event_id": EVENT, "orders": [ORDER], "as_of": "2027-06-01T19:40:00Z"},
    "DoorTier": _DOOR_TIER,
    "DoorTicketOut": {
        "id": TICKETS[0], "holder_name": "Ada Lovelace", "tier": _DOOR_TIER, "status": "valid", "checked_in_at": None,
    },
    "DoorTicketsOut": {
        "list_id": LIST, "event_id": EVENT, "tiers": [_DOOR_TIER],
        "items": [
            {"id": t, "holder_name": "Ada Lovelace", "tier": _DOOR_TIER, "status": "valid", "checked_in_at": None}
            for t in TICKETS
        ],
        "next": None, "as_of": "2027-06-01T18:00:00Z",
    },
    "WebhookIn": {
        "url": "https://shop.example/hooks/ticketry", "types": ["order.completed", "order.cancelled"],
        "description": "shop back office",
    },
    "WebhookOut": _WEBHOOK_OUT,
    "WebhookCreated": {**_WEBHOOK_OUT, "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
    "WebhookList": {"items": [_WEBHOOK_OUT], "next": None},
    "DeviceIn": {"list_id": LIST, "name": "North gate phone 2"},
    "DeviceOut": _DEVICE_OUT,
    "DeviceCreated": {
        **_DEVICE_OUT, "paired_at": None, "last_seen_at": None,
        "pairing_code": "7KQ2-M9XD-4HRT", "pairing_url": "http://localhost:8000/scan#pair=7KQ2-M9XD-4HRT",
        "pairing_qr": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAAAAAA6fptVAAAACklEQVR4nGNgAAAAAgAB",
        "pairing_expires_at": "2027-06-01T17:15:00Z",
    },
    "DeviceList": {"items": [_DEVICE_OUT], "next": None},
    "PairIn": {"code": "7KQ2-M9XD-4HRT"},
    "DeviceTokenIn": {"secret": "dvs_" + DEVICE + ".Vq3mJx0cT9Wb2nYkLr7sPz4aFh1uDe6gQo8iKt5wXyZ"},
    "DeviceToken": _DEVICE_TOKEN,
    "DeviceCredential": {
        **_DEVICE_TOKEN, "name": "North gate phone 2",
        "secret": "dvs_" + DEVICE + ".Vq3mJx0cT9Wb2nYkLr7sPz4aFh1uDe6gQo8iKt5wXyZ",
    },
    "QueuePlace": {
        "queue_id": QUEUE, "event_id": EVENT, "position": 42, "eta_s": 84.0, "early": False,
        "progress_url": f"http://localhost:8001/v1/queue/{QUEUE}/progress",
        "status_page_url": f"http://localhost:8000/q/{QUEUE}#t=eyJhbGciOiJIUzI1NiJ9.e30.c2lnbmF0dXJl",
        "admitted": False, "permission": None, "expires_at": None, "sold_out": False, "paused": False,
        "closed": False,
    },
    "RoomAdmission": {"event_id": EVENT, "paused": True, "waiting": 42, "admitted": 180, "closed": False},
}  # fmt: skip
# Bodies with no schema of their own (a plain dict), by operation.
INLINE_EXAMPLES: dict[tuple[str, str, str], Any] = {
    ("get", "/healthz", "200"): {"status": "ok"},
    ("get", "/readyz", "200"): {"status": "ready", "redis": "ok", "store": "ok"},
}


def add_examples(document: dict[str, Any]) -> dict[str, Any]:
    """EXAMPLES on their schemas (JSON Schema ``examples``, which OpenAPI 3.1
    and generated clients read) and INLINE_EXAMPLES on their media types."""
    schemas = document.get("components", {}).get("schemas", {})
    for name, example in EXAMPLES.items():
        if name in schemas:
            schemas[name]["examples"] = [copy.deepcopy(example)]
    for (method, path, status), example in INLINE_EXAMPLES.items():
        response = document.get("paths", {}).get(path, {}).get(method, {}).get("responses", {}).get(status)
        if response is not None:
            for media in response.get("content", {}).values():
                media["example"] = copy.deepcopy(example)
    return document
