"""A ticket as a wallet shows it: what the Apple pass (``core.pkpass``) and the
Google Wallet object (``core.google_wallet``) are both built from, with its
times in the venue's zone (the offset written out, so a phone elsewhere still
shows the venue's clock)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo


@dataclass(frozen=True)
class WalletTicket:
    """One rendered ticket: its ids, its event, its holder and tier, and the
    signed check-in code its PDF's QR holds."""

    ticket_id: str
    order_id: str
    event_id: str
    event_name: str
    venue: str
    starts_at: datetime  # UTC (a naive value is taken as UTC, as the store keeps it)
    doors_at: datetime | None  # None: at ``starts_at``
    timezone: str  # IANA, the venue's
    holder_name: str
    tier_name: str
    code: str

    def starts(self) -> datetime:
        """The start in venue time, with its offset."""
        return venue_time(self.starts_at, self.timezone)

    def doors(self) -> datetime:
        """When doors open in venue time (the start when the event names none)."""
        return venue_time(self.doors_at, self.timezone) if self.doors_at is not None else self.starts()


def venue_time(at: datetime, zone: str) -> datetime:
    """``at`` (UTC; naive taken as UTC) in ``zone``, whole seconds."""
    aware = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    return aware.astimezone(ZoneInfo(zone)).replace(microsecond=0)
