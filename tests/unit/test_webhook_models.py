"""Webhook messages: which event means which webhook, stable ids, the payload,
and a delivery's stream fields both ways."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest
from ticketry.events import DecodeError, TicketEvent
from ticketry_api.webhooks.models import Delivery, fact_of, message_id, payload, webhook_type


def event(type_: str, rendered: int = 3, failed: int = 0, total: int = 3) -> TicketEvent:
    return TicketEvent(
        id="1700000000000-0", type=type_, event_uuid="x", order_id="or_" + "1" * 20, total=total,  # type: ignore[arg-type]
        rendered=rendered, failed=failed, occurred_at=datetime(2027, 6, 1, 18, 0, tzinfo=UTC),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("type_", "rendered", "failed", "expected"),
    [
        ("order.completed", 3, 0, "order.completed"),
        ("order.completed", 2, 1, "order.partially_failed"),
        ("order.completed", 0, 3, "order.partially_failed"),  # every ticket failed: data.status says failed
        ("order.cancelled", 1, 0, "order.cancelled"),
        ("ticket.reissued", 1, 0, "ticket.reissued"),
        ("ticket.rendered", 1, 0, None),
        ("ticket.failed", 0, 1, None),
    ],
)
def test_webhook_type(type_: str, rendered: int, failed: int, expected: str | None) -> None:
    assert webhook_type(event(type_, rendered, failed)) == expected


def test_message_ids_are_stable_per_event_order_and_type() -> None:
    a = message_id("ev_1", "or_1", "order.completed")
    assert a == message_id("ev_1", "or_1", "order.completed")
    assert a.startswith("msg_") and len(a) == 36
    others = {
        message_id("ev_2", "or_1", "order.completed"),
        message_id("ev_1", "or_2", "order.completed"),
        message_id("ev_1", "or_1", "order.cancelled"),
    }
    assert a not in others and len(others) == 3
    # An order has one of each order.* type, but a re-issue per new version: its event's uuid tells them apart
    first, second = (message_id("ev_1", "or_1", "ticket.reissued", u) for u in ("uuid-1", "uuid-2"))
    assert first != second and first == message_id("ev_1", "or_1", "ticket.reissued", "uuid-1")


def test_a_reissue_names_the_ticket_its_holder_and_version_and_is_told_apart_by_its_event() -> None:
    ev = event("ticket.reissued", 1, 0).model_copy(update={"ticket_id": "tk_" + "2" * 20, "event_uuid": "u-7"})
    body = orjson.loads(payload(ev, "ticket.reissued", {"event_id": "ev_9"}, {"version": 2, "holder_name": "Ada"}))
    assert body["type"] == "ticket.reissued" and body["data"] == {
        "order_id": ev.order_id, "event_id": "ev_9", "tier": "standard", "ticket_id": ev.ticket_id,
        "version": 2, "holder_name": "Ada", "stream_id": ev.id,
    }  # fmt: skip
    assert fact_of(ev) == "u-7" and fact_of(event("order.completed", 1, 0)) == ""


def test_payload_is_a_standard_webhooks_body() -> None:
    ev = event("order.completed", rendered=0, failed=3)
    body = orjson.loads(payload(ev, "order.partially_failed", {"event_id": "ev_9", "tier": "vip", "quantity": 3}))
    assert body == {
        "type": "order.partially_failed",
        "timestamp": "2027-06-01T18:00:00+00:00",
        "data": {
            "order_id": ev.order_id, "event_id": "ev_9", "tier": "vip", "quantity": 3, "status": "failed",
            "total": 3, "rendered": 0, "failed": 3, "stream_id": "1700000000000-0",
        },
    }  # fmt: skip


def test_delivery_fields_round_trip_through_bytes() -> None:
    d = Delivery("wh_1", "msg_1", "order.completed", "or_1", "ev_1", b'{"a": "\xc3\xa9"}', 3, ("attempt 1: HTTP 500",))
    raw = {k.encode(): v.encode() for k, v in d.to_fields().items()}
    assert Delivery.from_fields(raw) == d
    nxt = d.next_attempt("attempt 3: HTTP 502")
    assert (nxt.attempt, nxt.history[-1], nxt.msg_id) == (4, "attempt 3: HTTP 502", d.msg_id)
    again = nxt.redriven("re-driven")
    assert (again.attempt, again.msg_id, again.body) == (1, d.msg_id, d.body)


GOOD = {k.encode(): v.encode() for k, v in Delivery("w", "m", "t", "o", "e", b"{}").to_fields().items()}


@pytest.mark.parametrize(
    "fields", [{}, {b"endpoint": b"wh_1"}, {**GOOD, b"attempt": b"x"}, {**GOOD, b"history": b"{}"}]
)
def test_malformed_deliveries_raise_decode_error(fields: dict[bytes, bytes]) -> None:
    with pytest.raises(DecodeError):
        Delivery.from_fields(fields)
