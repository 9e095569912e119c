"""Wallet passes, without servers: the ``.pkpass`` zip and its manifest, its
signature as the real ``openssl smime`` judges it against the dev CA, the
venue's offset in ``relevantDate``, and the Google link's JWT."""

from __future__ import annotations

import base64
import hashlib
import io
import subprocess
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jwt
import orjson
import pytest
from cryptography.hazmat.primitives import serialization
from ticketry.codes import Keyring, load_keyring, rotate_key
from ticketry.documents import Event, Tier
from ticketry_api.adapters.readmodel import TicketOf
from ticketry_api.core.google_wallet import SAVE_URL, save_url
from ticketry_api.core.pkpass import build_pkpass
from ticketry_api.core.wallet import WalletTicket
from ticketry_api.wallet import Wallet, WalletSettings, wallet_ticket
from ticketry_devstack.walletca import dev_wallet_env

TICKET = WalletTicket(
    ticket_id="tk_0123456789abcdef0123_00000", order_id="or_0123456789abcdef0123", event_id="ev_00112233445566778899",
    event_name="Night of Tests", venue="Loopback Arena", starts_at=datetime(2027, 6, 1, 19, 30, tzinfo=UTC),
    doors_at=datetime(2027, 6, 1, 18, 30, tzinfo=UTC), timezone="Europe/Berlin", holder_name="Zoë Ångström",
    tier_name="Standard", code="TK2.k1.tk_0123456789abcdef0123_00000.ev_00112233445566778899.standard.c2ln",
)  # fmt: skip


@pytest.fixture(scope="module")
def creds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("wallet")
    dev_wallet_env(folder)
    return folder


@pytest.fixture(scope="module")
def wallet(creds: Path) -> Wallet:
    env = dev_wallet_env(creds)  # the set is there: read, not made again
    return Wallet.from_settings(
        WalletSettings(**{k.removeprefix("TICKETRY_WALLET_").lower(): v for k, v in env.items()})
    )


def files_of(pkpass: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(pkpass)) as z:
        return {name: z.read(name) for name in z.namelist()}


def openssl_verifies(folder: Path, manifest: bytes, signature: bytes, ca: Path) -> bool:
    """``openssl smime -verify`` of a detached DER signature over ``manifest``, trusting ``ca`` alone."""
    (folder / "manifest.json").write_bytes(manifest)
    (folder / "signature").write_bytes(signature)
    argv = ["openssl", "smime", "-verify", "-inform", "DER", "-binary", "-in", str(folder / "signature")]
    argv += ["-content", str(folder / "manifest.json"), "-CAfile", str(ca), "-purpose", "any", "-out", "/dev/null"]
    run = subprocess.run(argv, capture_output=True, check=False)
    return run.returncode == 0


def openssl(args: list[str], data: bytes) -> bytes:
    return subprocess.run(["openssl", *args], input=data, capture_output=True, check=True).stdout


def test_the_pass_holds_its_files_and_the_manifest_hashes_them(wallet: Wallet) -> None:
    assert wallet.apple is not None
    files = files_of(build_pkpass(TICKET, wallet.apple))
    assert {"pass.json", "manifest.json", "signature", "icon.png", "logo.png"} <= set(files)
    manifest = orjson.loads(files["manifest.json"])
    # Every file but the manifest and the signature, each by its SHA-1.
    assert set(manifest) == set(files) - {"manifest.json", "signature"}
    for name, digest in manifest.items():
        assert hashlib.sha1(files[name]).hexdigest() == digest, name  # noqa: S324
    for image in ("icon.png", "logo.png"):
        assert files[image].startswith(b"\x89PNG\r\n\x1a\n")


def test_the_pass_is_an_event_ticket_whose_qr_holds_the_code(wallet: Wallet) -> None:
    assert wallet.apple is not None
    doc = orjson.loads(files_of(build_pkpass(TICKET, wallet.apple))["pass.json"])
    assert doc["passTypeIdentifier"] == "pass.dev.ticketry.tickets" and doc["serialNumber"] == TICKET.ticket_id
    assert doc["barcodes"][0] == {
        "format": "PKBarcodeFormatQR", "message": TICKET.code, "messageEncoding": "iso-8859-1",
        "altText": TICKET.ticket_id,
    }  # fmt: skip
    # 19:30 UTC in June is 21:30 in Berlin (CEST, +02:00): the venue's clock, its offset written out.
    assert doc["relevantDate"] == "2027-06-01T21:30:00+02:00"
    fields = {f["key"]: f["value"] for part in doc["eventTicket"].values() for f in part}
    assert fields["event"] == "Night of Tests" and fields["venue"] == "Loopback Arena"
    assert fields["holder"] == "Zoë Ångström" and fields["tier"] == "Standard"
    assert fields["doors"] == "2027-06-01T20:30:00+02:00"


