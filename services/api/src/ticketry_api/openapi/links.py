"""OpenAPI ``links``: from each operation that creates something to the
operations that use what it returns, so a generated client (or a stateful
fuzzer) walks event → tier → order → tickets → PDF/pass → check-in list →
check-in → cancel → webhooks, and device → pairing → token, without guessing
ids. A link names the target's path parameters, and the fields of its body
it fills (``requestBody``: the rest of the body is the caller's)."""

from __future__ import annotations

from typing import Any

_EVENT = "$response.body#/id"
_ORDER = "$response.body#/id"
_FIRST_TICKET = "$response.body#/tickets/0"
_EVENT_OPS = [
    ("GetEvent", "GET", "/v1/events/{event_id}"),
    ("EventOrders", "GET", "/v1/events/{event_id}/orders"),
    ("CreateCheckinList", "POST", "/v1/events/{event_id}/checkin-lists"),
    ("CheckinLists", "GET", "/v1/events/{event_id}/checkin-lists"),
    ("Revocations", "GET", "/v1/events/{event_id}/revocations"),
    ("CreateWebhook", "POST", "/v1/events/{event_id}/webhooks"),
    ("Webhooks", "GET", "/v1/events/{event_id}/webhooks"),
    ("CreateDevice", "POST", "/v1/events/{event_id}/devices"),
    ("Devices", "GET", "/v1/events/{event_id}/devices"),
    ("JoinQueue", "POST", "/v1/events/{event_id}/queue"),
    ("PauseQueue", "POST", "/v1/events/{event_id}/queue/pause"),
    ("ResumeQueue", "POST", "/v1/events/{event_id}/queue/resume"),
    ("CloseQueue", "POST", "/v1/events/{event_id}/queue/close"),
]
_ORDER_OPS = [
    ("GetOrder", "GET", "/v1/orders/{order_id}"),
    ("OrderTickets", "GET", "/v1/orders/{order_id}/tickets"),
    ("OrderPdf", "GET", "/v1/orders/{order_id}/pdf"),
    ("CancelOrder", "POST", "/v1/orders/{order_id}/cancel"),
]
_TICKET_OPS = [
    ("GetTicket", "GET", "/v1/tickets/{ticket_id}"),
    ("TicketPdf", "GET", "/v1/tickets/{ticket_id}/pdf"),
    ("TicketPass", "GET", "/v1/tickets/{ticket_id}/pkpass"),
    ("ReissueTicket", "POST", "/v1/tickets/{ticket_id}/reissue"),
]
_LIST_OPS = [
    ("GetCheckinList", "GET", "/v1/checkin-lists/{list_id}"),
    ("CheckinListTickets", "GET", "/v1/checkin-lists/{list_id}/tickets"),
    ("CheckinListStatus", "GET", "/v1/checkin-lists/{list_id}/status"),
]
Link = tuple[str, str, str, dict[str, str]] | tuple[str, str, str, dict[str, str], dict[str, str]]

# An order of the event's first tier (the body's other fields are the buyer's).
_ORDER_OF_EVENT: Link = (
    "CreateOrder", "POST", "/v1/orders", {}, {"event_id": _EVENT, "tier": "$response.body#/tiers/0/id"},
)  # fmt: skip

# (method, path, status) of a creating operation → (link name, target method, target path, path
# parameters[, the fields of the target's body it fills]).
LINKS: dict[tuple[str, str, str], list[Link]] = {
    ("POST", "/v1/events", "201"): [*((n, m, p, {"event_id": _EVENT}) for n, m, p in _EVENT_OPS), _ORDER_OF_EVENT],
    ("GET", "/v1/events/{event_id}", "200"): [
        *((n, m, p, {"event_id": _EVENT}) for n, m, p in _EVENT_OPS[1:]), _ORDER_OF_EVENT,
    ],
    ("POST", "/v1/orders", "202"): [
        *((n, m, p, {"order_id": _ORDER}) for n, m, p in _ORDER_OPS),
        *((n, m, p, {"ticket_id": _FIRST_TICKET}) for n, m, p in _TICKET_OPS),
        ("GetOrderEvent", "GET", "/v1/events/{event_id}", {"event_id": "$response.body#/event_id"}),
    ],
    ("GET", "/v1/orders/{order_id}", "200"): [
        *((n, m, p, {"order_id": _ORDER}) for n, m, p in _ORDER_OPS[1:]),
        *((n, m, p, {"ticket_id": "$response.body#/tickets/0/id"}) for n, m, p in _TICKET_OPS),
    ],
    ("POST", "/v1/events/{event_id}/checkin-lists", "201"): [
        *((n, m, p, {"list_id": "$response.body#/id"}) for n, m, p in _LIST_OPS),
        ("CheckIn", "POST", "/v1/checkins", {}, {"list_id": "$response.body#/id"}),
    ],
    ("POST", "/v1/events/{event_id}/webhooks", "201"): [
        (
            "DeleteWebhook", "DELETE", "/v1/events/{event_id}/webhooks/{webhook_id}",
            {"event_id": "$request.path.event_id", "webhook_id": "$response.body#/id"},
        ),
    ],
    ("POST", "/v1/events/{event_id}/devices", "201"): [
        (
            "RevokeDevice", "DELETE", "/v1/events/{event_id}/devices/{device_id}",
            {"event_id": "$request.path.event_id", "device_id": "$response.body#/id"},
        ),
        ("PairDevice", "POST", "/v1/devices/pair", {}, {"code": "$response.body#/pairing_code"}),
    ],
    ("POST", "/v1/devices/pair", "200"): [
        ("DeviceToken", "POST", "/v1/devices/token", {}, {"secret": "$response.body#/secret"}),
    ],
}  # fmt: skip


def add_links(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` with LINKS in its responses (by operationId); links to operations it lacks are left out."""
    paths = document.get("paths", {})
    for (method, path, status), links in LINKS.items():
        response = paths.get(path, {}).get(method.lower(), {}).get("responses", {}).get(status)
        if response is None:
            continue
        found = {}
        for name, target_method, target_path, parameters, *body in links:
            target = paths.get(target_path, {}).get(target_method.lower())
            if target is not None:
                found[name] = {"operationId": target["operationId"], "parameters": parameters}
                if body:
                    found[name]["requestBody"] = body[0]
        response["links"] = found
    return document
