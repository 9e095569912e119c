"""The progress socket's handshake decisions, as plain data (no server)."""

from __future__ import annotations

import jwt
import orjson
import pytest
from ticketry.auth import issue_token
from ticketry_notifier import handshake
from ticketry_notifier.handshake import BadStreamId, Credentials

U64 = 2**64 - 1
KEY = "a-test-secret-of-thirty-two-bytes!"


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ("0-0", (0, 0)),
        ("0", (0, 0)),
        ("1700000000000-3", (1700000000000, 3)),
        ("1700000000000", (1700000000000, 0)),
        (f"{U64}-{U64}", (U64, U64)),
        ("00012-007", (12, 7)),
    ],
)
def test_stream_ids_that_redis_takes(raw: str, key: tuple[int, int]) -> None:
    assert handshake.parse_stream_id(raw) == key


@pytest.mark.parametrize(
    "raw",
    [
        "1_0-0",  # int() takes underscores; Redis does not
        "1-0_0",
        "",
        "-",
        "1-",
        "-1",
        "+1-0",
        " 1-0",
        "1-0 ",
        "1-0\n",
        "1-2-3",
        "\u0661-0",  # ARABIC-INDIC DIGIT ONE: int() takes it, \d matches it
        "１-0",  # FULLWIDTH DIGIT ONE
        "0x10-0",
        "1.5-0",
        "1e3",
        "$",
        "+",
        "*",
        f"{U64 + 1}-0",
        f"0-{U64 + 1}",
        "1" * 21,
        "(1-0",
    ],
)
def test_anything_else_is_refused(raw: str) -> None:
    with pytest.raises(BadStreamId):
        handshake.parse_stream_id(raw)


def test_after_is_optional() -> None:
    assert handshake.parse_after(None) is None
    assert handshake.parse_after("5-1") == (5, 1)
    with pytest.raises(BadStreamId):
        handshake.parse_after("1_0-0")


@pytest.mark.parametrize(
    ("key", "following"),
    [((5, 1), (5, 2)), ((5, U64), (6, 0)), ((U64, U64), None), ((0, 0), (0, 1))],
)
def test_the_replay_starts_just_after_the_given_id(key: tuple[int, int], following: tuple[int, int] | None) -> None:
    assert handshake.next_stream_id(key) == following


JWT = issue_token("buyer-1", "buyer", key=KEY)


@pytest.mark.parametrize(
    ("offered", "query", "want"),
    [
        ([], JWT, Credentials(JWT, None)),
        ([], None, Credentials("", None)),
        (["ticketry", f"bearer.{JWT}"], None, Credentials(JWT, "ticketry")),
        ([f"bearer.{JWT}", "ticketry"], "ignored", Credentials(JWT, "ticketry")),
        (["ticketry", JWT], None, Credentials(JWT, "ticketry")),
        ([f"bearer.{JWT}"], None, Credentials(JWT, f"bearer.{JWT}")),
        (["ticketry"], JWT, Credentials(JWT, "ticketry")),
        (["chat", "superchat"], JWT, Credentials(JWT, None)),
        (["ticketry", "not-a-jwt"], None, Credentials("", "ticketry")),
    ],
)
def test_the_token_comes_from_the_subprotocols_or_the_query(
    offered: list[str], query: str | None, want: Credentials
) -> None:
    assert handshake.credentials(offered, query) == want


def test_expiry_is_read_from_the_token() -> None:
    tok = issue_token("b", "buyer", key=KEY, ttl_s=120)
    assert handshake.expires_at(tok) == jwt.decode(tok, KEY, algorithms=["HS256"])["exp"]
    for bad in ("garbage", "a.!!!.c", "a..c", "", f"a.{'e30'}.c"):  # e30 is {}: no exp
        assert handshake.expires_at(bad) is None


@pytest.mark.parametrize(
    ("progress", "status"),
    [
        ({"total": "3", "rendered": "1"}, "processing"),
        ({"total": "3", "rendered": "3", "completed": "1700-0"}, "completed"),
        ({"total": "3", "cancelled": "1701-0"}, "cancelled"),
        ({"total": "3", "rendered": "3", "completed": "1700-0", "cancelled": "1701-0"}, "cancelled"),
        ({}, "processing"),
    ],
)
def test_snapshot_status(progress: dict[str, str], status: str) -> None:
    assert handshake.snapshot_status(progress) == status
    msg = orjson.loads(handshake.snapshot_text("or_x", "1700-0", progress))
    assert msg["type"] == "snapshot" and msg["id"] == "1700-0" and msg["status"] == status
    assert msg["completed"] is ("completed" in progress)


def test_snapshot_counters() -> None:
    msg = orjson.loads(handshake.snapshot_text("or_x", "0-0", {"total": "20", "rendered": "7", "failed": "2"}))
    assert (msg["total"], msg["rendered"], msg["failed"], msg["order_id"]) == (20, 7, 2, "or_x")


def test_close_reasons_fit_a_close_frame_and_name_the_resume_id() -> None:
    longest = f"{U64}-{U64}"
    for close in (handshake.too_slow(longest), handshake.token_expired(longest)):
        assert f"after={longest}" in close.reason
        assert len(close.reason.encode()) <= 123  # RFC 6455: 125 bytes with the code
    for close in (
        handshake.UNAUTHORIZED, handshake.NOT_FOUND, handshake.BAD_AFTER, handshake.NOTIFIER_FULL,
        handshake.UNAVAILABLE, handshake.TOO_MANY_FOR_USER, handshake.INTERNAL, handshake.CANCELLED,
    ):  # fmt: skip
        assert len(close.reason.encode()) <= 123
        assert close.code in (1000, 1011, 1013) or 4000 <= close.code <= 4999
