"""The progress socket's core (ticketry_notifier.core), driven with plain data:
who may watch an order, its snapshot from the live hash or from the store,
resuming after a stream id, what each stream entry becomes, when the socket
is done. No Redis, no store, no socket."""

from __future__ import annotations

import orjson
import pytest
from ticketry.replies import Entry
from ticketry_notifier import core, handshake
from ticketry_notifier.core import OrderHead, OrderOutcome, Replay, Snapshot

ORDER = "or_0123456789abcdef0123"
OTHER = "or_fedcba9876543210fedc"


def entry(entry_id: str, order_id: str, kind: str, rendered: int = 0, total: int = 3) -> Entry:
    n = rendered - 1
    fields = {
        "type": kind, "v": "1", "event_uuid": f"{kind}:{entry_id}", "order_id": order_id,
        "ticket_id": f"tk_{order_id[3:]}_{n:05d}" if kind.startswith("ticket.") else "",
        "occurred_at": "2027-06-01T18:00:00+00:00", "total": str(total), "rendered": str(rendered), "failed": "0",
    }  # fmt: skip
    return entry_id.encode(), {k.encode(): v.encode() for k, v in fields.items()}


def sent(messages: list[core.Outgoing]) -> list[tuple[str, str]]:
    return [(m.id, m.type) for m in messages]


# -- who may watch ---------------------------------------------------------------------


def test_the_owner_comes_from_the_hash_before_the_store() -> None:
    head = OrderHead(owner="someone-else", quantity=3, cancelled=False)
    assert core.owner({"owner": "u1", "total": "3"}, head) == "u1"
    assert core.owner({}, head) == "someone-else"
    assert core.owner({}, None) is None


@pytest.mark.parametrize(
    ("progress", "head_read"),
    [({"owner": "u1", "total": "3"}, False), ({"owner": "u1"}, True), ({"total": "3"}, True), ({}, True)],
)
def test_the_store_is_read_only_when_the_hash_cannot_answer(progress: dict[str, str], head_read: bool) -> None:
    assert core.needs_head(progress) is head_read


def test_an_unknown_order_or_somebody_elses_is_not_watched() -> None:
    owns = {"u1"}.__contains__
    assert core.may_watch({"owner": "u1", "total": "1"}, None, owns)
    assert not core.may_watch({"owner": "u2", "total": "1"}, None, owns)
    assert not core.may_watch({}, None, owns)
    assert core.may_watch({}, OrderHead("u1", 1, False), owns)


# -- the snapshot ----------------------------------------------------------------------


def test_a_live_order_is_shown_from_its_hash() -> None:
    progress = {"owner": "u1", "total": "3", "rendered": "2", "failed": "1", "completed": "1700000000000-4"}
    snap = Snapshot.of(ORDER, "1700000000000-9", progress, None, None)
    assert not core.needs_outcome(progress, None)
    assert orjson.loads(snap.text) == {
        "type": "snapshot", "id": "1700000000000-9", "order_id": ORDER, "status": "completed",
        "total": 3, "rendered": 2, "failed": 1, "completed": True,
    }  # fmt: skip
    assert snap.key == (1700000000000, 9) and snap.close is None


def test_an_expired_hash_is_replaced_by_the_projectors_record() -> None:
    head = OrderHead("u1", quantity=3, cancelled=False)
    assert core.needs_outcome({}, head)
    snap = Snapshot.of(ORDER, "5-0", {}, head, OrderOutcome(total=3, rendered=3, failed=0))
    assert (snap.status, snap.progress["rendered"], snap.progress["total"]) == ("completed", "3", "3")


def test_an_order_still_rendering_without_a_hash_shows_its_size() -> None:
    snap = Snapshot.of(ORDER, "5-0", {}, OrderHead("u1", quantity=7, cancelled=False), None)
    assert snap.status == "processing"
    assert orjson.loads(snap.text)["total"] == 7


def test_a_cancelled_order_without_live_counters_says_so_and_closes() -> None:
    snap = Snapshot.of(ORDER, "5-0", {"cancelled": "4-0"}, OrderHead("u1", quantity=2, cancelled=True), None)
    assert snap.status == "cancelled"
    assert snap.close == handshake.CANCELLED


