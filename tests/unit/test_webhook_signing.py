"""Standard Webhooks signatures: the published test vector, secrets, verification."""

from __future__ import annotations

import base64

import pytest
from ticketry_api.core import signing

# The Standard Webhooks / Svix reference vector: what any receiver library checks.
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
MSG = "msg_p5jXN8AQM9LWM0D4loKWxJek"
TS = 1614265330
BODY = b'{"test": 2432232314}'
EXPECTED = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_signature_matches_the_published_vector() -> None:
    assert signing.sign(SECRET, MSG, TS, BODY) == EXPECTED
    assert signing.headers(SECRET, MSG, TS, BODY) == {
        "webhook-id": MSG,
        "webhook-timestamp": str(TS),
        "webhook-signature": EXPECTED,
    }


def test_new_secrets_are_whsec_base64_of_24_bytes_and_distinct() -> None:
    a, b = signing.new_secret(), signing.new_secret()
    assert a.startswith("whsec_") and a != b
    assert len(base64.b64decode(a.removeprefix("whsec_"), validate=True)) == 24


def test_verify_accepts_the_vector_and_one_of_several_signatures() -> None:
    hdrs = signing.headers(SECRET, MSG, TS, BODY)
    assert (hdrs["webhook-id"], hdrs["webhook-timestamp"], hdrs["webhook-signature"]) == (MSG, str(TS), EXPECTED)
    signing.verify(SECRET, hdrs, BODY, now=TS)
    signing.verify(SECRET, {**hdrs, "webhook-signature": f"v1,bm9wZQ== {EXPECTED}"}, BODY, now=TS + 299)


@pytest.mark.parametrize(
    ("change", "body", "now"),
    [
        ({}, b'{"test": 2432232315}', TS),  # body changed
        ({"webhook-id": "msg_other"}, BODY, TS),  # id changed
        ({"webhook-timestamp": str(TS + 1)}, BODY, TS),  # timestamp changed
        ({}, BODY, TS + 301),  # replayed more than 5 minutes later
        ({}, BODY, TS - 301),  # from the future
        ({"webhook-signature": "v1,AAAA"}, BODY, TS),
        ({"webhook-timestamp": "soon"}, BODY, TS),
    ],
)
def test_verify_refuses(change: dict[str, str], body: bytes, now: int) -> None:
    hdrs = {**signing.headers(SECRET, MSG, TS, BODY), **change}
    with pytest.raises(signing.SignatureError):
        signing.verify(SECRET, hdrs, body, now=now)


def test_another_secret_does_not_verify() -> None:
    hdrs = signing.headers(SECRET, MSG, TS, BODY)
    with pytest.raises(signing.SignatureError):
        signing.verify(signing.new_secret(), hdrs, BODY, now=TS)
