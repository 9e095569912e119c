"""The pure decisions behind tests/e2e/test_small_holes.py: who may read
/metrics, which shop origins a setting accepts, when a nonce has expired."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError
from ticketry_api.config import ApiSettings, shop_origin
from ticketry_api.core.checkins import nonces_expired_before
from ticketry_api.middleware.metrics import scrape_refusal

TOKEN = "scrape-me-0123456789"


@pytest.mark.parametrize(
    ("token", "authorization", "peer", "refused"),
    [
        (None, None, "127.0.0.1", None),  # a local Prometheus
        (None, None, "::1", None),
        (None, None, "10.0.0.7", 403),  # anyone else, without a token set
        (None, f"Bearer {TOKEN}", "203.0.113.7", 403),  # no token set: none is accepted either
        (None, None, None, 403),  # no peer known
        (TOKEN, None, "127.0.0.1", 401),  # a token set: loopback is no pass
        (TOKEN, f"Bearer {TOKEN}", "10.0.0.7", None),
        (TOKEN, f"Bearer {TOKEN}x", "10.0.0.7", 401),
        (TOKEN, f"Bearer {TOKEN[:-1]}", "10.0.0.7", 401),
        (TOKEN, "Basic Zm9vOmJhcg==", "10.0.0.7", 401),
        (TOKEN, "Bearer ", "10.0.0.7", 401),
        (TOKEN, TOKEN, "10.0.0.7", 401),  # no scheme
        (TOKEN, f"bearer {TOKEN}", "10.0.0.7", None),  # schemes are case-insensitive
    ],
)
def test_who_may_read_metrics(
    token: str | None, authorization: str | None, peer: str | None, refused: int | None
) -> None:
    assert scrape_refusal(token, authorization, peer) == refused


@pytest.mark.parametrize(
    ("raw", "origin"),
    [
        ("https://Shop.Example", "https://shop.example"),
        ("https://shop.example/", "https://shop.example"),
        ("https://shop.example:443", "https://shop.example"),
        ("https://shop.example:8443", "https://shop.example:8443"),
        ("http://127.0.0.1:9000", "http://127.0.0.1:9000"),
        ("http://localhost", "http://localhost"),
    ],
)
def test_a_shop_origin_is_kept_as_the_browser_writes_it(raw: str, origin: str) -> None:
    assert shop_origin(raw) == origin


@pytest.mark.parametrize(
    "raw",
    [
        "http://shop.example",  # plain http off this machine
        "https://shop.example/checkout",  # a path: not an origin
        "https://user@shop.example",
        "https://shop.example?x=1",
        "javascript:alert(1)",
        "shop.example",
    ],
)
def test_anything_but_an_origin_is_refused(raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="origin"):
        shop_origin(raw)
    monkeypatch.setenv("TICKETRY_DEV_MODE", "1")
    monkeypatch.setenv("TICKETRY_SHOP_ORIGINS", f"https://ok.example,{raw}")
    with pytest.raises(ValidationError):
        ApiSettings()


def test_the_settings_read_a_comma_separated_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TICKETRY_DEV_MODE", "1")
    monkeypatch.setenv("TICKETRY_SHOP_ORIGINS", " https://a.example, https://B.example:8443 ,")
    monkeypatch.setenv("TICKETRY_METRICS_TOKEN", "")
    s = ApiSettings()
    assert s.shop_origins == ["https://a.example", "https://b.example:8443"]
    assert s.metrics_token is None  # empty: unset


def test_a_nonce_expires_its_lifetime_after_it_was_kept() -> None:
    now = datetime(2027, 6, 8, 12, 0, tzinfo=UTC)
    assert nonces_expired_before(now, 7 * 24 * 3600) == datetime(2027, 6, 1, 12, 0, tzinfo=UTC)
