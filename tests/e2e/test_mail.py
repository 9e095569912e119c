"""The tickets by email, against a real SMTP server process (``tests.smtp_sink``):
one message per completed order with an ``email``, through refusals, over the
size cap, to the dead letters, and through a SIGKILL of the api that mails."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import uuid
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis
from ticketry import streams
from ticketry_devstack.procs import Stack, tool

from tests.chaos.support import redis_of
from tests.conftest import TokenFactory, stack_of_its_own
from tests.helpers import bearer, codes_of, create_event, decode_qr, eventually, place_order, serving
from tests.mail_support import mail_env, parts, received, sink_proc, to


def address(kind: str = "ada") -> str:
    return f"{kind}-{uuid.uuid4().hex[:10]}@example.com"


async def settled(redis: Redis, order_ids: list[str]) -> bool:
    """Nothing of these orders' mails is left to do: every ticket event is acked
    by the mailer and none of them waits for a retry."""
    pending: Any = await redis.xpending(streams.TICKET_EVENTS, streams.MAIL_GROUP)
    if pending["pending"]:
        return False
    waiting = [orjson.loads(m)["order"] for m in await redis.zrange(streams.MAIL_RETRIES, 0, -1)]
    return not set(waiting) & set(order_ids)


async def mailed(stack: Stack, inbox: Path, order: dict[str, Any], email: str) -> EmailMessage:
    """The one message ``order`` got, once nothing of it is left to do."""
    got = await eventually(lambda: _async(to(inbox, email)), f"a mail to {email}")
    redis = redis_of(stack)
    try:
        await eventually(lambda: settled(redis, [order["id"]]), "the mailer settled")
    finally:
        await redis.aclose()
    msgs = to(inbox, email)
    assert len(msgs) == 1, [m["Message-ID"] for m in msgs]
    assert got[0]["Message-ID"] == f"<{order['id']}.tickets@ticketry.localhost>"
    return msgs[0]


async def _async(value: Any) -> Any:
    return value


async def test_a_completed_order_is_mailed_once_with_its_tickets_in_one_pdf(
    stack: Stack, inbox: Path, api: httpx.AsyncClient, token: TokenFactory
) -> None:
    # Given an event in Berlin and an order of one ticket with an email
    org, buyer = token("mail-org", "organizer"), token("mail-buyer", "buyer")
    event = await create_event(api, org, timezone="Europe/Berlin")
    email = address()
    r = await place_order(api, buyer, event["id"], 1, email=email)
    assert r.status_code == 202, r.text
    order = r.json()
    # When it completes, then exactly one message: text, HTML, the PDF whose QR is the ticket's code
    msg = await mailed(stack, inbox, order, email)
    got = parts(msg)
    text = got["text/plain"][0].get_content()
    assert "Tuesday 1 June 2027, 21:30 (CEST, UTC+02:00)" in text, text
    assert f"/o/{order['id']}#t=" in text
    assert "Tuesday 1 June 2027, 21:30" in got["text/html"][0].get_content()
    (pdf,) = got["application/pdf"]
    assert decode_qr(pdf.get_content()) == (await codes_of(api, order, buyer))[0]


async def test_a_server_refusing_twice_still_gets_exactly_one_message(
    stack: Stack, inbox: Path, api: httpx.AsyncClient, token: TokenFactory
) -> None:
    org, buyer = token("mail-org", "organizer"), token("mail-buyer", "buyer")
    event = await create_event(api, org)
    email = address("refuse2")  # the sink answers 451 to its first two tries
    order = (await place_order(api, buyer, event["id"], 1, email=email)).json()
    msg = await mailed(stack, inbox, order, email)
    assert "application/pdf" in parts(msg)


async def test_an_order_over_the_size_cap_gets_the_link_instead(
    stack: Stack, inbox: Path, api: httpx.AsyncClient, token: TokenFactory
) -> None:
    org, buyer = token("mail-org", "organizer"), token("mail-buyer", "buyer")
    event = await create_event(api, org)
    email = address()
    # Its tickets' files past the session's cap (~25 kB each; joined they share
    # their template and would be smaller, but the mailer stops reading at the cap)
    order = (await place_order(api, buyer, event["id"], 12, email=email)).json()
    got = parts(await mailed(stack, inbox, order, email))
    assert "application/pdf" not in got
    text = got["text/plain"][0].get_content()
    assert "too large to attach" in text and f"/o/{order['id']}#t=" in text


async def test_a_server_that_never_accepts_ends_in_the_dead_letters_seen_by_ticketryctl(
    stack: Stack, inbox: Path, api: httpx.AsyncClient, token: TokenFactory
) -> None:
    org, buyer = token("mail-org", "organizer"), token("mail-buyer", "buyer")
    event = await create_event(api, org)
    email = address("never")
    order = (await place_order(api, buyer, event["id"], 1, email=email)).json()

    async def dead() -> dict[str, Any] | None:
        out = await asyncio.to_thread(
            subprocess.run, [tool("ticketryctl"), "mail", "dead", "--json"], env=stack.service_env(),
            capture_output=True, check=True,
        )  # fmt: skip
        return next((d for d in orjson.loads(out.stdout) if d["order_id"] == order["id"]), None)

    letter = await eventually(dead, "the order's dead letter")
    assert "451" in letter["reason"] and letter["attempts"] == 4, letter
    assert len(letter["history"]) == 4
    assert to(inbox, email) == []


@pytest.mark.parametrize(
    "bad",
    ["", "ada", "ada@", "@example.com", "ada@example", "ada lovelace@example.com", "ada@exa mple.com",
     "ada@example.com\r\nBcc: eve@example.com", "ädä@example.com", "ada@127.0.0.1", "a" * 65 + "@example.com",
     "ada@" + "a" * 250 + ".com", "ada..l@example.com", 42],
)  # fmt: skip
async def test_a_bad_email_is_a_422(api: httpx.AsyncClient, token: TokenFactory, bad: object) -> None:
    r = await api.post(
        "/v1/orders", json={"event_id": "ev_" + "0" * 20, "quantity": 1, "holder_name": "Ada", "email": bad},
        headers=bearer(token("mail-buyer", "buyer")),
    )  # fmt: skip
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")


async def test_a_sigkill_of_the_mailing_api_mid_batch_mails_each_order_exactly_once(
    tmp_path_factory: pytest.TempPathFactory, token: TokenFactory
) -> None:
    out = tmp_path_factory.mktemp("kill-mail") / "inbox"
    # The sink holds the third message unanswered: the api dies with a message in
    # flight, two behind it sent, and the rest of the batch not yet tried. One
    # mail at a time, so no other is between its 250 and its marker (the window
    # docs/email.md names, which no design closes).
    with serving(lambda port: sink_proc(out, port, hold=2)) as port:
        env = mail_env(port, TICKETRY_MAIL_TIMEOUT_S="6", TICKETRY_MAIL_CLAIM_IDLE_MS="12000",
                       TICKETRY_MAIL_CONCURRENCY="1")  # fmt: skip
        with stack_of_its_own(tmp_path_factory, "mailkill", renderers=1, extra_env=env) as s:
            async with httpx.AsyncClient(base_url=s.api_url, timeout=60) as kapi:
                org, buyer = token("kill-org", "organizer"), token("kill-buyer", "buyer")
                event = await create_event(kapi, org)
                # Given 16 orders with emails
                emails = [address() for _ in range(16)]
                orders = []
                for e in emails:
                    r = await place_order(kapi, buyer, event["id"], 1, email=e)
                    assert r.status_code == 202, r.text
                    orders.append(r.json())
                # When the api is killed while its third message waits for the server's answer
                held = out / "held"
                await eventually(lambda: _async(held.exists()), "a message in flight")
                s.procs["api"].signal(signal.SIGKILL)
                s.procs["api"].popen.wait()  # type: ignore[union-attr]
                sent_before = len(list(out.glob("*.eml")))
                s.start_api()
                # Then every order gets its message, and none a second one
                await eventually(lambda: _async(all(to(out, e) for e in emails)), "every order's mail")
                redis = redis_of(s)
                try:
                    await eventually(lambda: settled(redis, [o["id"] for o in orders]), "the mailer settled")
                finally:
                    await redis.aclose()
                counts = {e: len(to(out, e)) for e in emails}
                assert set(counts.values()) == {1}, counts
                assert sent_before == 2, sent_before
                # and the message in flight was mailed by the api that came back
                assert [m["To"] for m in received(out)].index(held.read_text()) >= 2
