"""One order's email (pure): a plain-text and an HTML part, the event's time in
venue time, the tickets as one PDF and the wallet passes attached while they
fit the size cap, else a link to the buyer's page; a Message-ID that is the
same for every try of the same order, so a resent mail is recognisably the same."""

from __future__ import annotations

import html
from dataclasses import dataclass
from datetime import datetime
from email.message import EmailMessage
from email.utils import formatdate
from zoneinfo import ZoneInfo

PKPASS = "application/vnd.apple.pkpass"


@dataclass(frozen=True)
class OrderMail:
    """What the mail says of an order."""

    order_id: str
    to: str
    sender: str
    event_name: str
    venue: str
    timezone: str
    starts_at: datetime
    doors_at: datetime | None
    quantity: int
    holder_name: str
    page_url: str


@dataclass(frozen=True)
class Attachments:
    """The whole order's tickets in one PDF and its passes (``<ticket>.pkpass``, bytes)."""

    pdf: bytes
    passes: tuple[tuple[str, bytes], ...] = ()

    @property
    def size(self) -> int:
        return len(self.pdf) + sum(len(p) for _, p in self.passes)


def fits(sizes: list[int], cap: int) -> bool:
    """Whether attachments of these sizes (bytes) stay within ``cap`` in all."""
    return sum(sizes) <= cap


def message_id(order_id: str, sender: str) -> str:
    """The order's Message-ID: the order id at the sender's domain."""
    return f"<{order_id}.tickets@{sender.rpartition('@')[2]}>"


def venue_time(at: datetime, timezone: str) -> str:
    """``at`` as the venue's clock shows it: ``Tuesday 1 June 2027, 21:30 (CEST, UTC+02:00)``."""
    local = at.astimezone(ZoneInfo(timezone))
    offset = local.strftime("%z")
    return f"{local:%A} {local.day} {local:%B %Y, %H:%M} ({local.tzname()}, UTC{offset[:3]}:{offset[3:]})"


def _lines(m: OrderMail, attached: bool) -> list[str]:
    count = "1 ticket" if m.quantity == 1 else f"{m.quantity} tickets"
    lines = [
        f"Your {count} for {m.event_name} (order {m.order_id}, in the name of {m.holder_name}).",
        "",
        f"Where: {m.venue}",
        f"When:  {venue_time(m.starts_at, m.timezone)}",
    ]
    if m.doors_at is not None:
        lines.append(f"Doors: {venue_time(m.doors_at, m.timezone)}")
    lines.append("")
    if attached:
        lines.append("Your tickets are attached as one PDF. Show the QR code of each at the door.")
    else:
        lines.append("Your tickets are too large to attach: download them from your order's page.")
    lines += ["", "Your order's page (download, progress):", m.page_url]
    return lines


def build(m: OrderMail, attachments: Attachments | None) -> EmailMessage:
    """The mail of order ``m``: its tickets attached, or (``None``) the link alone."""
    msg = EmailMessage()
    msg["Subject"] = f"Your tickets: {m.event_name}"
    msg["From"] = m.sender
    msg["To"] = m.to
    msg["Date"] = formatdate(localtime=False, usegmt=True)
    msg["Message-ID"] = message_id(m.order_id, m.sender)
    lines = _lines(m, attachments is not None)
    msg.set_content("\n".join(lines) + "\n")
    body = "".join(
        f'<p><a href="{html.escape(line)}">{html.escape(line)}</a></p>' if line == m.page_url
        else f"<p>{html.escape(line)}</p>" if line else ""
        for line in lines
    )  # fmt: skip
    msg.add_alternative(f"<!doctype html><html><body>{body}</body></html>\n", subtype="html")
    if attachments is not None:
        msg.add_attachment(attachments.pdf, maintype="application", subtype="pdf", filename=f"{m.order_id}.pdf")
        for name, data in attachments.passes:
            msg.add_attachment(data, maintype="application", subtype="vnd.apple.pkpass", filename=name)
    return msg
