"""Token verification: pinned algorithm, required claims, RS256/JWKS, settings."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from ticketry.auth import AuthError, JwtSettings, TokenVerifier, decode_token, issue_token
from ticketry.settings import CommonSettings, ConfigurationError

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
    who = decode_token(issue_token("u1", "staff", key=SECRET), key=SECRET)
    assert (who.sub, who.role) == ("u1", "staff")


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
        CommonSettings()
    monkeypatch.setenv("TICKETRY_DEV_MODE", "1")
    assert CommonSettings().jwt_key  # dev mode: the fixed dev secret
    monkeypatch.delenv("TICKETRY_DEV_MODE")
    monkeypatch.setenv("TICKETRY_JWT_SECRET", SECRET)
    assert CommonSettings().jwt_key == SECRET


def test_api_process_refuses_to_start_without_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("TICKETRY_")}
    code = "from ticketry_api.config import ApiSettings; ApiSettings()"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "TICKETRY_JWT_SECRET is required" in proc.stderr