def test_the_hashs_marks_survive_a_snapshot_from_the_store() -> None:
    head = OrderHead("u1", quantity=2, cancelled=False)
    progress = core.snapshot_progress({"completed": "4-1"}, head, None)
    assert progress == {"total": "2", "completed": "4-1"}


def test_no_order_means_an_empty_snapshot() -> None:
    assert core.stored_progress(None, OrderOutcome(1, 1, 0)) == {}


# -- stream entries --------------------------------------------------------------------


def test_an_entry_becomes_one_shared_message() -> None:
    raw_id, fields = entry("1700000000000-3", ORDER, "ticket.rendered", rendered=1)
    out = core.message_for(raw_id, fields)
    assert out is not None
    assert (out.key, out.id, out.type) == ((1700000000000, 3), "1700000000000-3", "ticket.rendered")
    assert out.order_id == ORDER
    assert orjson.loads(out.text)["ticket_id"] == out.ticket_id
    assert core.entry_order(fields) == ORDER


def test_an_entry_that_does_not_decode_is_skipped() -> None:
    assert core.message_for(b"1-0", {b"order_id": ORDER.encode(), b"type": b"ticket.exploded"}) is None


@pytest.mark.parametrize(
    ("kind", "ends"),
    [("ticket.rendered", False), ("ticket.failed", False), ("order.completed", False), ("order.cancelled", True)],
)
def test_only_a_cancellation_ends_the_socket(kind: str, ends: bool) -> None:
    assert core.ends_socket(kind) is ends


# -- resuming after a stream id --------------------------------------------------------


def test_no_after_or_an_after_the_snapshot_covers_means_no_replay() -> None:
    assert Replay(ORDER, None, (10, 0)).start is None
    assert Replay(ORDER, (10, 0), (10, 0)).start is None
    assert Replay(ORDER, (11, 0), (10, 0)).start is None


def test_a_replay_sends_this_orders_missed_entries_in_chunks_until_an_empty_one() -> None:
    replay = Replay(ORDER, (5, 0), (20, 0))
    assert replay.start == (5, 1)
    first = replay.feed(
        [entry("6-0", ORDER, "ticket.rendered", 1), entry("7-0", OTHER, "ticket.rendered", 1)]
    )  # fmt: skip
    assert sent(first) == [("6-0", "ticket.rendered")]
    assert replay.start == (7, 1)
    second = replay.feed([entry("8-0", ORDER, "ticket.rendered", 2), entry("9-5", ORDER, "order.completed", 3)])
    assert sent(second) == [("8-0", "ticket.rendered"), ("9-5", "order.completed")]
    assert replay.start == (9, 6)
    assert replay.feed([]) == [] and replay.start is None and not replay.cancelled


def test_a_replay_stops_at_the_orders_cancellation() -> None:
    replay = Replay(ORDER, (1, 0), (20, 0))
    out = replay.feed(
        [entry("2-0", ORDER, "ticket.rendered", 1), entry("3-0", ORDER, "order.cancelled", 1),
         entry("4-0", ORDER, "ticket.rendered", 2)]
    )  # fmt: skip
    assert sent(out) == [("2-0", "ticket.rendered"), ("3-0", "order.cancelled")]
    assert replay.cancelled and replay.start is None


def test_a_replay_skips_entries_that_do_not_decode() -> None:
    replay = Replay(ORDER, (1, 0), (20, 0))
    out = replay.feed([(b"2-0", {b"order_id": ORDER.encode()}), entry("3-0", ORDER, "ticket.rendered", 1)])
    assert sent(out) == [("3-0", "ticket.rendered")]
    assert replay.start == (3, 1)


def test_a_replay_ends_at_the_end_of_the_id_space() -> None:
    top = 2**64 - 1
    replay = Replay(ORDER, (top, top - 1), (top, top))
    assert replay.start == (top, top)
    replay.feed([entry(f"{top}-{top}", ORDER, "ticket.rendered", 1)])
    assert replay.start is None
