"""One order's email, built without a server (``ticketry_api.mail.message``):
its two parts, the venue's clock, the Message-ID, attachments or the link."""

from __future__ import annotations

import email
import email.policy
from dataclasses import replace
from datetime import UTC, datetime
from email.message import EmailMessage

import pytest
from ticketry_api.mail.message import Attachments, OrderMail, build, fits, message_id, venue_time

from tests.mail_support import parts

MAIL = OrderMail(
    order_id="ord_0123456789abcdef", to="ada@example.com", sender="tickets@shop.example", event_name="Night <Live>",
    venue="Loopback Arena", timezone="Europe/Berlin", starts_at=datetime(2027, 6, 1, 19, 30, tzinfo=UTC),
    doors_at=None, quantity=2, holder_name="Ada & Bob", page_url="https://t.example/o/ord_0123456789abcdef#t=x&y",
)  # fmt: skip
FILES = Attachments(b"%PDF-1.7 tickets", (("tk_1.pkpass", b"PK\x03\x04one"), ("tk_2.pkpass", b"PK\x03\x04two")))


def sent(m: OrderMail, files: Attachments | None) -> EmailMessage:
    """The message as the server receives it: built, serialised, parsed back."""
    msg = email.message_from_bytes(build(m, files).as_bytes(), policy=email.policy.default)
    assert isinstance(msg, EmailMessage)
    return msg


@pytest.mark.parametrize(
    ("at", "tz", "shown"),
    [
        (datetime(2027, 6, 1, 19, 30, tzinfo=UTC), "Europe/Berlin", "Tuesday 1 June 2027, 21:30 (CEST, UTC+02:00)"),
        (datetime(2027, 1, 15, 19, 30, tzinfo=UTC), "Europe/Berlin", "Friday 15 January 2027, 20:30 (CET, UTC+01:00)"),
        (datetime(2027, 6, 2, 1, 0, tzinfo=UTC), "America/New_York", "Tuesday 1 June 2027, 21:00 (EDT, UTC-04:00)"),
        (datetime(2027, 6, 1, 19, 30, tzinfo=UTC), "Asia/Kolkata", "Wednesday 2 June 2027, 01:00 (IST, UTC+05:30)"),
        (datetime(2027, 6, 1, 19, 30, tzinfo=UTC), "UTC", "Tuesday 1 June 2027, 19:30 (UTC, UTC+00:00)"),
    ],
)  # fmt: skip
def test_the_event_time_is_the_venues_clock_with_its_offset(at: datetime, tz: str, shown: str) -> None:
    assert venue_time(at, tz) == shown


def test_a_mail_has_a_text_and_an_html_part_saying_the_same_in_venue_time() -> None:
    m = replace(MAIL, doors_at=datetime(2027, 6, 1, 18, 30, tzinfo=UTC))
    msg = sent(m, FILES)
    assert msg["To"] == "ada@example.com" and msg["From"] == "tickets@shop.example"
    assert msg["Subject"] == "Your tickets: Night <Live>"
    got = parts(msg)
    (text,), (page,) = got["text/plain"], got["text/html"]
    body = text.get_content()
    assert "Your 2 tickets for Night <Live> (order ord_0123456789abcdef, in the name of Ada & Bob)." in body
    assert "When:  Tuesday 1 June 2027, 21:30 (CEST, UTC+02:00)" in body
    assert "Doors: Tuesday 1 June 2027, 20:30 (CEST, UTC+02:00)" in body
    assert MAIL.page_url in body
    markup = page.get_content()
    # The HTML part escapes what the organiser and the buyer typed, and links the page.
    assert "Night &lt;Live&gt;" in markup and "Ada &amp; Bob" in markup and "<Live>" not in markup
    assert '<a href="https://t.example/o/ord_0123456789abcdef#t=x&amp;y">' in markup
    assert "21:30 (CEST, UTC+02:00)" in markup


def test_no_doors_line_without_a_doors_time() -> None:
    assert "Doors:" not in parts(sent(MAIL, FILES))["text/plain"][0].get_content()


def test_the_message_id_is_the_same_for_every_try_of_an_order_and_differs_between_orders() -> None:
    first, again = sent(MAIL, FILES), sent(MAIL, None)
    assert first["Message-ID"] == again["Message-ID"] == "<ord_0123456789abcdef.tickets@shop.example>"
    assert message_id(MAIL.order_id, MAIL.sender) == first["Message-ID"]
    assert sent(replace(MAIL, order_id="ord_fedcba9876543210"), FILES)["Message-ID"] != first["Message-ID"]


def test_attachments_are_the_tickets_pdf_and_each_wallet_pass() -> None:
    got = parts(sent(MAIL, FILES))
    (pdf,) = got["application/pdf"]
    assert pdf.get_filename() == "ord_0123456789abcdef.pdf" and pdf.get_content() == FILES.pdf
    passes = {p.get_filename(): p.get_content() for p in got["application/vnd.apple.pkpass"]}
    assert passes == dict(FILES.passes)
    assert "attached as one PDF" in got["text/plain"][0].get_content()


def test_without_attachments_the_mail_links_the_buyers_page() -> None:
    got = parts(sent(MAIL, None))
    assert set(got) == {"text/plain", "text/html"}
    text = got["text/plain"][0].get_content()
    assert "too large to attach" in text and MAIL.page_url in text


@pytest.mark.parametrize(
    ("sizes", "cap", "ok"),
    [([], 0, True), ([5_000_000], 5_000_000, True), ([5_000_001], 5_000_000, False),
     ([2_000_000, 2_000_000, 1_000_000], 5_000_000, True), ([2_000_000, 2_000_000, 1_000_001], 5_000_000, False),
     ([1], 0, False)],
)  # fmt: skip
def test_attachments_fit_while_their_total_stays_within_the_cap(sizes: list[int], cap: int, ok: bool) -> None:
    assert fits(sizes, cap) is ok


def test_the_size_of_attachments_counts_the_pdf_and_every_pass() -> None:
    assert FILES.size == len(b"%PDF-1.7 tickets") + 2 * len(b"PK\x03\x04one")
