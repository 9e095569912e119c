"""A slow identity provider delays no other request: while the api's refetch of
the provider's keys is held (as a provider answering in 3 s, or never), the api
answers `/healthz` and the requests of known keys as it did before, and the
request that needs the new key waits for that one fetch."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from ticketry_devstack.procs import Stack, free_port

from tests.helpers import bearer, create_event, eventually, start_api_of_its_own
from tests.idp import SlowIdp

pytestmark = pytest.mark.e2e

HEALTH_PROBES = 20


@dataclass
class IdpApi:
    url: str
    idp: SlowIdp


def idp_token(sub: str, key: rsa.RSAPrivateKey, kid: str) -> str:
    now = int(time.time())
    return jwt.encode(
        {"sub": sub, "role": "organizer", "iat": now, "exp": now + 600}, key, "RS256", headers={"kid": kid}
    )


@pytest.fixture(scope="module")
def keys() -> tuple[rsa.RSAPrivateKey, rsa.RSAPrivateKey]:
    return tuple(rsa.generate_private_key(public_exponent=65537, key_size=2048) for _ in range(2))  # type: ignore[return-value]


@pytest.fixture(scope="module")
def idp_api(stack: Stack, keys: tuple[rsa.RSAPrivateKey, rsa.RSAPrivateKey]) -> Iterator[IdpApi]:
    idp = SlowIdp()
    idp.publish(("idp-1", keys[0]))
    port = free_port()
    extra = {
        "TICKETRY_RUN_PROJECTOR": "0",
        "TICKETRY_JWT_ALGORITHM": "RS256",
        "TICKETRY_JWT_JWKS_URL": idp.url,
        # a refetch allowed at once, so the test need not wait out the default 30 s
        "TICKETRY_JWT_JWKS_MIN_REFRESH_S": "0.001",
    }
    proc = start_api_of_its_own(stack, "api-slow-idp", port, extra)
    try:
        yield IdpApi(f"http://127.0.0.1:{port}", idp)
    finally:
        proc.stop()
        idp.stop()


async def _health_latencies(api: httpx.AsyncClient) -> list[float]:
    took = []
    for _ in range(HEALTH_PROBES):
        began = time.perf_counter()
        assert (await api.get("/healthz")).status_code == 200
        took.append(time.perf_counter() - began)
    return took


async def test_a_held_key_refetch_delays_neither_healthz_nor_known_keys(
    idp_api: IdpApi, keys: tuple[rsa.RSAPrivateKey, rsa.RSAPrivateKey]
) -> None:
    old, new = keys
    idp = idp_api.idp
    async with httpx.AsyncClient(base_url=idp_api.url, timeout=60) as api:
        org = idp_token("org-slow-idp", old, "idp-1")
        event = await create_event(api, org)
        before = await _health_latencies(api)
        # Given the provider rotated to a new key and holds its next answer
        idp.publish(("idp-1", old), ("idp-2", new))
        idp.hold()
        # When a token of the new key arrives, the api refetches the keys (and waits for them)
        rotated = asyncio.create_task(
            api.get(f"/v1/events/{event['id']}", headers=bearer(idp_token("org-slow-idp", new, "idp-2")))
        )

        async def holding() -> bool:
            return idp.held == 1

        await eventually(holding, "the provider holds the refetch")
        # Then while it is held, /healthz answers every time and a known key's request too:
        # were the fetch on the event loop, none would answer before the release below
        during = await _health_latencies(api)
        assert (await api.get(f"/v1/events/{event['id']}", headers=bearer(org))).status_code == 200
        assert idp.held == 1 and not rotated.done()
        print(
            f"/healthz while the provider holds: max {max(during) * 1000:.1f} ms "
            f"(before: max {max(before) * 1000:.1f} ms)"
        )
        # And once the provider answers, the new key's request is served after that one fetch
        idp.release()
        assert (await rotated).status_code == 200
        assert idp.fetches == 2
