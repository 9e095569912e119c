"""Scanner devices, the pure part: pairing codes, device secrets, their
hashes and the access token's scope. I/O is in ``ticketry_api.service_layer.devices`` and ``store.devices``.

A device is paired once with a **pairing code** (12 characters of Crockford's
base32, 60 bits, shown as ``ABCD-EFGH-JKMN``; short-lived and single use),
which it exchanges for its **device secret** (``dvs_<device id>.<43 random
characters>``, 256 bits, kept only on the device; the store keeps its
SHA-256). The secret buys short-lived **access tokens**, scoped to the
device's one check-in list. Both the code and the secret are random enough
that an unsalted SHA-256 is all the store needs (nothing to guess from it).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

# Crockford's base32: no I, L, O, U (read as 1, 1, 0; U is left out).
_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_MISREAD = str.maketrans({"I": "1", "L": "1", "O": "0"})
CODE_LENGTH = 12
DEVICE_PREFIX = "dv"
SECRET_PREFIX = "dvs_"  # noqa: S105  # a prefix, no secret
_SECRET = re.compile(r"^dvs_(dv_[0-9a-f]{20})\.[A-Za-z0-9_-]{43}$")
# The access token's scope: ``device:<device id>:<list id>``.
SCOPE_PREFIX = "device:"
_SCOPE = re.compile(r"^device:(dv_[0-9a-f]{20}):(cl_[0-9a-f]{20})$")


def new_pairing_code() -> str:
    """A fresh pairing code, normalised (no dashes)."""
    return "".join(secrets.choice(_ALPHABET) for _ in range(CODE_LENGTH))


def shown(code: str) -> str:
    """The code as people read and type it: ``ABCD-EFGH-JKMN``."""
    return "-".join(code[i : i + 4] for i in range(0, len(code), 4))


def normalised(typed: str) -> str | None:
    """The code someone typed or a link carried (any case, dashes and spaces
    anywhere, I/L for 1 and O for 0), or None when it cannot be one."""
    code = re.sub(r"[\s-]", "", typed).upper().translate(_MISREAD)
    if len(code) != CODE_LENGTH or any(c not in _ALPHABET for c in code):
        return None
    return code


def digest(value: str) -> str:
    """The SHA-256 (hex) the store keeps of a pairing code or a device secret."""
    return hashlib.sha256(value.encode()).hexdigest()


def new_secret(device_id: str) -> str:
    return f"{SECRET_PREFIX}{device_id}.{secrets.token_urlsafe(32)}"


def device_of_secret(secret: str) -> str | None:
    """The device a secret names (found by that id), or None for no secret of ours."""
    m = _SECRET.match(secret)
    return m.group(1) if m else None


def secret_matches(secret: str, kept_digest: str | None) -> bool:
    return kept_digest is not None and hmac.compare_digest(digest(secret), kept_digest)


def scope(device_id: str, list_id: str) -> str:
    return f"{SCOPE_PREFIX}{device_id}:{list_id}"


def scope_parts(value: str | None) -> tuple[str, str] | None:
    """``(device id, list id)`` of a device's scope, or None for any other caller."""
    m = _SCOPE.match(value or "")
    return (m.group(1), m.group(2)) if m else None
