"""Security settings that differ from the defaults, on a second api process of
the same stack: RS256 tokens from a JWKS file, low per-user rate limits, and a
CORS allow-list. (The session stack keeps generous limits so no other test or
benchmark ever meets them.)"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from ticketry.auth import Role, issue_token
from ticketry.settings import DEV_JWT_SECRET
from ticketry_api.middleware.security import CorsSettings
from ticketry_devstack.procs import Proc, Stack, free_port, tool, wait_port

from tests.helpers import bearer, checkin_list, create_event, place_order

pytestmark = pytest.mark.e2e

ALLOWED_ORIGIN = "https://tickets.example"
LIMIT = 3  # orders, check-ins, cancels and reads per user and minute
TICKETS = 10  # tickets per buyer and minute
PROBLEM = "application/problem+json"


@dataclass
class StrictApi:
    url: str
    key: rsa.RSAPrivateKey

    def token(self, sub: str, role: Role, kid: str = "idp-1", org: str | None = None) -> str:
        return issue_token(sub, role, key=self.key, algorithm="RS256", kid=kid, org=org)


@pytest.fixture(scope="module")
def strict_api(stack: Stack) -> Iterator[StrictApi]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = {**json.loads(RSAAlgorithm.to_jwk(key.public_key())), "kid": "idp-1", "alg": "RS256", "use": "sig"}
    jwks = stack.data_dir / "jwks.json"
    jwks.write_text(json.dumps({"keys": [jwk]}))
    port = free_port()
    env = stack.service_env(
        {
            "TICKETRY_API_PORT": str(port),
            "TICKETRY_RUN_PROJECTOR": "0",
            "TICKETRY_JWT_ALGORITHM": "RS256",
            "TICKETRY_JWT_JWKS_FILE": str(jwks),
            "TICKETRY_RATE_ORDERS_PER_MIN": str(LIMIT),
            "TICKETRY_RATE_CHECKINS_PER_MIN": str(LIMIT),
            "TICKETRY_RATE_TICKETS_PER_MIN": str(TICKETS),
            "TICKETRY_RATE_CANCELS_PER_MIN": str(LIMIT),
            "TICKETRY_RATE_READS_PER_MIN": str(LIMIT),
            "TICKETRY_CORS_ORIGINS": ALLOWED_ORIGIN,
        }
    )
    proc = Proc("api-strict", [tool("ticketry-api")], env, stack.data_dir / "logs" / "api-strict.log").start()
    try:
        wait_port(port, 60, proc.popen)
        yield StrictApi(f"http://127.0.0.1:{port}", key)
    finally:
        proc.stop()


@pytest.fixture
async def sapi(strict_api: StrictApi) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=strict_api.url, timeout=60) as client:
        yield client


async def test_rs256_tokens_from_jwks(sapi: httpx.AsyncClient, strict_api: StrictApi) -> None:
    org = strict_api.token("org-rs", "organizer")
    event = await create_event(sapi, org)
    assert (await sapi.get(f"/v1/events/{event['id']}", headers=bearer(org))).status_code == 200
    for bad in (
        issue_token("org-rs", "organizer", key=DEV_JWT_SECRET),  # HS256, the default's kind
        strict_api.token("org-rs", "organizer", kid="idp-unknown"),
        issue_token("org-rs", "organizer", key=strict_api.key, algorithm="RS256"),  # no kid
        issue_token("org-rs", "organizer", key=strict_api.key, algorithm="RS256", kid="idp-1", ttl_s=-600),
    ):
        r = await sapi.get(f"/v1/events/{event['id']}", headers=bearer(bad))
        assert r.status_code == 401, r.text


async def test_orders_are_rate_limited_per_user(sapi: httpx.AsyncClient, strict_api: StrictApi) -> None:
    org, buyer, other = (
        strict_api.token("org-rl", "organizer"), strict_api.token("buyer-rl", "buyer"),
        strict_api.token("buyer-rl-2", "buyer"),
    )  # fmt: skip
    event = await create_event(sapi, org)
    # Given a limit of LIMIT orders a minute
    for _ in range(LIMIT):
        assert (await place_order(sapi, buyer, event["id"], 1)).status_code == 202
    # When the buyer orders once more
    r = await place_order(sapi, buyer, event["id"], 1)
    # Then 429 with a Retry-After, and another buyer is not affected
    assert r.status_code == 429, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert 1 <= int(r.headers["retry-after"]) <= 60
    assert (await place_order(sapi, other, event["id"], 1)).status_code == 202
    sold = (await sapi.get(f"/v1/events/{event['id']}", headers=bearer(org))).json()["sold"]
    assert sold == LIMIT + 1  # the refused order took nothing


async def test_checkins_are_rate_limited_per_scanner(sapi: httpx.AsyncClient, strict_api: StrictApi) -> None:
    staff, other = (
        strict_api.token("staff-rl", "staff", org="org-rl"),
        strict_api.token("staff-rl-2", "staff", org="org-rl"),
    )
    body = {"code": "TK1.k1.tk_00000000000000000000.AAAA", "list_id": "cl_" + "0" * 20}
    statuses = [(await sapi.post("/v1/checkins", json=body, headers=bearer(staff))).status_code for _ in range(5)]
    assert statuses == [404] * LIMIT + [429] * (5 - LIMIT)
    assert (await sapi.post("/v1/checkins", json=body, headers=bearer(other))).status_code == 404


def assert_rate_refusal(r: httpx.Response) -> None:
    assert r.status_code == 429, r.text
    assert r.headers["content-type"].startswith(PROBLEM) and r.json()["status"] == 429
    assert 1 <= int(r.headers["retry-after"]) <= 60


async def test_tickets_are_rate_limited_per_buyer(sapi: httpx.AsyncClient, strict_api: StrictApi) -> None:
    org, buyer, other = (
        strict_api.token("org-tk", "organizer"), strict_api.token("buyer-tk", "buyer"),
        strict_api.token("buyer-tk-2", "buyer"),
    )  # fmt: skip
    event = await create_event(sapi, org, capacity=100)
    # Given a limit of TICKETS tickets a minute, of which one order took all but one
    assert (await place_order(sapi, buyer, event["id"], TICKETS - 1)).status_code == 202
    # When the same buyer orders two more, in their second order of the minute
    r = await place_order(sapi, buyer, event["id"], 2)
    # Then 429 with a Retry-After (the order limit is not what refused it), and
    # another buyer is not affected
    assert_rate_refusal(r)
    assert f"{TICKETS} tickets" in r.json()["detail"]
    assert (await place_order(sapi, other, event["id"], TICKETS)).status_code == 202
    sold = (await sapi.get(f"/v1/events/{event['id']}", headers=bearer(org))).json()["sold"]
    assert sold == 2 * TICKETS - 1  # the refused order took nothing


async def test_cancels_are_rate_limited_per_user(sapi: httpx.AsyncClient, strict_api: StrictApi) -> None:
    buyer, other = strict_api.token("buyer-cx", "buyer"), strict_api.token("buyer-cx-2", "buyer")
    unknown = "/v1/orders/or_" + "0" * 20 + "/cancel"
    answers = [await sapi.post(unknown, headers=bearer(buyer)) for _ in range(LIMIT + 2)]
    assert [r.status_code for r in answers] == [404] * LIMIT + [429] * 2
    assert_rate_refusal(answers[-1])
    assert (await sapi.post(unknown, headers=bearer(other))).status_code == 404


async def test_reads_are_rate_limited_per_user(sapi: httpx.AsyncClient, strict_api: StrictApi) -> None:
    org = strict_api.token("org-rd", "organizer")
    event = await create_event(sapi, org)
    eid, lid = event["id"], await checkin_list(sapi, org, event["id"])
    paths = [
        "/v1/events", f"/v1/events/{eid}", f"/v1/events/{eid}/orders", f"/v1/events/{eid}/checkin-lists",
        f"/v1/checkin-lists/{lid}", f"/v1/events/{eid}/revocations",
    ]  # fmt: skip
    for n, path in enumerate(paths):
        # Each read by an admin of its own (a fresh window; admin may read them all)
        reader = bearer(strict_api.token(f"admin-rd-{n}", "admin"))
        answers = [await sapi.get(path, headers=reader) for _ in range(LIMIT + 1)]
        assert [r.status_code for r in answers] == [200] * LIMIT + [429], (path, answers[-1].text)
        assert_rate_refusal(answers[-1])
    # The organiser's own reads are counted apart from theirs
    assert (await sapi.get(f"/v1/events/{eid}", headers=bearer(org))).status_code == 200


async def test_cors_only_for_configured_origins(sapi: httpx.AsyncClient, strict_api: StrictApi) -> None:
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"}
    ok = await sapi.options("/v1/orders", headers={"Origin": ALLOWED_ORIGIN, **preflight})
    assert ok.status_code == 200
    assert ok.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    assert "access-control-allow-credentials" not in ok.headers
    assert ok.headers["x-content-type-options"] == "nosniff"
    evil = await sapi.options("/v1/orders", headers={"Origin": "https://evil.example", **preflight})
    assert "access-control-allow-origin" not in evil.headers
    r = await sapi.get("/healthz", headers={"Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in r.headers
    r = await sapi.get("/healthz", headers={"Origin": ALLOWED_ORIGIN})
    assert r.headers["access-control-allow-origin"] == ALLOWED_ORIGIN


@pytest.mark.parametrize("value", ["*", "tickets.example", "https://a.example,*"])
def test_cors_wildcards_are_refused(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TICKETRY_CORS_ORIGINS", value)
    with pytest.raises(ValueError, match="exact"):
        CorsSettings()


# -- an api whose tokens come from an identity provider's JWKS URL ------------

IDP_ISSUER = "https://idp.tickets.example"
IDP_AUDIENCE = "ticketry-api"


@dataclass
class IdpApi:
    url: str
    key: rsa.RSAPrivateKey
    fetches: list[str]

    def token(
        self, sub: str, role: Role, *, kid: str = "idp-1", key: rsa.RSAPrivateKey | None = None, **claims: object
    ) -> str:
        """A provider's token; a claim given as None is left out."""
        now = int(time.time())
        body = {"sub": sub, "role": role, "iat": now, "exp": now + 600, "iss": IDP_ISSUER, "aud": IDP_AUDIENCE}
        payload = {k: v for k, v in {**body, **claims}.items() if v is not None}
        return jwt.encode(payload, key or self.key, "RS256", headers={"kid": kid})


