"""The rule of a cancel: an order's fate is decided once, by its cancel or
the first admission of one of its tickets (``ticketry_api.service_layer.cancel`` has the
steps that follow a cancel that won)."""

from __future__ import annotations

from ticketry_api.core.problem import Problem


def check_cancel_won(fate: str) -> None:
    """409 unless the order's ``fate`` is ``cancelled``: a ticket of it was admitted first."""
    if fate != "cancelled":
        raise Problem(409, "already used", "a ticket of this order has been checked in")