def test_openssl_accepts_the_signature_and_refuses_a_changed_pass(wallet: Wallet, creds: Path, tmp_path: Path) -> None:
    assert wallet.apple is not None
    files = files_of(build_pkpass(TICKET, wallet.apple))
    ca = creds / "ca.pem"
    assert openssl_verifies(tmp_path, files["manifest.json"], files["signature"], ca)
    # The signature carries the intermediate: trusting the root alone is enough (checked above),
    # and the signing time is among its signed attributes.
    printed = openssl(["pkcs7", "-inform", "DER", "-print_certs", "-noout"], files["signature"])
    assert b"Ticketry dev WWDR intermediate" in printed
    parsed = openssl(["cms", "-cmsout", "-print", "-inform", "DER"], files["signature"])
    assert b"signingTime" in parsed
    # A changed pass.json: its manifest (hashes made again) no longer matches the signature.
    changed = orjson.loads(files["pass.json"]) | {"serialNumber": "tk_ffffffffffffffffffff_00000"}
    manifest = orjson.loads(files["manifest.json"]) | {
        "pass.json": hashlib.sha1(orjson.dumps(changed)).hexdigest()  # noqa: S324
    }
    assert not openssl_verifies(tmp_path, orjson.dumps(manifest), files["signature"], ca)
    # A manifest changed by one byte.
    assert not openssl_verifies(tmp_path, files["manifest.json"].replace(b"0", b"1", 1), files["signature"], ca)


def test_a_signature_from_another_ca_is_refused(
    wallet: Wallet, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    assert wallet.apple is not None
    files = files_of(build_pkpass(TICKET, wallet.apple))
    other = tmp_path_factory.mktemp("other-wallet")
    dev_wallet_env(other)
    assert not openssl_verifies(tmp_path, files["manifest.json"], files["signature"], other / "ca.pem")


def decode(token: str, public: Any) -> dict[str, Any]:
    out: dict[str, Any] = jwt.decode(token, public, algorithms=["RS256"], audience="google")
    return out


def test_the_google_link_verifies_with_the_public_key_and_carries_the_ticket(wallet: Wallet, creds: Path) -> None:
    assert wallet.google is not None
    url = save_url(TICKET, wallet.google, now=1_700_000_000)
    assert url.startswith(SAVE_URL)
    token = url.removeprefix(SAVE_URL)
    public = serialization.load_pem_public_key((creds / "google.pub").read_bytes())
    claims = decode(token, public)
    assert claims["iss"] == "wallet@ticketry-dev.iam.gserviceaccount.com" and claims["typ"] == "savetowallet"
    (obj,) = claims["payload"]["eventTicketObjects"]
    issuer = wallet.google.issuer_id
    assert obj["id"] == f"{issuer}.{TICKET.ticket_id}" and obj["classId"] == f"{issuer}.{TICKET.event_id}"
    assert obj["barcode"] == {"type": "QR_CODE", "value": TICKET.code, "alternateText": TICKET.ticket_id}
    assert obj["ticketHolderName"] == TICKET.holder_name
    (cls,) = claims["payload"]["eventTicketClasses"]
    assert cls["id"] == obj["classId"] and cls["dateTime"]["start"] == "2027-06-01T21:30:00+02:00"
    # Another code put into the signed token is refused.
    head, _, sig = token.split(".")
    forged = orjson.dumps(claims).replace(TICKET.code.encode(), b"TK2.k1.forged")
    with pytest.raises(jwt.InvalidSignatureError):
        decode(f"{head}.{base64.urlsafe_b64encode(forged).rstrip(b'=').decode()}.{sig}", public)
    # The object id is the ticket's, whatever the moment: saving twice keeps one pass.
    again = decode(save_url(TICKET, wallet.google, now=1_750_000_000).removeprefix(SAVE_URL), public)
    assert again["payload"]["eventTicketObjects"][0]["id"] == obj["id"]


def test_the_wallet_code_is_the_code_the_ticket_was_issued_with(tmp_path: Path) -> None:
    """Signed again with the order's key after a rotation: the same string the PDF's QR holds."""
    keys = tmp_path / "keys"
    rotate_key(keys)
    ring: Keyring = load_keyring(keys)
    # Built without a store (no validation): only its fields are read.
    event = Event.model_construct(
        id="ev_00112233445566778899", organizer_id="org", name="Night", venue="Arena", capacity=10,
        starts_at=datetime(2027, 1, 10, 19, tzinfo=UTC), timezone="America/New_York", price_minor=100,
        currency="EUR", tiers=[Tier(id="standard", name="Stehplatz", price_minor=100)],
    )  # fmt: skip
    tid = "tk_0123456789abcdef0123_00003"
    issued = ring.sign(tid, event.id, "standard")
    old_kid = ring.active_kid
    rotate_key(keys)
    ring.refresh(force=True)
    assert ring.active_kid != old_kid
    t = TicketOf(id=tid, order_id="or_0123456789abcdef0123", owner_id="b", event_id=event.id, holder_name="Ada",
                 tier="standard", cancelled=False, key_id=old_kid)  # fmt: skip
    made = wallet_ticket(t, event, ring)
    assert made.code == issued
    assert made.tier_name == "Stehplatz"
    # January in New York: -05:00.
    assert made.starts().isoformat() == "2027-01-10T14:00:00-05:00"


def test_a_half_configured_wallet_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="TICKETRY_WALLET_APPLE_KEY"):
        WalletSettings(apple_certificate=Path("/x.pem"), apple_wwdr=Path("/w.pem"), apple_pass_type_id="pass.a.b",
                       apple_team_id="T1")  # fmt: skip
