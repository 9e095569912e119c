"""A buyer's email address (``ticketry_api.core.emails.check_email``), as a table."""

from __future__ import annotations

import pytest
from ticketry_api.core.emails import check_email


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        ("ada@example.com", "ada@example.com"),
        ("Ada.Lovelace+tickets@Example.COM", "Ada.Lovelace+tickets@example.com"),  # the local part keeps its case
        ("o'brien@mail.example.co.uk", "o'brien@mail.example.co.uk"),
        ("ada@xn--mnchen-3ya.de", "ada@xn--mnchen-3ya.de"),
        ("a" * 64 + "@example.com", "a" * 64 + "@example.com"),
        ("ada@" + "a" * 63 + ".com", "ada@" + "a" * 63 + ".com"),
        ("ada@1example.com", "ada@1example.com"),
    ],
)
def test_a_good_address_is_kept_with_its_domain_lower_cased(value: str, kept: str) -> None:
    assert check_email(value) == kept


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("", "not an email address"),
        ("ada", "not an email address"),
        ("ada@", "not an email address"),
        ("@example.com", "not an email address"),
        ("ada@example", "not an email address"),
        ("ada lovelace@example.com", "not an email address"),
        ("ada@exa mple.com", "not an email address"),
        ("ada@example.com\r\nBcc: eve@example.com", "not an email address"),
        ("ada@example.com\n", "not an email address"),
        ('"ada"@example.com', "not an email address"),
        ("ada(comment)@example.com", "not an email address"),
        ("<ada@example.com>", "not an email address"),
        ("ädä@example.com", "not an email address"),
        ("ada@exämple.com", "not an email address"),
        ("ada..l@example.com", "not an email address"),
        (".ada@example.com", "not an email address"),
        ("ada@-example.com", "not an email address"),
        ("ada@" + "a" * 64 + ".com", "not an email address"),  # a label has at most 63
        ("a" * 65 + "@example.com", "local part has at most 64"),
        ("ada@127.0.0.1", "not an IP address"),
        ("ada@" + ".".join(c * 62 for c in "abcd") + ".com", "at most 254"),  # 259 characters
    ],
)
def test_a_bad_address_is_refused_saying_why(value: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        check_email(value)
