"""Signed check-in codes (what the QR carries).

A code is ``TK1.<key id>.<ticket id>.<Ed25519 signature>``. Ed25519 rather than
HMAC because a door scanner can then verify codes offline with only the public
key, and a leaked scanner cannot mint tickets. The key id lets keys rotate: new
tickets are signed with the newest key, old tickets keep verifying with theirs
until that key is retired on purpose.
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ticketry.ids import is_valid_id

PREFIX = "TK1"


class InvalidCode(Exception):
    """Forged, malformed or signed by an unknown key (no detail on purpose)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class Keyring:
    """Signing keys by key id; the active one signs, every one verifies."""

    active_kid: str
    private: dict[str, Ed25519PrivateKey] = field(default_factory=dict)
    public: dict[str, Ed25519PublicKey] = field(default_factory=dict)

    def sign(self, ticket_id: str) -> str:
        kid = self.active_kid
        msg = f"{PREFIX}.{kid}.{ticket_id}".encode()
        return f"{PREFIX}.{kid}.{ticket_id}.{_b64(self.private[kid].sign(msg))}"

    def verify(self, code: str) -> tuple[str, str]:
        """Return ``(ticket_id, key_id)`` of a genuine code, else raise InvalidCode."""
        parts = code.split(".")
        if len(parts) != 4 or parts[0] != PREFIX or len(code) > 256:
            raise InvalidCode
        _, kid, ticket_id, sig = parts
        pub = self.public.get(kid)
        if pub is None or not is_valid_id(ticket_id, "tk"):
            raise InvalidCode
        try:
            pub.verify(_unb64(sig), f"{PREFIX}.{kid}.{ticket_id}".encode())
        except (InvalidSignature, binascii.Error, ValueError) as exc:
            raise InvalidCode from exc
        return ticket_id, kid


def load_keyring(keys_dir: Path, *, create: bool = False) -> Keyring:
    """Load ``<kid>.pem`` private keys (and ``<kid>.pub`` verify-only keys) from
    ``keys_dir``; the newest private key (by name order of ``ACTIVE`` or mtime) signs.

    With ``create``, an empty directory gets a first key (dev mode and tests).
    """
    keys_dir.mkdir(parents=True, exist_ok=True)
    if create and not any(keys_dir.glob("*.pem")):
        rotate_key(keys_dir)
    ring = Keyring(active_kid="")
    for pem in sorted(keys_dir.glob("*.pem")):
        key = serialization.load_pem_private_key(pem.read_bytes(), password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError(f"{pem} is not an Ed25519 key")
        ring.private[pem.stem] = key
        ring.public[pem.stem] = key.public_key()
    for pub in sorted(keys_dir.glob("*.pub")):
        if pub.stem not in ring.public:
            loaded = serialization.load_pem_public_key(pub.read_bytes())
            if isinstance(loaded, Ed25519PublicKey):
                ring.public[pub.stem] = loaded
    active = keys_dir / "ACTIVE"
    if active.exists():
        ring.active_kid = active.read_text().strip()
    elif ring.private:
        ring.active_kid = max(ring.private)
    if ring.active_kid not in ring.private:
        raise ValueError(f"no private signing key in {keys_dir}")
    return ring


def rotate_key(keys_dir: Path) -> str:
    """Create a new signing key and make it active; older keys keep verifying."""
    keys_dir.mkdir(parents=True, exist_ok=True)
    existing = sorted(p.stem for p in keys_dir.glob("*.pem"))
    kid = f"k{len(existing) + 1}"
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    path = keys_dir / f"{kid}.pem"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    (keys_dir / f"{kid}.pub").write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    tmp = keys_dir / "ACTIVE.tmp"
    tmp.write_text(kid)
    tmp.replace(keys_dir / "ACTIVE")
    return kid
