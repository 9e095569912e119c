"""What a progress socket asks for and how it is answered: pure functions of
plain data (the query, the offered subprotocols, the progress hash), no I/O.

Close codes the notifier sends (the reason always says what to do next):

======  ===========================================================================
1000    the order was cancelled: nothing more will ever come
1011    internal error (logged; reconnect with ``after=``)
1013    try again later: the notifier is at its socket bound, or Redis / the store did not answer
4008    too slow: the socket's queue filled up; reconnect with ``after=<id>``
4400    ``after`` is not a stream id
4401    no valid token, or the token expired (reconnect with a fresh one, and ``after=<id>`` on an order's socket)
4404    no such order, or not yours
4429    too many sockets for this buyer
======  ===========================================================================
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import orjson
from ticketry import streams
from ticketry.streams import BadStreamId as BadStreamId
from ticketry.streams import StreamKey as StreamKey
from ticketry.streams import format_stream_id as format_stream_id
from ticketry.streams import next_stream_id as next_stream_id
from ticketry.streams import parse_stream_id as parse_stream_id

SUBPROTOCOL = "ticketry"
BEARER_PREFIX = "bearer."

_JWT_SHAPE = re.compile(r"[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]*", re.ASCII)

Status = Literal["processing", "completed", "cancelled"]


@dataclass(frozen=True, slots=True)
class Close:
    """A WebSocket close: code and the reason the client is shown."""

    code: int
    reason: str
    label: str  # the metric label (``ticketry_websocket_closes_total{reason=…}``)


UNAUTHORIZED = Close(4401, "unauthorized", "unauthorized")
NOT_FOUND = Close(4404, "order not found", "not_found")
BAD_AFTER = Close(4400, "invalid after: a stream id such as 1700000000000-0", "bad_after")
NOTIFIER_FULL = Close(1013, "notifier at capacity; try again later", "full")
# Redis or the store did not answer in time.
UNAVAILABLE = Close(1013, "try again later", "unavailable")
TOO_MANY_FOR_USER = Close(4429, "too many connections for this user", "user_limit")
INTERNAL = Close(1011, "internal error; reconnect with after=", "error")
CANCELLED = Close(1000, "order cancelled", "cancelled")


def too_slow(resume_after: str) -> Close:
    """The socket fell a whole queue behind: resume where delivery stopped."""
    return Close(4008, f"too slow; reconnect with after={resume_after}", "too_slow")


def token_expired(resume_after: str | None = None) -> Close:
    """The token's ``exp`` passed; an order's socket names where to resume (a
    queue place's socket has nothing to resume: its first message is the state)."""
    if resume_after is None:
        return Close(4401, "token expired; reconnect with a fresh token", "expired")
    return Close(4401, f"token expired; reconnect with a fresh token and after={resume_after}", "expired")


def parse_after(raw: str | None) -> StreamKey | None:
    """The ``after=`` query parameter: None when absent, else a strict stream id."""
    return None if raw is None else parse_stream_id(raw)


@dataclass(frozen=True, slots=True)
class Credentials:
    """The token a socket brought and the subprotocol to answer with."""

    token: str
    subprotocol: str | None


def credentials(subprotocols: Sequence[str], query_token: str | None) -> Credentials:
    """Find the bearer token: in ``Sec-WebSocket-Protocol`` (kept out of URLs and
    so out of access logs) or, as before, in ``?token=``.

    ``["ticketry", "bearer.<jwt>"]`` (or ``["ticketry", "<jwt>"]``) is answered with
    ``ticketry``. ``["bearer.<jwt>"]`` alone is answered with that entry: a browser
    fails a handshake whose answer names none of the offered subprotocols.
    """
    offered = [p.strip() for p in subprotocols if p.strip()]
    bearer = next((p for p in offered if p.lower().startswith(BEARER_PREFIX)), None)
    if SUBPROTOCOL in offered:
        if bearer is not None:
            return Credentials(bearer[len(BEARER_PREFIX) :], SUBPROTOCOL)
        bare = next((p for p in offered if p != SUBPROTOCOL and _JWT_SHAPE.fullmatch(p)), None)
        if bare is not None:
            return Credentials(bare, SUBPROTOCOL)
        return Credentials(query_token or "", SUBPROTOCOL)
    if bearer is not None:
        return Credentials(bearer[len(BEARER_PREFIX) :], bearer)
    return Credentials(query_token or "", None)


def expires_at(token: str) -> float | None:
    """The ``exp`` of a token the verifier has already accepted (its signature
    and claims were checked there, so this only reads the payload: a second
    PyJWT decode cost as much as the verification); None if it has none."""
    try:
        payload = token.split(".")[1]
        claims = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError, orjson.JSONDecodeError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


def snapshot_status(progress: Mapping[str, str]) -> Status:
    """``cancelled`` / ``completed`` once the progress hash names that event."""
    if progress.get(streams.PROGRESS_CANCELLED):
        return "cancelled"
    if progress.get(streams.PROGRESS_COMPLETED):
        return "completed"
    return "processing"


def _count(progress: Mapping[str, str], name: str) -> int:
    try:
        return int(progress.get(name) or 0)
    except ValueError:
        return 0


def snapshot_text(order_id: str, upto: str, progress: Mapping[str, str]) -> str:
    """The first message of every socket (docs/contract.md, WebSocket), as JSON text.
    ``id`` is the stream position it covers: resume with ``after=<id>``."""
    status = snapshot_status(progress)
    msg = {
        "type": "snapshot", "id": upto, "order_id": order_id, "status": status,
        "total": _count(progress, streams.PROGRESS_TOTAL), "rendered": _count(progress, streams.PROGRESS_RENDERED),
        "failed": _count(progress, streams.PROGRESS_FAILED),
        "completed": bool(progress.get(streams.PROGRESS_COMPLETED)),
    }  # fmt: skip
    return orjson.dumps(msg).decode()
