"""Standard Webhooks signatures (https://www.standardwebhooks.com/, the "symmetric" scheme).

A secret is ``whsec_`` + base64 of 24 random bytes; the HMAC key is the decoded
bytes. Each attempt is signed over ``<webhook-id>.<webhook-timestamp>.<body>``
with HMAC-SHA256 and sent as ``webhook-signature: v1,<base64>``. Receivers
check the signature in constant time and refuse timestamps more than
``TOLERANCE_S`` away from their clock (a replayed capture is old).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Mapping

PREFIX = "whsec_"
TOLERANCE_S = 5 * 60


class SignatureError(ValueError):
    """A delivery whose signature or timestamp does not verify."""


def new_secret() -> str:
    """A fresh endpoint secret (192 bits)."""
    return PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix(PREFIX), validate=True)


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value of one attempt (``v1,<base64>``)."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def headers(secret: str, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers of one attempt."""
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secret, msg_id, timestamp, body),
    }


def verify(secret: str, hdrs: Mapping[str, str], body: bytes, now: int, tolerance_s: int = TOLERANCE_S) -> None:
    """Raise :class:`SignatureError` unless ``hdrs`` sign ``body`` with ``secret``
    at a timestamp within ``tolerance_s`` of ``now`` (what a shop runs; the
    signature header may list several space-separated ``v1,…`` values)."""
    lower = {k.lower(): v for k, v in hdrs.items()}
    try:
        msg_id, ts = lower["webhook-id"], int(lower["webhook-timestamp"])
        given = lower["webhook-signature"].split()
    except (KeyError, ValueError) as exc:
        raise SignatureError("missing or malformed webhook headers") from exc
    if abs(now - ts) > tolerance_s:
        raise SignatureError("timestamp outside the tolerance (replayed or clock skew)")
    expected = sign(secret, msg_id, ts, body).encode()
    if not any(hmac.compare_digest(expected, g.encode()) for g in given):
        raise SignatureError("no signature matches")
