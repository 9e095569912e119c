"""Token verification: pinned algorithm, required claims, RS256/JWKS, settings."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from ticketry.auth import (
    ORDER_LINK_AUDIENCE,
    AuthError,
    JwtSettings,
    Principal,
    TokenVerifier,
    UnboundStaffError,
    decode_token,
    issue_token,
    verify_bearer_or_link,
)
from ticketry.settings import DEV_JWT_SECRET, CommonSettings, ConfigurationError, ServingSettings
from ticketry_api.config import ApiSettings
from ticketry_notifier.config import NotifierSettings
from ticketry_renderer.config import RendererSettings
from ticketry_scaler.config import ScalerSettings

SECRET = "a-test-secret-that-is-long-enough-for-hs256-and-even-for-hs512-xyz"


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def pem_public(key: rsa.RSAPrivateKey) -> str:
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    return key.public_key().public_bytes(serialization.Encoding.PEM, spki).decode()


def claims(**over: object) -> dict[str, object]:
    now = int(time.time())
    return {"sub": "u1", "role": "buyer", "iat": now, "exp": now + 60, **over}


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hs256_by_hand(payload: dict[str, object], secret: bytes) -> str:
    """What an attacker builds by hand (PyJWT itself refuses to use a PEM as secret)."""
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    signing_input = f"{header}.{b64(json.dumps(payload).encode())}"
    sig = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(sig)}"


def test_hs256_token_verifies() -> None:
    who = decode_token(issue_token("u1", "staff", key=SECRET, org="org-1"), key=SECRET)
    assert (who.sub, who.role, who.org, who.events) == ("u1", "staff", "org-1", None)


@pytest.mark.parametrize(
    "binding",
    [
        pytest.param({}, id="neither"),
        pytest.param({"events": []}, id="no-events"),
        pytest.param({"org": None}, id="null-org"),
    ],
)
def test_a_staff_token_bound_to_nothing_is_refused(binding: dict[str, object]) -> None:
    token = jwt.encode(claims(role="staff", **binding), SECRET, "HS256")
    with pytest.raises(UnboundStaffError):
        decode_token(token, key=SECRET)
    # Other roles need no binding
    assert (
        decode_token(jwt.encode(claims(role="organizer", **binding), SECRET, "HS256"), key=SECRET).role == "organizer"
    )


@pytest.mark.parametrize(
    "binding",
    [
        pytest.param({"org": ""}, id="empty-org"),
        pytest.param({"org": "o" * 129}, id="long-org"),
        pytest.param({"org": 7}, id="number-org"),
        pytest.param({"org": ["a"]}, id="list-org"),
        pytest.param({"org": "a\nb"}, id="unprintable-org"),
        pytest.param({"events": "ev_1"}, id="string-events"),
        pytest.param({"events": [1]}, id="number-in-events"),
        pytest.param({"events": [""]}, id="empty-event-id"),
        pytest.param({"events": ["e" * 129]}, id="long-event-id"),
        pytest.param({"events": [f"ev_{n}" for n in range(1001)]}, id="too-many-events"),
    ],
)
def test_malformed_bindings_are_refused(binding: dict[str, object]) -> None:
    token = jwt.encode(claims(role="staff", **binding), SECRET, "HS256")
    with pytest.raises(AuthError) as refused:
        decode_token(token, key=SECRET)
    assert not isinstance(refused.value, UnboundStaffError)


def test_bindings_limit_where_staff_scan() -> None:
    by_org = decode_token(issue_token("s", "staff", key=SECRET, org="org-a"), key=SECRET)
    assert by_org.may_scan_for("ev_1", "org-a") and not by_org.may_scan_for("ev_1", "org-b")
    by_events = decode_token(issue_token("s", "staff", key=SECRET, events=["ev_1"]), key=SECRET)
    assert by_events.may_scan_for("ev_1", "org-b") and not by_events.may_scan_for("ev_2", "org-b")
    # Both: each is a limit
    both = decode_token(issue_token("s", "staff", key=SECRET, org="org-a", events=["ev_1"]), key=SECRET)
    assert both.may_scan_for("ev_1", "org-a")
    assert not both.may_scan_for("ev_1", "org-b") and not both.may_scan_for("ev_2", "org-a")
    # A door's worth of real event ids fits (the token's 8 KiB bound comes first)
    many = [f"ev_{n:020x}" for n in range(200)]
    assert decode_token(issue_token("s", "staff", key=SECRET, events=many), key=SECRET).events == frozenset(many)
    # A staff principal built without a binding scans nowhere; admin everywhere
    assert not Principal("s", "staff").may_scan_for("ev_1", "org-a")
    assert Principal("a", "admin").may_scan_for("ev_1", "org-a")


def test_an_unbound_staff_token_is_no_order_link_either() -> None:
    """Presented where an order link is also accepted, it is refused as unbound (403), not tried as a link."""
    verifier = TokenVerifier("HS256", key=SECRET)
    with pytest.raises(UnboundStaffError):
        verify_bearer_or_link(verifier, SECRET, issue_token("s", "staff", key=SECRET), "order:or_1")


@pytest.mark.parametrize(
    "token",
    [
        pytest.param(jwt.encode(claims(), SECRET, "HS512"), id="hs512-same-secret"),
        pytest.param(jwt.encode(claims(), "another-secret-of-enough-length-for-hs256-xx", "HS256"), id="wrong-secret"),
        pytest.param(jwt.encode(claims(exp=int(time.time()) - 120), SECRET, "HS256"), id="expired"),
        pytest.param(jwt.encode(claims(nbf=int(time.time()) + 600), SECRET, "HS256"), id="not-yet-valid"),
        pytest.param(jwt.encode({k: v for k, v in claims().items() if k != "exp"}, SECRET, "HS256"), id="no-exp"),
        pytest.param(jwt.encode({k: v for k, v in claims().items() if k != "sub"}, SECRET, "HS256"), id="no-sub"),
        pytest.param(jwt.encode(claims(role="root"), SECRET, "HS256"), id="bad-role"),
        pytest.param(jwt.encode(claims(sub=""), SECRET, "HS256"), id="empty-sub"),
        pytest.param("not.a.token", id="garbage"),
        pytest.param("", id="empty"),
    ],
)
def test_bad_hs256_tokens_are_refused(token: str) -> None:
    with pytest.raises(AuthError):
        decode_token(token, key=SECRET)


def test_alg_none_is_refused() -> None:
    header = base64.urlsafe_b64encode(b'{"alg":"none","typ":"JWT"}').rstrip(b"=").decode()
    body = base64.urlsafe_b64encode(json.dumps(claims()).encode()).rstrip(b"=").decode()
    with pytest.raises(AuthError):
        decode_token(f"{header}.{body}.", key=SECRET)
    with pytest.raises(AuthError):
        decode_token(f"{header}.{body}.", key=SECRET, algorithm="none")


def test_rs256_token_is_refused_by_an_hs256_service(rsa_key: rsa.RSAPrivateKey) -> None:
    with pytest.raises(AuthError):
        decode_token(jwt.encode(claims(), rsa_key, "RS256"), key=SECRET)


def test_leeway_accepts_small_clock_skew() -> None:
    token = jwt.encode(claims(exp=int(time.time()) - 5, nbf=int(time.time()) + 5), SECRET, "HS256")
    assert decode_token(token, key=SECRET, leeway_s=30).sub == "u1"
    with pytest.raises(AuthError):
        decode_token(token, key=SECRET, leeway_s=0)


def test_rs256_with_public_key(rsa_key: rsa.RSAPrivateKey, tmp_path: Path) -> None:
    pem = pem_public(rsa_key)
    path = tmp_path / "pub.pem"
    path.write_text(pem)
    for configured in (pem, str(path)):
        verifier = TokenVerifier.from_settings(JwtSettings(jwt_algorithm="RS256", jwt_public_key=configured))
        assert verifier.verify(issue_token("u1", "admin", key=rsa_key, algorithm="RS256")).role == "admin"
        # An HS256 token signed with the public key as "secret" (key confusion) is refused.
        forged = hs256_by_hand(claims(), pem.encode())
        with pytest.raises(AuthError):
            verifier.verify(forged)
        with pytest.raises(AuthError):
            verifier.verify(issue_token("u1", "buyer", key=SECRET))


def test_rs256_with_jwks_picks_key_by_kid(rsa_key: rsa.RSAPrivateKey, tmp_path: Path) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks = {
        "keys": [
            {**json.loads(RSAAlgorithm.to_jwk(rsa_key.public_key())), "kid": "idp-1", "alg": "RS256", "use": "sig"},
            {**json.loads(RSAAlgorithm.to_jwk(other.public_key())), "kid": "idp-2", "alg": "RS256", "use": "sig"},
        ]
    }
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks))
    verifier = TokenVerifier.from_settings(JwtSettings(jwt_algorithm="RS256", jwt_jwks_file=path))
    assert verifier.verify(issue_token("a", "buyer", key=rsa_key, algorithm="RS256", kid="idp-1")).sub == "a"
    assert verifier.verify(issue_token("b", "buyer", key=other, algorithm="RS256", kid="idp-2")).sub == "b"
    for bad in (
        issue_token("a", "buyer", key=rsa_key, algorithm="RS256", kid="idp-2"),  # wrong key for the kid
        issue_token("a", "buyer", key=rsa_key, algorithm="RS256", kid="idp-9"),  # unknown kid
        issue_token("a", "buyer", key=rsa_key, algorithm="RS256"),  # no kid
        issue_token("a", "buyer", key=rsa_key, algorithm="RS512", kid="idp-1"),  # other algorithm
    ):
        with pytest.raises(AuthError):
            verifier.verify(bad)


def test_verifier_refuses_unsafe_configuration() -> None:
    with pytest.raises(ValueError, match="not allowed"):
        TokenVerifier.from_settings(JwtSettings(jwt_algorithm="none"))
    with pytest.raises(ValueError, match="needs"):
        TokenVerifier.from_settings(JwtSettings(jwt_algorithm="RS256"))
    with pytest.raises(ValueError, match="needs"):
        TokenVerifier.from_settings(JwtSettings(jwt_algorithm="HS256"))


def test_no_secret_means_no_start_outside_dev_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TICKETRY_JWT_SECRET", "TICKETRY_DEV_MODE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigurationError, match="TICKETRY_JWT_SECRET"):
        ServingSettings()
    monkeypatch.setenv("TICKETRY_DEV_MODE", "1")
    assert ServingSettings().jwt_key  # dev mode: the fixed dev secret
    monkeypatch.delenv("TICKETRY_DEV_MODE")
    monkeypatch.setenv("TICKETRY_JWT_SECRET", SECRET)
    assert ServingSettings().jwt_key == SECRET


def test_renderers_and_the_scaler_start_without_a_jwt_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    # Only the api and the notifier verify tokens; the deploy files give the secret to them only.
    for name in ("TICKETRY_JWT_SECRET", "TICKETRY_DEV_MODE"):
        monkeypatch.delenv(name, raising=False)
    RendererSettings()
    ScalerSettings()
    with pytest.raises(ConfigurationError, match="TICKETRY_JWT_SECRET"):
        _ = CommonSettings().jwt_key  # and code that asked for it anyway would fail, not use the dev secret
    for serving in (ApiSettings, NotifierSettings):
        with pytest.raises(ConfigurationError, match="TICKETRY_JWT_SECRET"):
            serving()


@pytest.mark.parametrize(
    ("algorithm", "length", "ok"),
    [("HS256", 31, False), ("HS256", 32, True), ("HS384", 47, False), ("HS384", 48, True),
     ("HS512", 63, False), ("HS512", 64, True), ("RS256", 31, False), ("RS256", 32, True)],
)  # fmt: skip
def test_short_hs_secrets_are_refused(algorithm: str, length: int, ok: bool) -> None:
    # RFC 7518 §3.2: the key is at least as long as the hash. (In RS mode the secret
    # still signs order links with HS256.)
    settings: dict[str, Any] = {"jwt_algorithm": algorithm, "jwt_secret": "s" * length}
    if ok:
        assert JwtSettings(**settings).jwt_secret is not None
    else:
        with pytest.raises(ConfigurationError, match="RFC 7518"):
            JwtSettings(**settings)


def test_a_short_secret_stops_the_api_at_start() -> None:
    proc = _settings_process({"TICKETRY_JWT_SECRET": "too-short"})
    assert "RFC 7518" in _stop_reason(proc)
    assert "too-short" not in proc.stderr  # the value itself is never printed


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "tickets.example.com"])  # noqa: S104
def test_the_dev_secret_never_serves_beyond_loopback(host: str) -> None:
    with pytest.raises(ConfigurationError, match="loopback"):
        ApiSettings(dev_mode=True, api_host=host)
    with pytest.raises(ConfigurationError, match="loopback"):
        NotifierSettings(dev_mode=True, notifier_host=host)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_the_dev_secret_serves_loopback_in_dev_mode(host: str) -> None:
    assert ApiSettings(dev_mode=True, api_host=host).jwt_key == DEV_JWT_SECRET
    assert NotifierSettings(dev_mode=True, notifier_host=host).jwt_key == DEV_JWT_SECRET


def test_the_dev_secret_set_by_hand_is_refused_outside_dev_mode() -> None:
    with pytest.raises(ConfigurationError, match="public dev secret"):
        ApiSettings(dev_mode=False, jwt_secret=DEV_JWT_SECRET)
    proc = _settings_process({"TICKETRY_DEV_MODE": "1", "TICKETRY_API_HOST": "0.0.0.0"})  # noqa: S104
    assert "loopback" in _stop_reason(proc)


def test_an_api_serving_beyond_loopback_needs_public_urls() -> None:
    base: dict[str, Any] = {"dev_mode": False, "jwt_secret": SECRET, "api_host": "0.0.0.0"}  # noqa: S104
    with pytest.raises(ConfigurationError, match="TICKETRY_NOTIFIER_PUBLIC_URL"):
        ApiSettings(**base)
    with pytest.raises(ConfigurationError, match="TICKETRY_API_PUBLIC_URL"):
        ApiSettings(**base, notifier_public_url="wss://progress.example.com")
    ApiSettings(**base, notifier_public_url="wss://progress.example.com", api_public_url="https://tickets.example.com")
    # Said explicitly, loopback is meant (a single-host container try-out).
    ApiSettings(**base, notifier_public_url="ws://localhost:8001", api_public_url="http://localhost:8000")
    # On loopback (a single host, `just up`), the defaults are right.
    ApiSettings(dev_mode=False, jwt_secret=SECRET)


def test_issuer_and_audience_are_checked_when_configured() -> None:
    verifier = TokenVerifier.from_settings(
        JwtSettings(jwt_secret=SECRET, jwt_issuer="https://idp.example", jwt_audience="ticketry")
    )
    good = jwt.encode(claims(iss="https://idp.example", aud="ticketry"), SECRET, "HS256")
    assert verifier.verify(good).sub == "u1"
    many = jwt.encode(claims(iss="https://idp.example", aud=["other", "ticketry"]), SECRET, "HS256")
    assert verifier.verify(many).sub == "u1"
    for bad in (
        claims(iss="https://evil.example", aud="ticketry"),
        claims(aud="ticketry"),  # no iss
        claims(iss="https://idp.example", aud="another-service"),
        claims(iss="https://idp.example"),  # no aud
    ):
        with pytest.raises(AuthError):
            verifier.verify(jwt.encode(bad, SECRET, "HS256"))
    # Not configured: iss is not looked at, and a token meant for an audience is refused.
    plain = TokenVerifier.from_settings(JwtSettings(jwt_secret=SECRET))
    assert plain.verify(jwt.encode(claims(iss="anyone"), SECRET, "HS256")).sub == "u1"
    with pytest.raises(AuthError):
        plain.verify(jwt.encode(claims(aud="ticketry"), SECRET, "HS256"))
    with pytest.raises(ValueError, match="order links"):
        JwtSettings(jwt_audience=ORDER_LINK_AUDIENCE)


def _settings_process(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The api's entry point in a fresh process with only ``env`` of TICKETRY_*
    (each caller's settings are refused, so it stops before serving)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("TICKETRY_")}
    code = "from ticketry_api.main import run; run()"
    return subprocess.run(
        [sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True, timeout=60, check=False
    )


def _stop_reason(proc: subprocess.CompletedProcess[str]) -> str:
    """Why the process stopped: the ``msg`` of its one ``critical`` log line
    (every line it printed is a JSON object)."""
    assert proc.returncode != 0, proc.stderr[-2000:]
    lines = [json.loads(raw) for raw in proc.stderr.splitlines()]
    (stop,) = [ln for ln in lines if ln["level"] == "critical"]
    return str(stop["msg"])


def test_api_process_refuses_to_start_without_secret() -> None:
    proc = _settings_process({})
    assert "TICKETRY_JWT_SECRET is required" in _stop_reason(proc)


# -- TICKETRY_JWT_JWKS_URL, served by a real HTTP server on loopback ----------


class _Idp:
    """A JWKS endpoint: a real ``http.server`` on 127.0.0.1 that counts its fetches."""

    def __init__(self) -> None:
        self.jwks: dict[str, Any] = {"keys": []}
        self.fetches = 0
        idp = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                idp.fetches += 1
                body = json.dumps(idp.jwks).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/.well-known/jwks.json"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def publish(self, *keys: tuple[str, rsa.RSAPrivateKey]) -> None:
        self.jwks = {
            "keys": [
                {**json.loads(RSAAlgorithm.to_jwk(k.public_key())), "kid": kid, "alg": "RS256", "use": "sig"}
                for kid, k in keys
            ]
        }

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def idp() -> Iterator[_Idp]:
    server = _Idp()
    try:
        yield server
    finally:
        server.stop()


def test_jwks_url_verifies_by_kid_and_follows_rotation(idp: _Idp, rsa_key: rsa.RSAPrivateKey) -> None:
    # Given an identity provider publishing one key
    idp.publish(("idp-1", rsa_key))
    settings = JwtSettings(jwt_algorithm="RS256", jwt_jwks_url=idp.url, jwt_issuer="https://idp.example")
    verifier = TokenVerifier.from_settings(settings)
    assert idp.fetches == 1  # fetched at construction: a wrong URL fails the start
    token = issue_token("a", "buyer", key=rsa_key, algorithm="RS256", kid="idp-1")
    assert verifier.verify(jwt_with(token, iss="https://idp.example", key=rsa_key)).sub == "a"
    assert idp.fetches == 1  # cached, not fetched per token
    with pytest.raises(AuthError):  # the configured issuer still applies
        verifier.verify(token)

    # When the provider rotates to a new key (and the throttle allows a refresh)
    new_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    idp.publish(("idp-1", rsa_key), ("idp-2", new_key))
    assert verifier.remote is not None
    verifier.remote.min_refresh_s = 0
    fresh = issue_token("b", "buyer", key=new_key, algorithm="RS256", kid="idp-2")
    # Then a token of the new key verifies after one fetch
    assert verifier.verify(jwt_with(fresh, iss="https://idp.example", key=new_key)).sub == "b"
    assert idp.fetches == 2

    # And a forged token (right kid, wrong key) is still refused
    with pytest.raises(AuthError):
        verifier.verify(jwt_with(fresh, iss="https://idp.example", key=rsa_key))


def test_jwks_url_unknown_kids_do_not_hammer_the_provider(idp: _Idp, rsa_key: rsa.RSAPrivateKey) -> None:
    idp.publish(("idp-1", rsa_key))
    verifier = TokenVerifier.from_settings(JwtSettings(jwt_algorithm="RS256", jwt_jwks_url=idp.url))
    # 50 tokens with made-up kids: at most one refresh within the throttle (30 s)
    for i in range(50):
        with pytest.raises(AuthError):
            verifier.verify(issue_token("x", "buyer", key=rsa_key, algorithm="RS256", kid=f"made-up-{i}"))
    assert idp.fetches <= 2


def test_jwks_url_keeps_the_last_good_keys_when_the_provider_is_down(idp: _Idp, rsa_key: rsa.RSAPrivateKey) -> None:
    idp.publish(("idp-1", rsa_key))
    verifier = TokenVerifier.from_settings(JwtSettings(jwt_algorithm="RS256", jwt_jwks_url=idp.url))
    assert verifier.remote is not None
    # Given the cached set is due for a refresh and the provider is gone
    idp.stop()
    verifier.remote.cache_s = 0
    verifier.remote.min_refresh_s = 0
    # Then tokens of the known key still verify
    token = issue_token("a", "buyer", key=rsa_key, algorithm="RS256", kid="idp-1")
    assert verifier.verify(token).sub == "a"


def test_jwks_url_settings_are_checked(idp: _Idp, rsa_key: rsa.RSAPrivateKey) -> None:
    with pytest.raises(ValueError, match="https"):
        JwtSettings(jwt_algorithm="RS256", jwt_jwks_url="http://idp.example/jwks.json")
    assert JwtSettings(jwt_algorithm="RS256", jwt_jwks_url="https://idp.example/jwks.json").jwt_jwks_url
    # A provider that publishes no key of the configured kind fails the start.
    with pytest.raises(ValueError, match="TICKETRY_JWT_JWKS_URL"):
        TokenVerifier.from_settings(JwtSettings(jwt_algorithm="RS256", jwt_jwks_url=idp.url))
    # So does one that cannot be reached.
    idp.stop()
    with pytest.raises(ValueError, match="TICKETRY_JWT_JWKS_URL"):
        TokenVerifier.from_settings(JwtSettings(jwt_algorithm="RS256", jwt_jwks_url=idp.url))


def jwt_with(token: str, *, key: rsa.RSAPrivateKey, **extra: object) -> str:
    """``token`` re-signed with ``extra`` claims added (its header kept)."""
    header = jwt.get_unverified_header(token)
    payload = jwt.decode(token, options={"verify_signature": False})
    return jwt.encode({**payload, **extra}, key, "RS256", headers={"kid": header["kid"]})
