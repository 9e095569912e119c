"""Throw-away wallet credentials for the local stack and the tests, so the
whole wallet path runs without Apple's or Google's: a root CA standing in for
Apple's, a WWDR-like intermediate, a pass-type certificate under it, and an
RSA key standing in for a Google service account. Made once per folder
(``just up`` keeps them under ``.data/wallet``); nobody outside trusts them."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

PASS_TYPE_ID = "pass.dev.ticketry.tickets"  # noqa: S105 - a name, not a password
TEAM_ID = "DEVTEAM001"
GOOGLE_ISSUER_ID = "3388000000000000001"
GOOGLE_EMAIL = "wallet@ticketry-dev.iam.gserviceaccount.com"
# Files of a complete set; the last written, so its presence means the set is whole.
FILES = ("ca.pem", "wwdr.pem", "pass.pem", "pass.key", "google.pub", "google.key")


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _cert(
    subject: x509.Name, key: rsa.RSAPrivateKey, issuer: x509.Name, signer: rsa.RSAPrivateKey, *, ca: bool
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    usage = x509.KeyUsage(
        digital_signature=not ca, content_commitment=False, key_encipherment=False, data_encipherment=False,
        key_agreement=False, key_cert_sign=ca, crl_sign=ca, encipher_only=False, decipher_only=False,
    )  # fmt: skip
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(usage, critical=True)
        .sign(signer, hashes.SHA256())
    )


def _name(common: str, *extra: x509.NameAttribute[str]) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common), *extra])


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes, *, secret: bool = False) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if secret else 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def make_dev_wallet(folder: Path) -> None:
    """The credentials under ``folder``, unless a complete set is there already."""
    if all((folder / f).is_file() for f in FILES):
        return
    folder.mkdir(parents=True, exist_ok=True)
    root_key, wwdr_key, pass_key, google_key = _key(), _key(), _key(), _key()
    root_name = _name("Ticketry dev wallet root CA")
    wwdr_name = _name("Ticketry dev WWDR intermediate")
    root = _cert(root_name, root_key, root_name, root_key, ca=True)
    wwdr = _cert(wwdr_name, wwdr_key, root_name, root_key, ca=True)
    pass_name = _name(
        f"Pass Type ID: {PASS_TYPE_ID}",
        x509.NameAttribute(NameOID.USER_ID, PASS_TYPE_ID),
        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, TEAM_ID),
    )
    cert = _cert(pass_name, pass_key, wwdr_name, wwdr_key, ca=False)
    pem = serialization.Encoding.PEM
    _write(folder / "ca.pem", root.public_bytes(pem))
    _write(folder / "wwdr.pem", wwdr.public_bytes(pem))
    _write(folder / "pass.pem", cert.public_bytes(pem))
    _write(folder / "pass.key", _pem_key(pass_key), secret=True)
    public = google_key.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo)
    _write(folder / "google.pub", public)
    _write(folder / "google.key", _pem_key(google_key), secret=True)


def dev_wallet_env(folder: Path) -> dict[str, str]:
    """The wallet settings (``TICKETRY_WALLET_*``) for the credentials under
    ``folder``, made there first if missing."""
    make_dev_wallet(folder)
    return {
        "TICKETRY_WALLET_APPLE_CERTIFICATE": str(folder / "pass.pem"),
        "TICKETRY_WALLET_APPLE_KEY": str(folder / "pass.key"),
        "TICKETRY_WALLET_APPLE_WWDR": str(folder / "wwdr.pem"),
        "TICKETRY_WALLET_APPLE_PASS_TYPE_ID": PASS_TYPE_ID,
        "TICKETRY_WALLET_APPLE_TEAM_ID": TEAM_ID,
        "TICKETRY_WALLET_GOOGLE_ISSUER_ID": GOOGLE_ISSUER_ID,
        "TICKETRY_WALLET_GOOGLE_SERVICE_ACCOUNT_EMAIL": GOOGLE_EMAIL,
        "TICKETRY_WALLET_GOOGLE_KEY": str(folder / "google.key"),
    }
