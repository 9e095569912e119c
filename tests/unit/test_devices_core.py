"""The pure rules of scanner devices (ticketry_api.core.devices): pairing
codes as people type them, device secrets and the token's scope."""

from __future__ import annotations

from ticketry_api.core import devices


def test_a_pairing_code_is_read_however_it_is_typed() -> None:
    code = devices.new_pairing_code()
    assert len(code) == devices.CODE_LENGTH and devices.normalised(code) == code
    shown = devices.shown(code)
    assert shown.count("-") == 2 and devices.normalised(shown) == code
    assert devices.normalised(f" {shown.lower()} ") == code
    assert devices.normalised("7KQ2-M9XD-4HRO") == devices.normalised("7kq2 m9xd 4hr0")  # O read as 0
    assert devices.normalised("7KQ2-M9XD-4HRI") == "7KQ2M9XD4HR1"  # I and L read as 1
    for bad in ("", "7KQ2-M9XD", "7KQ2-M9XD-4HRTX", "7KQ2-M9XD-4HR!", "7KQ2-M9XD-4HRU"):
        assert devices.normalised(bad) is None, bad


def test_a_device_secret_names_its_device_and_matches_only_its_digest() -> None:
    secret = devices.new_secret("dv_0123456789abcdef0123")
    assert devices.device_of_secret(secret) == "dv_0123456789abcdef0123"
    kept = devices.digest(secret)
    assert devices.secret_matches(secret, kept)
    assert not devices.secret_matches(secret[:-1] + ("A" if secret[-1] != "A" else "B"), kept)
    assert not devices.secret_matches(secret, None)  # never paired
    for bad in ("", "dvs_dv_nope.x", "dv_0123456789abcdef0123", secret + "x"):
        assert devices.device_of_secret(bad) is None, bad


def test_the_scope_names_the_device_and_its_list() -> None:
    scope = devices.scope("dv_0123456789abcdef0123", "cl_0123456789abcdef0123")
    assert devices.scope_parts(scope) == ("dv_0123456789abcdef0123", "cl_0123456789abcdef0123")
    for other in (None, "", "order:or_0123456789abcdef0123", "openid profile", scope + "x"):
        assert devices.scope_parts(other) is None, other
