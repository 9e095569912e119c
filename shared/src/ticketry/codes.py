"""Signed check-in codes (what the QR carries).

A code is ``TK2.<key id>.<ticket id>.<event id>.<tier id>.<Ed25519 signature>``:
it binds the ticket to its event and tier, so a door scanner can tell a ticket of
another event (or of a tier its list does not admit) without asking anyone.
Codes issued before they named their event are ``TK1.<key id>.<ticket id>.<sig>``
and keep verifying (their event is their order's). A re-issued ticket's code is
``TK3.<key id>.<ticket id>.<event id>.<tier id>.<version>.<sig>``: the version is
signed, so each re-issue makes a new code while the older ones stay genuine
(a door answers them "revoked", not "forged"); a never re-issued ticket
(version 0) keeps its ``TK2`` code. Ed25519 rather than
HMAC because a door scanner can then verify codes offline with only the public
key, and a leaked scanner cannot mint tickets. The key id lets keys rotate: new
tickets are signed with the newest key, old tickets keep verifying with theirs
until that key is retired on purpose.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ticketry.ids import is_valid_id

PREFIX = "TK1"  # ticket only (codes issued before codes were bound to an event)
PREFIX_BOUND = "TK2"  # ticket, event and tier
PREFIX_VERSIONED = "TK3"  # ticket, event, tier and the ticket's version (re-issued)
_SLUG = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")


@dataclass(frozen=True, slots=True)
class Verified:
    """What a genuine code says: the ticket, the key that signed it and, for a
    bound code, the ticket's event and tier (None for a ``TK1`` code)."""

    ticket_id: str
    kid: str
    event_id: str | None = None
    tier: str | None = None
    version: int = 0  # the ticket's re-issue it was made for (0: as first issued)


def key_id_of(code: str) -> str:
    """The key id a code names (unverified; what a ticket prints), else ''."""
    parts = code.split(".")
    known = {4: PREFIX, 6: PREFIX_BOUND, 7: PREFIX_VERSIONED}
    return parts[1] if known.get(len(parts)) == parts[0] else ""


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
    keys_dir: Path | None = None
    _stamp: tuple[tuple[str, int], ...] = ()
    _checked_at: float = 0.0

    @classmethod
    def verify_only(cls, public_pems: dict[str, bytes]) -> Keyring:
        """A scanner's keyring: public keys only (it can verify, never sign)."""
        ring = cls(active_kid="")
        for kid, pem in public_pems.items():
            key = serialization.load_pem_public_key(pem)
            if not isinstance(key, Ed25519PublicKey):
                raise ValueError(f"{kid} is not an Ed25519 public key")
            ring.public[kid] = key
        return ring

    def public_pems(self) -> dict[str, str]:
        """Every verifying key as PEM, by key id (what scanners download)."""
        return {
            kid: key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
            for kid, key in sorted(self.public.items())
        }

    def refresh(self, *, min_interval_s: float = 2.0, force: bool = False) -> bool:
        """Reload from ``keys_dir`` if its keys or ``ACTIVE`` changed (another
        process rotated); cheap (a directory listing), throttled. In place, so
        every holder of this keyring sees the new keys. True if reloaded."""
        if self.keys_dir is None:
            return False
        now = time.monotonic()
        if not force and now - self._checked_at < min_interval_s:
            return False
        self._checked_at = now
        stamp = _dir_stamp(self.keys_dir)
        if stamp == self._stamp:
            return False
        try:
            fresh = load_keyring(self.keys_dir)
        except (OSError, ValueError):
            return False  # mid-rotation or broken: keep the keys we have, retry later
        self.private, self.public, self.active_kid = fresh.private, fresh.public, fresh.active_kid
        self._stamp = fresh._stamp
        return True

    def sign(
        self, ticket_id: str, event_id: str = "", tier: str = "", *, kid: str | None = None, version: int = 0
    ) -> str:
        """The code of a ticket of ``event_id``'s ``tier`` (a bound ``TK2``
        code, or ``TK3`` from its first re-issue, ``version`` 1, on); without
        an event, a ticket-only ``TK1`` code. Signed with the
        active key, or with ``kid``: Ed25519 is deterministic, so a ticket's
        code made again with the key it was issued under is the same string
        (KeyError once that key's private half is retired)."""
        kid = kid or self.active_kid
        if event_id:
            if not is_valid_id(event_id, "ev") or not _SLUG.match(tier):
                raise ValueError("a bound code needs an event id and a tier id")
            body = f"{PREFIX_BOUND}.{kid}.{ticket_id}.{event_id}.{tier}"
            if version:
                body = f"{PREFIX_VERSIONED}.{kid}.{ticket_id}.{event_id}.{tier}.{version}"
        else:
            body = f"{PREFIX}.{kid}.{ticket_id}"
        return f"{body}.{_b64(self.private[kid].sign(body.encode()))}"

    def verify(self, code: str) -> tuple[str, str]:
        """Return ``(ticket_id, key_id)`` of a genuine code, else raise InvalidCode."""
        v = self.verify_code(code)
        return v.ticket_id, v.kid

    def verify_code(self, code: str) -> Verified:
        """What a genuine code says, else raise InvalidCode."""
        if len(code) > 256:
            raise InvalidCode
        parts = code.split(".")
        version = 0
        if len(parts) == 4 and parts[0] == PREFIX:
            _, kid, ticket_id, sig = parts
            event_id, tier = None, None
        elif (len(parts) == 6 and parts[0] == PREFIX_BOUND) or (len(parts) == 7 and parts[0] == PREFIX_VERSIONED):
            kid, ticket_id, event_id, tier, sig = parts[1], parts[2], parts[3], parts[4], parts[-1]
            if len(parts) == 7:
                version = _version(parts[5])
            if not is_valid_id(event_id, "ev") or not _SLUG.match(tier):
                raise InvalidCode
        else:
            raise InvalidCode
        pub = self.public.get(kid)
        if pub is None or not is_valid_id(ticket_id, "tk"):
            raise InvalidCode
        try:
            pub.verify(_unb64(sig), code.rpartition(".")[0].encode())
        except (InvalidSignature, binascii.Error, ValueError) as exc:
            raise InvalidCode from exc
        return Verified(ticket_id, kid, event_id, tier, version)


