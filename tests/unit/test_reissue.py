"""Re-issue's pure parts and its emit path: a version is part of what a code
signs (older codes stay genuine, never-re-issued ones are unchanged), the
rules of a re-issue, and a re-issued ticket's render announced once per
version without counting in its order (real redis-server)."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio import Redis
from ticketry import streams
from ticketry.codes import InvalidCode, load_keyring, rotate_key
from ticketry.emit import queue_final
from ticketry.events import EventType, event_fields
from ticketry.ids import new_id, ticket_ids
from ticketry_api.core.problem import Problem
from ticketry_api.core.reissue import check_current, next_version


def test_a_version_is_signed_and_version_zero_keeps_the_old_code(tmp_path: Path) -> None:
    rotate_key(tmp_path)
    ring = load_keyring(tmp_path)
    tid, ev = ticket_ids(new_id("or"), 1)[0], new_id("ev")
    first = ring.sign(tid, ev, "standard")
    assert first.startswith("TK2.") and ring.sign(tid, ev, "standard", version=0) == first
    second = ring.sign(tid, ev, "standard", version=2)
    assert second.startswith("TK3.") and second != first
    assert ring.verify_code(first).version == 0
    got = ring.verify_code(second)
    assert (got.ticket_id, got.event_id, got.tier, got.version) == (tid, ev, "standard", 2)
    # The version cannot be changed without the key, nor spelt twice
    parts = second.split(".")
    for forged in ("3", "02", "+2", "٢"):
        with pytest.raises(InvalidCode):
            ring.verify_code(".".join([*parts[:5], forged, parts[6]]))
    # A TK2 code's signature does not verify as a TK3 one of version 0... or any other
    with pytest.raises(InvalidCode):
        ring.verify_code(".".join(["TK3", *first.split(".")[1:5], "1", first.split(".")[5]]))


@pytest.mark.parametrize(
    ("cancelled", "checked_in", "version", "limit", "answer"),
    [
        (False, False, 0, 3, 1),
        (False, False, 2, 3, 3),
        (False, False, 3, 3, "/reissue-limit"),
        (False, False, 0, 0, "/reissue-limit"),
        (False, True, 0, 3, "/checked-in"),
        (True, False, 0, 3, "/cancelled"),
        (True, True, 3, 3, "/cancelled"),
    ],
)
def test_the_rules_of_a_reissue(cancelled: bool, checked_in: bool, version: int, limit: int, answer: object) -> None:
    if isinstance(answer, int):
        assert next_version(cancelled=cancelled, checked_in=checked_in, version=version, max_reissues=limit) == answer
        return
    with pytest.raises(Problem) as caught:
        next_version(cancelled=cancelled, checked_in=checked_in, version=version, max_reissues=limit)
    assert caught.value.status == 409 and caught.value.type.endswith(str(answer))


def test_only_a_code_of_an_older_version_is_revoked() -> None:
    check_current(2, 2, "tk_x")
    with pytest.raises(Problem) as caught:
        check_current(1, 2, "tk_x")
    assert caught.value.status == 409 and caught.value.type.endswith("/revoked")


async def test_a_reissued_render_is_announced_once_per_version_and_counts_nothing(redis: Redis) -> None:
    # Given a completed 1-ticket order
    order_id, ticket_id = "or_" + "5" * 20, "tk_" + "5" * 20 + "_00000"
    progress = streams.order_progress(order_id)
    await redis.hset(progress, mapping={"total": 1, "order_id": order_id})

    async def final(version: int) -> None:
        kind: EventType = "ticket.reissued" if version else "ticket.rendered"
        fields = event_fields(type=kind, event_uuid=f"x:{version}", order_id=order_id, ticket_id=ticket_id)
        async with redis.pipeline(transaction=True) as pipe:
            queue_final(pipe, order_id=order_id, ticket_id=ticket_id, outcome="rendered", fields=fields,
                        ticket_version=version)  # fmt: skip
            await pipe.execute()

    await final(0)
    # When the ticket's re-issues render (each delivered twice)
    for version in (1, 1, 2, 2):
        await final(version)
    # Then one ticket.reissued per version, and the order still counts one rendered, completed once
    types = [f[b"type"] for _, f in await redis.xrange(streams.TICKET_EVENTS)]
    assert types == [b"ticket.rendered", b"order.completed", b"ticket.reissued", b"ticket.reissued"]
    assert await redis.hget(progress, "rendered") == b"1"
