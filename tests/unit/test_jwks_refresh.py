"""Refetching an identity provider's JWKS never blocks the event loop: one
fetch on a thread of its own, however many requests wait for it, against a
real HTTP server that holds its answer until the test lets it go."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from ticketry.auth import AuthError, JwtSettings, TokenVerifier, issue_token

from tests.helpers import eventually
from tests.idp import SlowIdp


@pytest.fixture
def idp() -> Iterator[SlowIdp]:
    server = SlowIdp()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def keys() -> tuple[rsa.RSAPrivateKey, rsa.RSAPrivateKey]:
    return tuple(rsa.generate_private_key(public_exponent=65537, key_size=2048) for _ in range(2))  # type: ignore[return-value]


def rs256(sub: str, key: rsa.RSAPrivateKey, kid: str) -> str:
    return issue_token(sub, "buyer", key=key, algorithm="RS256", kid=kid)


async def test_a_held_refetch_waits_off_the_loop_and_is_made_once(
    idp: SlowIdp, keys: tuple[rsa.RSAPrivateKey, rsa.RSAPrivateKey]
) -> None:
    old, new = keys
    idp.publish(("idp-1", old))
    verifier = TokenVerifier.from_settings(JwtSettings(jwt_algorithm="RS256", jwt_jwks_url=idp.url))
    assert verifier.remote is not None and idp.fetches == 1
    # Given the provider rotated to a new key and holds its next answer
    idp.publish(("idp-1", old), ("idp-2", new))
    idp.hold()
    verifier.remote.min_refresh_s = 0  # the throttle's own test is below
    # When 100 requests at once present tokens of the new key
    rotated = [asyncio.create_task(verifier.verify_async(rs256(f"b{i}", new, "idp-2"))) for i in range(100)]

    # Then while the provider holds the refetch, the loop runs on:
    async def holding() -> bool:
        return idp.held == 1

    await eventually(holding, "the provider holds the refetch")
    # a token of the known key verifies, and the 100 wait for the refetch
    assert (await verifier.verify_async(rs256("a", old, "idp-1"))).sub == "a"
    assert not any(t.done() for t in rotated)
    # And once the provider answers, all 100 verify after that one fetch
    idp.release()
    assert sorted(p.sub for p in await asyncio.gather(*rotated)) == sorted(f"b{i}" for i in range(100))
    assert idp.fetches == 2

    # And 100 made-up kids at once, a refresh allowed, make one fetch more, not 100
    verifier.remote.min_refresh_s = 30.0
    verifier.remote.tried_at = float("-inf")
    made_up = [verifier.verify_async(rs256("x", old, f"made-up-{i}")) for i in range(100)]
    refused = await asyncio.gather(*made_up, return_exceptions=True)
    assert all(isinstance(r, AuthError) for r in refused)
    assert idp.fetches == 3


async def test_a_stale_set_keeps_verifying_while_its_refresh_is_held_and_survives_its_failure(
    idp: SlowIdp, keys: tuple[rsa.RSAPrivateKey, rsa.RSAPrivateKey], caplog: pytest.LogCaptureFixture
) -> None:
    old, _ = keys
    idp.publish(("idp-1", old))
    verifier = TokenVerifier.from_settings(JwtSettings(jwt_algorithm="RS256", jwt_jwks_url=idp.url))
    assert verifier.remote is not None
    # Given a set due for a refresh, and a provider that holds, then fails, its answer
    verifier.remote.cache_s = verifier.remote.min_refresh_s = 0
    idp.status, idp.body = 500, b"upstream down"
    idp.hold()
    token = rs256("a", old, "idp-1")
    caplog.set_level(logging.WARNING, logger="ticketry.auth")
    # Then the known key verifies at once, the refresh still under way
    assert (await verifier.verify_async(token)).sub == "a"

    async def holding() -> bool:
        return idp.held == 1

    await eventually(holding, "the provider holds the refresh")
    assert not [r for r in caplog.records if "JWKS refresh failed" in r.message]
    # And when the refresh fails, the last good keys stay
    idp.release()

    async def failed() -> bool:
        return any("JWKS refresh failed" in r.message for r in caplog.records)

    await eventually(failed, "the failed refresh is logged")
    verifier.remote.cache_s = 300.0
    assert (await verifier.verify_async(token)).sub == "a"
