"""The rules of placing an order, as answers: what a buyer may ask for, when
an Idempotency-Key replays the first order, and the refusals on the way
(``ticketry_api.service_layer.orders`` does the reading and writing around them)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from ticketry_api.core.problem import Problem


def request_hash(body: Mapping[str, Any]) -> str:
    """What tells two bodies of one Idempotency-Key apart (the body as JSON, keys sorted)."""
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


def check_quantity(quantity: int, max_quantity: int) -> None:
    if quantity > max_quantity:
        raise Problem(422, "quantity too large", f"at most {max_quantity} tickets per order")


def event_not_found() -> Problem:
    return Problem(404, "event not found")


def unknown_tier(sold: Iterable[str]) -> Problem:
    return Problem(422, "unknown tier", f"this event sells the tiers {', '.join(sold)}")


def sold_out(tier_id: str) -> Problem:
    return Problem(409, "sold out", f"the event or its tier {tier_id!r} has fewer tickets left than requested")


def check_per_buyer(held: int, max_per_buyer: int | None, tier_id: str) -> None:
    """409 when the buyer would hold more than ``max_per_buyer`` of the tier (``held`` counts this order)."""
    if max_per_buyer is not None and held > max_per_buyer:
        raise Problem(
            409, "limit per buyer", f"at most {max_per_buyer} tickets of {tier_id!r} per buyer for this event"
        )


def check_replay(owner_id: str, first_hash: str, caller: str | None, digest: str) -> None:
    """Whether a repeated Idempotency-Key may answer with the first order:
    only the caller's own (``caller`` None: a race the caller's own request
    lost, so its own), and only for the same body."""
    if caller is not None and owner_id != caller:
        raise Problem(409, "idempotency key conflict", "retry with another Idempotency-Key")
    if first_hash != digest:
        raise Problem(422, "idempotency key reused", "this Idempotency-Key was used with another body")


def still_in_progress() -> Problem:
    """A replay whose first request has not finished within the wait."""
    return Problem(
        409, "order in progress", "the first request with this key is still running; retry after the time given",
        {"Retry-After": "1"},
    )  # fmt: skip


def abandoned() -> Problem:
    """The request took longer than the outbox grace, and the sweep gave its order up."""
    return Problem(503, "busy", "the order took too long to record; retry", {"Retry-After": "1"})


def lost_race() -> Problem:
    return Problem(409, "conflict", "retry the request")
