"""The Sentinel setting, read without any server (``ticketry.redis_ha``)."""

from __future__ import annotations

import pytest
from redis.exceptions import ConnectionError
from ticketry.redis_ha import NoSentinelAnswers, PrimaryNotFound, RedisTarget, describe, parse_sentinels
from ticketry.settings import CommonSettings


@pytest.mark.parametrize(
    ("text", "addresses"),
    [
        ("", ()),
        (" , ", ()),
        ("127.0.0.1:26379", (("127.0.0.1", 26379),)),
        ("a:1, b:2 ,c:3", (("a", 1), ("b", 2), ("c", 3))),
        ("[::1]:26379,sentinel-0.redis:26379", (("::1", 26379), ("sentinel-0.redis", 26379))),
    ],
)
def test_sentinel_lists(text: str, addresses: tuple[tuple[str, int], ...]) -> None:
    assert parse_sentinels(text) == addresses
    assert parse_sentinels(describe(addresses)) == addresses


@pytest.mark.parametrize("text", ["127.0.0.1", "host:", ":26379", "host:port", "host:0", "host:70000", "a:1,b"])
def test_what_is_no_sentinel_list(text: str) -> None:
    with pytest.raises(ValueError, match="not a sentinel address"):
        parse_sentinels(text)


def test_settings_without_sentinels_keep_the_one_redis() -> None:
    target = CommonSettings(redis_url="redis://127.0.0.1:6380/2").redis_target
    assert target == RedisTarget("redis://127.0.0.1:6380/2") and not target.via_sentinel


def test_settings_with_sentinels() -> None:
    settings = CommonSettings(redis_sentinels="10.0.0.1:26379,10.0.0.2:26379", redis_sentinel_master="shop")
    target = settings.redis_target
    assert target.via_sentinel and target.master == "shop"
    assert target.sentinels == (("10.0.0.1", 26379), ("10.0.0.2", 26379))


def test_a_primary_not_found_is_a_connection_error_whose_reason_names_no_address() -> None:
    # A connection error: retried by background work, a 503 for a request.
    exc = NoSentinelAnswers("no sentinel answers", (("10.0.0.1", 26379),), "ticketry")
    assert isinstance(exc, PrimaryNotFound) and isinstance(exc, ConnectionError)
    assert exc.reason == "no sentinel answers"
    assert str(exc) == "no sentinel answers: asked sentinels 10.0.0.1:26379 for master 'ticketry'"
