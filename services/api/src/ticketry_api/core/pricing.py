"""Prices: amounts are kept in minor units (cents) and shown as decimals."""

from __future__ import annotations

from decimal import Decimal
from typing import Protocol


class Priced(Protocol):
    @property
    def price_minor(self) -> int: ...


class Seller(Protocol):
    """What an order's price is looked up in: an event, with its tiers."""

    @property
    def price_minor(self) -> int: ...

    def tier(self, tier_id: str, /) -> Priced | None: ...


class Sale(Protocol):
    """What an order says of its price: the unit price it was sold at (None
    for orders from before it was recorded) and its tier."""

    @property
    def unit_price_minor(self) -> int | None: ...

    @property
    def tier(self) -> str: ...


def minor_to_decimal(minor: int) -> Decimal:
    return Decimal(minor).scaleb(-2)


def unit_price_of(order: Sale, event: Seller) -> Decimal:
    """What each ticket of ``order`` was sold at: the price it recorded, else
    its tier's today, else the event's."""
    if order.unit_price_minor is not None:
        return minor_to_decimal(order.unit_price_minor)
    tier = event.tier(order.tier)
    return minor_to_decimal(tier.price_minor if tier is not None else event.price_minor)