@pytest.fixture(scope="module")
def idp_api(stack: Stack) -> Iterator[IdpApi]:
    # A real HTTP server on loopback publishes the provider's keys.
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = {**json.loads(RSAAlgorithm.to_jwk(key.public_key())), "kid": "idp-1", "alg": "RS256", "use": "sig"}
    body = json.dumps({"keys": [jwk]}).encode()
    fetches: list[str] = []

    class Jwks(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fetches.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Jwks)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = free_port()
    env = stack.service_env(
        {
            "TICKETRY_API_PORT": str(port),
            "TICKETRY_RUN_PROJECTOR": "0",
            "TICKETRY_JWT_ALGORITHM": "RS256",
            "TICKETRY_JWT_JWKS_URL": f"http://127.0.0.1:{server.server_address[1]}/.well-known/jwks.json",
            "TICKETRY_JWT_ISSUER": IDP_ISSUER,
            "TICKETRY_JWT_AUDIENCE": IDP_AUDIENCE,
        }
    )
    proc = Proc("api-idp", [tool("ticketry-api")], env, stack.data_dir / "logs" / "api-idp.log").start()
    try:
        wait_port(port, 60, proc.popen)
        yield IdpApi(f"http://127.0.0.1:{port}", key, fetches)
    finally:
        proc.stop()
        server.shutdown()
        server.server_close()


