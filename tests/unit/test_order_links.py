"""Order links (the token of a buyer's ``status_page_url``): good for one order
only, and never as a bearer token; a bearer token is never a link."""

from __future__ import annotations

import time

import jwt
import pytest
from ticketry.auth import (
    ORDER_LINK_AUDIENCE,
    ORDER_SCOPE,
    AuthError,
    TokenVerifier,
    issue_order_link,
    issue_token,
    order_link_key,
    verify_link,
)

SECRET = "a-test-secret-that-is-long-enough-for-hs256-and-even-for-hs512-xyz"
ORDER = "or_0123456789abcdef0123"
OTHER = "or_fedcba9876543210fedc"


def test_a_link_speaks_for_its_buyer_on_its_order_only() -> None:
    token = issue_order_link(ORDER, "alice", secret=SECRET, ttl_s=86_400)
    who = verify_link(token, ORDER_SCOPE + ORDER, secret=SECRET)
    assert (who.sub, who.role, who.scope) == ("alice", "buyer", f"order:{ORDER}")
    assert who.may_use_order(ORDER) and not who.may_use_order(OTHER)
    with pytest.raises(AuthError):
        verify_link(token, ORDER_SCOPE + OTHER, secret=SECRET)


def test_a_link_is_no_bearer_token_and_a_bearer_token_is_no_link() -> None:
    link = issue_order_link(ORDER, "alice", secret=SECRET, ttl_s=86_400)
    with pytest.raises(AuthError):
        TokenVerifier("HS256", key=SECRET).verify(link)
    bearer = issue_token("alice", "buyer", key=SECRET)
    with pytest.raises(AuthError):
        verify_link(bearer, ORDER_SCOPE + ORDER, secret=SECRET)
    # Even the link's own claims, signed with the bearer key, are no link (a key of its own)...
    claims = jwt.decode(link, order_link_key(SECRET), algorithms=["HS256"], audience=ORDER_LINK_AUDIENCE)
    with pytest.raises(AuthError):
        verify_link(jwt.encode(claims, SECRET, "HS256"), ORDER_SCOPE + ORDER, secret=SECRET)
    # ...and a bearer token that names the audience is refused by bearer verification.
    with pytest.raises(AuthError):
        TokenVerifier("HS256", key=SECRET).verify(jwt.encode(claims, SECRET, "HS256"))


@pytest.mark.parametrize(
    "over",
    [
        {"exp": int(time.time()) - 3600},
        {"role": "admin"},
        {"scope": f"order:{OTHER}"},
        {"scope": None},
        {"aud": "someone-else"},
    ],
)
def test_an_altered_or_expired_link_is_refused(over: dict[str, object]) -> None:
    claims = jwt.decode(
        issue_order_link(ORDER, "alice", secret=SECRET, ttl_s=86_400),
        order_link_key(SECRET),
        algorithms=["HS256"],
        audience=ORDER_LINK_AUDIENCE,
    )
    claims.update(over)
    claims = {k: v for k, v in claims.items() if v is not None}
    with pytest.raises(AuthError):
        verify_link(jwt.encode(claims, order_link_key(SECRET), "HS256"), ORDER_SCOPE + ORDER, secret=SECRET)
    with pytest.raises(AuthError):  # and the right claims under another secret
        verify_link(issue_order_link(ORDER, "alice", secret=SECRET + "x", ttl_s=60), ORDER_SCOPE + ORDER, secret=SECRET)


def test_an_identity_providers_oauth_scope_limits_nothing() -> None:
    token = jwt.encode(
        {"sub": "bob", "role": "buyer", "exp": int(time.time()) + 60, "scope": "openid profile"}, SECRET, "HS256"
    )
    who = TokenVerifier("HS256", key=SECRET).verify(token)
    assert who.may_use_order(ORDER) and who.may_use_order(OTHER)
