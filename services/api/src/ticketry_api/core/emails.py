"""A buyer's email address: what an order may carry (pure).

Deliberately narrower than RFC 5321: an ASCII dot-atom local part and a
domain of letters, digits and hyphens with at least one dot (an
internationalised domain in its ``xn--`` form). Nothing that could end a
header line, quote or comment gets through, so the address goes into the
``To:`` header and the SMTP ``RCPT TO`` as it is.
"""

from __future__ import annotations

import re

MAX_LENGTH = 254  # RFC 5321's path limit, less the angle brackets
MAX_LOCAL = 64
_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
EMAIL_PATTERN = rf"^{_ATOM}(?:\.{_ATOM})*@(?:{_LABEL}\.)+{_LABEL}$"
_EMAIL = re.compile(EMAIL_PATTERN, re.ASCII)


def check_email(value: str) -> str:
    """``value`` with its domain lower-cased, or ValueError saying what is wrong."""
    if len(value) > MAX_LENGTH:
        raise ValueError(f"an email address has at most {MAX_LENGTH} characters")
    if _EMAIL.fullmatch(value) is None:
        raise ValueError("not an email address such as ada@example.com (ASCII, no spaces, a domain with a dot)")
    local, _, domain = value.rpartition("@")
    if len(local) > MAX_LOCAL:
        raise ValueError(f"an email address's local part has at most {MAX_LOCAL} characters")
    if domain.rsplit(".", 1)[1].isdigit():
        raise ValueError("an email address's domain is a name, not an IP address")
    return f"{local}@{domain.lower()}"
