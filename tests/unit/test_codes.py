"""Signed check-in codes: offline verification, forgery, rotation."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from ticketry.codes import InvalidCode, Keyring, load_keyring, rotate_key
from ticketry.ids import new_id, ticket_ids


@pytest.fixture
def keys_dir(tmp_path: Path) -> Path:
    d = tmp_path / "keys"
    rotate_key(d)
    return d


def scanner(keys_dir: Path) -> Keyring:
    """A door scanner: the public keys only, as files it was handed."""
    return Keyring.verify_only({p.stem: p.read_bytes() for p in keys_dir.glob("*.pub")})


def test_code_verifies_offline_with_public_key_only(keys_dir: Path) -> None:
    ring = load_keyring(keys_dir)
    tid = ticket_ids(new_id("or"), 1)[0]
    code = ring.sign(tid)
    door = scanner(keys_dir)
    assert door.private == {}
    assert door.verify(code) == (tid, "k1")
    with pytest.raises(KeyError):
        door.sign(tid)  # a stolen scanner cannot mint tickets


def test_code_is_not_derivable_from_ticket_id(tmp_path: Path) -> None:
    # Same ticket id, same key id, different (secret) keys: different codes, and
    # neither verifies under the other's key.
    a, b = tmp_path / "a", tmp_path / "b"
    rotate_key(a), rotate_key(b)
    tid = ticket_ids(new_id("or"), 1)[0]
    ca, cb = load_keyring(a).sign(tid), load_keyring(b).sign(tid)
    assert ca != cb
    with pytest.raises(InvalidCode):
        load_keyring(a).verify(cb)


def _flip(sig: str) -> str:
    raw = bytearray(base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4)))
    raw[0] ^= 1
    return base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()


def test_forged_and_tampered_codes_are_refused(keys_dir: Path) -> None:
    ring = load_keyring(keys_dir)
    tid = ticket_ids(new_id("or"), 1)[0]
    prefix, kid, _, sig = ring.sign(tid).split(".")
    other = ticket_ids(new_id("or"), 1)[0]
    bad = [
        f"{prefix}.{kid}.{other}.{sig}",  # signature moved to another ticket
        f"{prefix}.{kid}.{tid}.{_flip(sig)}",  # one bit flipped
        f"{prefix}.k9.{tid}.{sig}",  # unknown key id
        f"TK2.{kid}.{tid}.{sig}",  # other version
        f"{prefix}.{kid}.{tid}.",  # no signature
        f"{prefix}.{kid}.{tid}",  # too few parts
        f"{prefix}.{kid}.{tid}.{sig}.x",  # too many parts
        f"{prefix}.{kid}.../etc/passwd.{sig}",  # not an id
        f"{prefix}.{kid}.{tid}.{sig}" + "A" * 300,  # too long
        f"{prefix}.{kid}.{tid}.!!!",  # not base64
        tid,  # the bare ticket id
        "",
    ]
    for code in bad:
        with pytest.raises(InvalidCode):
            ring.verify(code)


def test_rotation_keeps_old_codes_valid(keys_dir: Path) -> None:
    ring = load_keyring(keys_dir)
    old_code = ring.sign(ticket_ids(new_id("or"), 1)[0])
    # When another process rotates the key
    assert rotate_key(keys_dir) == "k2"
    # Then this keyring picks it up, signs with it, and old codes still verify
    assert ring.refresh(force=True)
    assert ring.active_kid == "k2"
    new_code = ring.sign(ticket_ids(new_id("or"), 1)[0])
    assert new_code.split(".")[1] == "k2"
    assert ring.verify(old_code)[1] == "k1" and ring.verify(new_code)[1] == "k2"
    assert scanner(keys_dir).verify(old_code) and scanner(keys_dir).verify(new_code)
    assert not ring.refresh(force=True)  # nothing changed since


def test_retiring_a_key_invalidates_only_its_codes(keys_dir: Path) -> None:
    ring = load_keyring(keys_dir)
    old_code = ring.sign(ticket_ids(new_id("or"), 1)[0])
    rotate_key(keys_dir)
    ring.refresh(force=True)
    new_code = ring.sign(ticket_ids(new_id("or"), 1)[0])
    (keys_dir / "k1.pem").unlink()
    (keys_dir / "k1.pub").unlink()
    assert ring.refresh(force=True)
    with pytest.raises(InvalidCode):
        ring.verify(old_code)
    assert ring.verify(new_code)[1] == "k2"
    # And the next key id never reuses a retired one
    assert rotate_key(keys_dir) == "k3"


def test_refresh_is_throttled(keys_dir: Path) -> None:
    ring = load_keyring(keys_dir)
    ring.refresh(force=True)
    rotate_key(keys_dir)
    assert not ring.refresh(min_interval_s=3600)
    assert ring.refresh(force=True)


def test_private_keys_are_owner_only(keys_dir: Path) -> None:
    assert (keys_dir / "k1.pem").stat().st_mode & 0o077 == 0
