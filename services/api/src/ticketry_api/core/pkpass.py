"""An Apple Wallet pass (``.pkpass``) of a ticket, built in memory.

A pass is a zip of ``pass.json`` (an ``eventTicket``), its images,
``manifest.json`` (the SHA-1 of every other file) and ``signature``: a
detached PKCS#7 signature (DER) over the manifest, made with the pass-type
certificate's key and carrying Apple's WWDR intermediate and the signing time,
which Wallet checks before it shows the pass. Nothing here reads a file or a
clock: the certificate, key and time are given.
"""

from __future__ import annotations

import hashlib
import io
import struct
import zipfile
import zlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import Encoding, pkcs7

from ticketry_api.core.wallet import WalletTicket

MEDIA_TYPE = "application/vnd.apple.pkpass"
# The zip's comment names the ticket version a pass was built from, so a kept
# pass is told current or stale without opening it (Wallet ignores the comment).
_VERSION_COMMENT = b"ticketry ticket version "
_END_OF_DIRECTORY = b"PK\x05\x06"  # its record: 22 bytes, the comment's length at 20, then the comment


@dataclass(frozen=True)
class PassIssuer:
    """Who issues the passes (Apple's names for them) and the key that signs."""

    pass_type_id: str  # pass.com.example.tickets: the certificate's UID
    team_id: str  # the Apple developer team
    organization_name: str
    certificate: x509.Certificate  # the pass-type certificate
    key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
    intermediates: tuple[x509.Certificate, ...]  # Apple's WWDR intermediate


def _png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A PNG of one colour (8-bit RGB), made without an image library."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = b"\x00" + bytes(rgb) * width  # filter type 0, then the pixels
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(row * height, 9))
        + chunk(b"IEND", b"")
    )


_BRAND = (0x1F, 0x2A, 0x44)
# Wallet needs an icon (29 pt, and @2x for retina screens); the logo tops the pass.
IMAGES: dict[str, bytes] = {
    "icon.png": _png(29, 29, _BRAND),
    "icon@2x.png": _png(58, 58, _BRAND),
    "logo.png": _png(160, 50, _BRAND),
    "logo@2x.png": _png(320, 100, _BRAND),
}


def _field(key: str, label: str, value: str, **extra: Any) -> dict[str, Any]:
    return {"key": key, "label": label, "value": value, **extra}


def _date_field(key: str, label: str, at: datetime) -> dict[str, Any]:
    # ignoresTimeZone: shown at the venue's clock, wherever the phone is.
    return _field(key, label, at.isoformat(), dateStyle="PKDateStyleMedium", timeStyle="PKDateStyleShort",
                  ignoresTimeZone=True)  # fmt: skip


def pass_json(t: WalletTicket, issuer: PassIssuer) -> dict[str, Any]:
    """The pass's ``pass.json``: an event ticket whose QR holds the ticket's code."""
    return {
        "formatVersion": 1,
        "passTypeIdentifier": issuer.pass_type_id,
        "teamIdentifier": issuer.team_id,
        "organizationName": issuer.organization_name,
        "serialNumber": t.ticket_id,
        "description": f"Ticket: {t.event_name}",
        # The lock screen offers the pass around this time: the start, at the venue's offset.
        "relevantDate": t.starts().isoformat(),
        "barcodes": [
            {"format": "PKBarcodeFormatQR", "message": t.code, "messageEncoding": "iso-8859-1", "altText": t.ticket_id}
        ],
        "backgroundColor": "rgb(31, 42, 68)",
        "foregroundColor": "rgb(255, 255, 255)",
        "labelColor": "rgb(190, 200, 220)",
        "eventTicket": {
            "primaryFields": [_field("event", "EVENT", t.event_name)],
            "secondaryFields": [_field("venue", "VENUE", t.venue), _date_field("starts", "STARTS", t.starts())],
            "auxiliaryFields": [
                _field("holder", "HOLDER", t.holder_name),
                _field("tier", "TIER", t.tier_name),
                _date_field("doors", "DOORS", t.doors()),
            ],
            "backFields": [_field("ticket", "TICKET", t.ticket_id), _field("order", "ORDER", t.order_id)],
        },
    }


def manifest(files: dict[str, bytes]) -> bytes:
    """``manifest.json``: every file's SHA-1 (hex), as Wallet checks them."""
    # SHA-1 is what the pass format names; it guards integrity under the signature, not secrecy.
    digests = {name: hashlib.sha1(data).hexdigest() for name, data in sorted(files.items())}  # noqa: S324
    return orjson.dumps(digests, option=orjson.OPT_INDENT_2)


def signature(manifest_json: bytes, issuer: PassIssuer) -> bytes:
    """A detached PKCS#7 signature (DER) over ``manifest_json``, with the
    intermediates and the signed attributes (the signing time among them)."""
    builder = pkcs7.PKCS7SignatureBuilder().set_data(manifest_json)
    builder = builder.add_signer(issuer.certificate, issuer.key, hashes.SHA256())
    for cert in issuer.intermediates:
        builder = builder.add_certificate(cert)
    return builder.sign(Encoding.DER, [pkcs7.PKCS7Options.DetachedSignature, pkcs7.PKCS7Options.Binary])


def build_pkpass(t: WalletTicket, issuer: PassIssuer, version: int = 0) -> bytes:
    """The ``.pkpass`` of ``t`` (at the ticket's ``version``): a zip of the
    pass, its images, manifest and signature."""
    files = {"pass.json": orjson.dumps(pass_json(t, issuer), option=orjson.OPT_INDENT_2), **IMAGES}
    man = manifest(files)
    files |= {"manifest.json": man, "signature": signature(man, issuer)}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.comment = _VERSION_COMMENT + str(version).encode()
    return buf.getvalue()


def pass_version(pkpass: bytes) -> int | None:
    """The ticket version ``pkpass`` was built from (its zip's comment); None
    for a pass without one (built before versions were noted) or not a zip."""
    at = pkpass.rfind(_END_OF_DIRECTORY, max(0, len(pkpass) - 22 - 0xFFFF))
    if at < 0 or len(pkpass) < at + 22:
        return None
    comment = pkpass[at + 22 : at + 22 + int.from_bytes(pkpass[at + 20 : at + 22], "little")]
    number = comment.removeprefix(_VERSION_COMMENT)
    return int(number) if comment.startswith(_VERSION_COMMENT) and number.isdigit() else None