def _version(text: str) -> int:
    """A ``TK3`` code's version: 1 to 9999 in plain digits (one spelling per code)."""
    if not text.isascii() or not text.isdigit() or text.startswith("0") or len(text) > 4:
        raise InvalidCode
    return int(text)


def load_keyring(keys_dir: Path, *, create: bool = False) -> Keyring:
    """Load ``<kid>.pem`` private keys (and ``<kid>.pub`` verify-only keys) from
    ``keys_dir``; the newest private key (by name order of ``ACTIVE`` or mtime) signs.

    With ``create``, an empty directory gets a first key (dev mode and tests).
    """
    keys_dir.mkdir(parents=True, exist_ok=True)
    if create and not any(keys_dir.glob("*.pem")):
        rotate_key(keys_dir)
    ring = Keyring(active_kid="", keys_dir=keys_dir, _stamp=_dir_stamp(keys_dir))
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


def _dir_stamp(keys_dir: Path) -> tuple[tuple[str, int], ...]:
    try:
        files = [p for p in keys_dir.iterdir() if p.suffix in (".pem", ".pub") or p.name == "ACTIVE"]
        return tuple(sorted((p.name, p.stat().st_mtime_ns) for p in files))
    except FileNotFoundError:
        return ()


def rotate_key(keys_dir: Path) -> str:
    """Create a new signing key and make it active; older keys keep verifying.

    Running api processes pick the new key up by themselves (``Keyring.refresh``).
    Retire an old key only once no valid ticket carries it: delete its ``.pem``
    (it stops signing) and later its ``.pub`` (its codes stop verifying).
    """
    keys_dir.mkdir(parents=True, exist_ok=True)
    numbers = [int(p.stem[1:]) for p in keys_dir.iterdir() if p.stem[:1] == "k" and p.stem[1:].isdigit()]
    kid = f"k{max(numbers, default=0) + 1}"
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    # Written whole under a temp name, then linked into place without overwriting:
    # a concurrent reader never sees a half-written key, a concurrent rotation fails.
    tmp_pem = keys_dir / f".{kid}.pem.tmp"
    fd = os.open(tmp_pem, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    pub = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    tmp_pub = keys_dir / f".{kid}.pub.tmp"
    tmp_pub.write_bytes(pub)
    try:
        os.link(tmp_pub, keys_dir / f"{kid}.pub")
        os.link(tmp_pem, keys_dir / f"{kid}.pem")
    finally:
        tmp_pem.unlink(missing_ok=True)
        tmp_pub.unlink(missing_ok=True)
    tmp = keys_dir / "ACTIVE.tmp"
    tmp.write_text(kid)
    tmp.replace(keys_dir / "ACTIVE")
    return kid
