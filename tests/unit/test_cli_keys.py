"""``ticketryctl keys rotate`` makes a new key active; old codes keep verifying."""

from __future__ import annotations

from pathlib import Path

import pytest
from ticketry.codes import load_keyring
from ticketry_api.ctl import main

TICKET = "tk_" + "1" * 20 + "_00000"


def test_keys_rotate_keeps_old_codes_valid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TICKETRY_DEV_MODE", "1")
    monkeypatch.setenv("TICKETRY_KEYS_DIR", str(tmp_path))
    with pytest.raises(SystemExit) as first:
        main(["keys", "rotate"])
    assert first.value.code == 0
    old = load_keyring(tmp_path)
    code = old.sign(TICKET)
    with pytest.raises(SystemExit):
        main(["keys", "rotate"])
    new = load_keyring(tmp_path)
    assert new.active_kid != old.active_kid
    assert new.verify(code) == (TICKET, old.active_kid)
    assert new.sign(TICKET).split(".")[1] == new.active_kid