async def test_tokens_from_a_jwks_url_with_issuer_and_audience(idp_api: IdpApi) -> None:
    async with httpx.AsyncClient(base_url=idp_api.url, timeout=60) as api:
        # Given an api that fetched its keys from the provider at start
        assert idp_api.fetches == ["/.well-known/jwks.json"]
        org = idp_api.token("org-idp", "organizer")
        # Then the provider's tokens work
        event = await create_event(api, org)
        assert (await api.get(f"/v1/events/{event['id']}", headers=bearer(org))).status_code == 200
        # And tokens of another issuer or audience, without them, or of an unknown key do not
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        for bad in (
            idp_api.token("org-idp", "organizer", iss="https://evil.example"),
            idp_api.token("org-idp", "organizer", aud="another-service"),
            idp_api.token("org-idp", "organizer", iss=None),
            idp_api.token("org-idp", "organizer", aud=None),
            idp_api.token("org-idp", "organizer", key=other),  # the right kid, another key
            issue_token("org-idp", "organizer", key=DEV_JWT_SECRET),
        ):
            r = await api.get(f"/v1/events/{event['id']}", headers=bearer(bad))
            assert r.status_code == 401, r.text
        # (one refresh at most for the unknown kids, throttled: the provider is asked rarely)
        r = await api.get(f"/v1/events/{event['id']}", headers=bearer(idp_api.token("o", "organizer", kid="nope")))
        assert r.status_code == 401 and len(idp_api.fetches) <= 2
