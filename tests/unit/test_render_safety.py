"""Ticket fields are data, never markup: render.py prints hostile text literally,
fetches nothing and reads no local file."""

from __future__ import annotations

import io
import re
import socket
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pypdf
import pytest
from ticketry.events import RenderRequest
from ticketry_renderer.render import Design, SafeFetcher, render_ticket, render_ticket_full

SECRET = "TOPSECRET-7f3c1e-do-not-print"


class Listener:
    """A local TCP server that records every connection it gets (it must get none)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port: int = self.sock.getsockname()[1]
        self.hits: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    self.hits.append(conn.recv(4096) or b"<connected>")
                except OSError:
                    self.hits.append(b"<connected>")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    lst = Listener()
    yield lst
    lst.close()


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "secret.txt"
    path.write_text(SECRET)
    return path


def payloads(port: int, secret: Path) -> list[str]:
    """Markup, template and fetch attempts a buyer or organiser might type."""
    return [
        f'<img src="file://{secret}">',
        '<img src="file:///etc/passwd">',
        "{{ 7*7 }}",
        "{% for x in range(3) %}X{% endfor %}",
        f"<link rel=stylesheet href=http://127.0.0.1:{port}/x>",
        f"<style>@import url(http://127.0.0.1:{port}/y);</style>",
        f'<iframe src="file://{secret}"></iframe>',
        f'<svg><image href="http://127.0.0.1:{port}/z"/></svg>',
        f"<div style=\"background:url('http://127.0.0.1:{port}/bg')\">x</div>",
        f'<object data="file://{secret}"></object>',
    ]


def squash(text: str) -> str:
    """PDF text wraps long lines; compare without whitespace."""
    return re.sub(r"\s+", "", text)


def pdf_text(pdf: bytes) -> str:
    return "\n".join(page.extract_text() for page in pypdf.PdfReader(io.BytesIO(pdf)).pages)


TICKET = "tk_0123456789abcdef0123_00000"


def request(event_name: str, venue: str, holder_name: str) -> RenderRequest:
    return RenderRequest(
        ticket_id=TICKET, order_id="or_0123456789abcdef0123", event_id="ev_0123456789abcdef0123",
        event_name=event_name, venue=venue, starts_at=datetime(2027, 6, 1, 19, 30, tzinfo=UTC), holder_name=holder_name,
        tier="standard", price=Decimal("25.00"), currency="EUR", code=f"TK1.k1.{TICKET}.sig", total=1,
    )  # fmt: skip


# Both paths: the fast one (fields stamped into the event's page) and the full
# WeasyPrint render it falls back to.
@pytest.mark.parametrize("render", [render_ticket, render_ticket_full], ids=["default", "full"])
def test_hostile_text_prints_literally_and_fetches_nothing(
    render: Callable[[RenderRequest, Design], bytes], listener: Listener, secret_file: Path
) -> None:
    design = Design.default()
    for payload in payloads(listener.port, secret_file):
        # Given a ticket whose every text field (event name, venue, holder) is hostile
        # When it is rendered
        pdf = render(request(payload, payload, payload), design)

        # Then the text is printed as typed in each field, and nothing was fetched or read
        text = pdf_text(pdf)
        assert squash(text).count(squash(payload)) >= 3, (payload, text[:500])
        assert SECRET not in text
        assert "root:x:0:0" not in text
        assert SECRET.encode() not in pdf
    assert not [u for u in design.fetcher.refused if str(listener.port) in u or "file:" in u]
    assert listener.hits == []


def test_template_expression_is_not_evaluated() -> None:
    pdf = render_ticket(request("{{ 7*7 }}", "{{ config }}", "{{ ''.__class__.__mro__ }}"), Design.default())
    text = squash(pdf_text(pdf))
    assert "{{7*7}}" in text and "{{config}}" in text and "__mro__" in text


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "http://127.0.0.1:1/x",
        "https://example.com/x.css",
        "data:text/css,body{}",
        "ftp://example.com/x",
        "ticketry-asset:/../../secret",
        "ticketry-asset:/does-not-exist.css",
        "//127.0.0.1/x",
    ],
)
def test_fetcher_serves_only_packaged_assets(url: str) -> None:
    fetcher = Design.default().fetcher
    with pytest.raises(ValueError, match="not allowed"):
        fetcher.fetch(url)
    assert fetcher.refused == [url]


def test_fetcher_serves_packaged_css() -> None:
    fetcher: SafeFetcher = Design.default().fetcher
    response = fetcher.fetch("ticketry-asset:/ticket.css")
    assert response is not None
    assert fetcher.refused == []


def test_hostile_stylesheet_in_the_document_is_refused(listener: Listener, secret_file: Path) -> None:
    """Defence in depth: even if markup got through, WeasyPrint may not fetch it."""
    from weasyprint import HTML

    design = Design.default()
    html = (
        f"<link rel=stylesheet href='http://127.0.0.1:{listener.port}/a.css'>"
        f"<img src='file://{secret_file}'><img src='http://127.0.0.1:{listener.port}/i.png'>"
        f"<style>@import url(http://127.0.0.1:{listener.port}/b.css);</style><p>hello</p>"
    )
    pdf = HTML(string=html, base_url="ticketry-asset:/", url_fetcher=design.fetcher).write_pdf()
    assert SECRET.encode() not in pdf
    assert listener.hits == []
    refused = " ".join(design.fetcher.refused)
    assert "a.css" in refused and "secret.txt" in refused and "i.png" in refused
