"""The ticket version a ``.pkpass`` notes in its zip's comment: what tells a
kept pass current or stale (a re-issue) without opening it; the pass stays a
whole zip whose files and manifest are unchanged by it."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import pytest
from ticketry_api.core.pkpass import PassIssuer, build_pkpass, pass_version
from ticketry_api.wallet import Wallet, WalletSettings
from ticketry_devstack.walletca import dev_wallet_env

from tests.unit.test_wallet import TICKET, files_of


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> PassIssuer:
    env = dev_wallet_env(tmp_path_factory.mktemp("wallet"))
    settings: dict[str, Any] = {k.removeprefix("TICKETRY_WALLET_").lower(): v for k, v in env.items()}
    apple = Wallet.from_settings(WalletSettings(**settings)).apple
    assert apple is not None
    return apple


@pytest.mark.parametrize("version", [0, 1, 3, 12345])
def test_a_pass_notes_the_version_it_was_built_from(issuer: PassIssuer, version: int) -> None:
    pkpass = build_pkpass(TICKET, issuer, version)
    assert pass_version(pkpass) == version
    with zipfile.ZipFile(io.BytesIO(pkpass)) as z:
        assert z.testzip() is None
        assert sorted(z.namelist()) == sorted(files_of(build_pkpass(TICKET, issuer)).keys())


def test_a_pass_without_a_noted_version_or_not_a_zip_has_none(issuer: PassIssuer, tmp_path: Path) -> None:
    # A pass kept before versions were noted: the same files, no comment.
    plain = io.BytesIO()
    with zipfile.ZipFile(plain, "w") as z:
        for name, data in files_of(build_pkpass(TICKET, issuer, 2)).items():
            z.writestr(name, data)
    assert pass_version(plain.getvalue()) is None
    for junk in (b"", b"PK\x05\x06", b"not a zip at all", build_pkpass(TICKET, issuer, 2)[:-3]):
        assert pass_version(junk) is None
    other = io.BytesIO()
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("a", b"b")
        z.comment = b"ticketry ticket version x1"
    assert pass_version(other.getvalue()) is None
