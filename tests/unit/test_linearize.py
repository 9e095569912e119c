"""The porcupine checker (.bin/linearize) on hand-written histories: what it
accepts, what it rejects (naming the model and partition), unknown outcomes,
malformed input; and the recorder of tests/history.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.history import History, check, checkin_status, reserve_status, write_lines

HEADER = {"header": {"version": 1, "capacity": {"ev_1/standard": 5}}}


def res(client: int, k: int, status: str, call: int, ret: int | None, key: str = "ev_1/standard") -> dict[str, Any]:
    return {"client": client, "op": "reserve", "key": key, "input": {"k": k}, "output": {"status": status},
            "call": call, "return": ret}  # fmt: skip


def scan(client: int, ticket: str, status: str, call: int, ret: int | None) -> dict[str, Any]:
    return {"client": client, "op": "checkin", "key": ticket, "input": {}, "output": {"status": status},
            "call": call, "return": ret}  # fmt: skip


def verdict(tmp_path: Path, *lines: dict[str, Any], **kw: Any) -> tuple[int, str]:
    got = check(write_lines(tmp_path / "h.jsonl", lines), **kw)
    return got.code, got.line


def test_a_correct_concurrent_history_is_accepted(tmp_path: Path) -> None:
    # Given 4 clients racing for a tier of 5, the answers landing out of invocation
    # order, and 3 scanners racing per ticket where a later-invoked scan admits
    lines = [
        HEADER,
        res(0, 2, "ok", 10, 100),
        res(1, 3, "ok", 20, 60),  # answered first: linearized first
        res(2, 1, "sold_out", 30, 70),  # 5 were taken by then (both overlap it)
        res(3, 1, "sold_out", 110, 120),
        scan(4, "tk_a", "already", 10, 50),
        scan(5, "tk_a", "admitted", 20, 30),
        scan(6, "tk_a", "already", 25, 90),
        scan(4, "tk_b", "admitted", 60, 80),
        scan(5, "tk_b", "already", 70, 75),
    ]
    # Then the checker finds a linearization of each partition
    assert verdict(tmp_path, *lines) == (
        0,
        "ok: 9 operations, 3 partitions (0 of unknown outcome, 0 without effect left out)",
    )


def test_a_double_admission_is_rejected(tmp_path: Path) -> None:
    lines = [HEADER, res(0, 1, "ok", 1, 2), scan(1, "tk_a", "admitted", 10, 30), scan(2, "tk_a", "admitted", 20, 40)]
    assert verdict(tmp_path, *lines) == (1, "not linearizable: model checkin, partition tk_a (2 operations)")
    # (as is an "already" before anybody was admitted)
    assert verdict(tmp_path, HEADER, scan(1, "tk_a", "already", 1, 2), scan(2, "tk_a", "admitted", 3, 4))[0] == 1


def test_an_oversell_is_rejected(tmp_path: Path) -> None:
    # 2 + 3 fit in 5, one more ticket does not, however the three overlap
    lines = [HEADER, res(0, 2, "ok", 10, 50), res(1, 3, "ok", 20, 60), res(2, 1, "ok", 30, 70)]
    assert verdict(tmp_path, *lines) == (
        1, "not linearizable: model capacity, partition ev_1/standard (3 operations; its ok answers alone take 6 of 5)"
    )  # fmt: skip
    assert verdict(tmp_path, HEADER, res(0, 6, "ok", 1, 2))[0] == 1


def test_an_oversell_among_many_racing_orders_gets_a_verdict(tmp_path: Path) -> None:
    # 40 orders of 1 that all overlap, 21 answered ok of 20: the search alone
    # would try the orders of 40 operations before saying so (the CI saw a
    # history of 30 get no verdict in 2 minutes); the sum of the oks says it at once
    header = {"header": {"version": 1, "capacity": {"ev_1/standard": 20}}}
    lines = [header] + [res(i, 1, "ok" if i <= 20 else "sold_out", 10 + i, 1_000 + i) for i in range(40)]
    why = "40 operations; its ok answers alone take 21 of 20"
    assert verdict(tmp_path, *lines) == (1, f"not linearizable: model capacity, partition ev_1/standard ({why})")
    # and the same race with 20 oks is linearizable
    lines[21]["output"]["status"] = "sold_out"
    assert verdict(tmp_path, *lines)[0] == 0


def test_an_unjustified_sold_out_is_rejected(tmp_path: Path) -> None:
    # 2 of 5 sold; a later order of 3 fits, so "sold out" is a lie
    assert verdict(tmp_path, HEADER, res(0, 2, "ok", 1, 2), res(1, 3, "sold_out", 3, 4))[0] == 1
    # and an order of 1 refused while an order of 3 was still being placed, which
    # later failed for good (refused, no effect), is not justified either
    lines = [HEADER, res(0, 2, "ok", 1, 2), res(1, 1, "sold_out", 3, 4), res(2, 3, "none", 2, 5)]
    assert verdict(tmp_path, *lines)[0] == 1
    # whereas with the order of 3 accepted, the same refusal is justified
    lines = [HEADER, res(0, 2, "ok", 1, 2), res(1, 1, "sold_out", 3, 4), res(2, 3, "ok", 2, 5)]
    assert verdict(tmp_path, *lines)[0] == 0


def test_an_operation_of_unknown_outcome_may_have_taken_effect_after_its_call_or_never(tmp_path: Path) -> None:
    # A client timed out on an order of 4 (return null): it may have been taken...
    timed_out = res(0, 4, "unknown", 10, None)
    assert verdict(tmp_path, HEADER, timed_out, res(1, 2, "sold_out", 20, 30)) == (
        0, "ok: 2 operations, 1 partitions (1 of unknown outcome, 0 without effect left out)"
    )  # fmt: skip
    # ...or not
    assert verdict(tmp_path, HEADER, timed_out, res(1, 5, "ok", 20, 30))[0] == 0
    # but not both, and not before it was invoked
    assert verdict(tmp_path, HEADER, timed_out, res(1, 2, "sold_out", 20, 30), res(2, 5, "ok", 40, 50))[0] == 1
    assert verdict(tmp_path, HEADER, res(1, 2, "sold_out", 1, 5), timed_out)[0] == 1
    # (a return time written for an unknown outcome is ignored: the effect may come later)
    assert verdict(tmp_path, HEADER, res(0, 4, "unknown", 10, 11), res(1, 2, "sold_out", 20, 30))[0] == 0
    # The same for a scan whose answer was lost
    lost = scan(0, "tk_a", "unknown", 10, None)
    assert verdict(tmp_path, HEADER, lost, scan(1, "tk_a", "already", 20, 30))[0] == 0
    assert verdict(tmp_path, HEADER, lost, scan(1, "tk_a", "admitted", 20, 30))[0] == 0
    assert verdict(tmp_path, HEADER, scan(1, "tk_a", "already", 1, 2), lost)[0] == 1


def test_a_refusal_while_a_cut_off_order_held_the_last_tickets_is_justified_by_its_hold(tmp_path: Path) -> None:
    # Given a tier of 5: 3 sold, an order cut off mid-way holding 2 until the sweep gave
    # them back, a refusal meanwhile, and the 2 sold to others after the release
    def op(client: int, kind: str, k: int, call: int, ret: int) -> dict[str, Any]:
        return {"client": client, "op": kind, "key": "ev_1/standard", "input": {"k": k},
                "output": {"status": "ok"}, "call": call, "return": ret}  # fmt: skip

    sale = [res(0, 3, "ok", 1, 5), res(1, 1, "sold_out", 20, 30), res(2, 2, "ok", 60, 70)]
    # Then without the hold the refusal is unjustified; with it (taken before the cut at 10,
    # given back after it) the history is linearizable, and a hold that did not fit is not
    assert verdict(tmp_path, HEADER, *sale)[0] == 1
    assert verdict(tmp_path, HEADER, *sale, op(9, "hold", 2, 0, 10), op(9, "release", 2, 10, 80))[0] == 0
    assert verdict(tmp_path, HEADER, *sale, op(9, "hold", 3, 0, 10), op(9, "release", 3, 10, 80))[0] == 1


def test_cancelled_tickets_never_admit(tmp_path: Path) -> None:
    cancel = {
        "client": 0,
        "op": "cancel",
        "key": "tk_a",
        "input": {},
        "output": {"status": "ok"},
        "call": 1,
        "return": 2,
    }
    assert verdict(tmp_path, HEADER, cancel, scan(1, "tk_a", "cancelled", 3, 4))[0] == 0
    assert verdict(tmp_path, HEADER, cancel, scan(1, "tk_a", "admitted", 3, 4))[0] == 1
    refused = {**cancel, "output": {"status": "refused"}, "call": 5, "return": 6}
    assert verdict(tmp_path, HEADER, scan(1, "tk_a", "admitted", 1, 2), refused)[0] == 0


@pytest.mark.parametrize(
    ("lines", "why"),
    [
        (["{not json"], "line 1"),
        ([], "no operations"),
        ([HEADER], "no operations"),
        ([HEADER, {**res(0, 1, "ok", 1, 2), "op": "refund"}], "unknown op"),
        ([HEADER, {**res(0, 1, "ok", 1, 2), "client": -1}], "client"),
        ([HEADER, {**res(0, 1, "ok", 1, 2), "input": {}}], "input.k"),
        ([HEADER, res(0, 1, "ok", 1, 2, key="ev_2/vip")], "no capacity"),
        ([HEADER, res(0, 1, "admitted", 1, 2)], "status"),
        ([HEADER, res(0, 1, "ok", 5, 2)], "before its call"),
        ([HEADER, res(0, 1, "ok", 1, None)], "without a return"),
        ([HEADER, {k: v for k, v in res(0, 1, "ok", 1, 2).items() if k != "call"}], "call"),
        ([{"header": {"capacity": {"ev_1/standard": 4}}}, HEADER, res(0, 1, "ok", 1, 2)], "given as 4 and 5"),
    ],
)
def test_malformed_input_exits_2_with_the_line_at_fault(tmp_path: Path, lines: list[Any], why: str) -> None:
    path = tmp_path / "h.jsonl"
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    got = check(path)
    assert got.code == 2 and got.line.startswith("malformed: ") and why in got.line, got


def test_a_model_flag_checks_one_model_only(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "h.jsonl", [HEADER, res(0, 1, "ok", 1, 2), scan(1, "tk_a", "admitted", 1, 2)])
    assert check(path, model="checkin").code == 2
    assert check(write_lines(tmp_path / "c.jsonl", [HEADER, res(0, 1, "ok", 1, 2)]), model="capacity").code == 0


def test_a_visualization_of_a_rejected_history_is_written(tmp_path: Path) -> None:
    viz = tmp_path / "out.html"
    path = write_lines(
        tmp_path / "h.jsonl", [HEADER, scan(1, "tk_a", "admitted", 1, 3), scan(2, "tk_a", "admitted", 2, 4)]
    )
    got = check(path, viz=viz)
    assert got.code == 1 and f"visualization: {viz}" in got.stdout
    assert "<html" in viz.read_text().lower()


async def test_the_recorder_writes_what_the_checker_reads(tmp_path: Path) -> None:
    h = History()
    h.tier("ev_9/standard", 2)
    async with h.record(0, "reserve", "ev_9/standard", {"k": 2}) as a:
        a.answer("ok", http=202)
    with pytest.raises(TimeoutError):
        async with h.record(1, "reserve", "ev_9/standard", {"k": 1}):
            raise TimeoutError  # the client's timeout: unknown outcome, then the error goes on
    async with h.record(2, "checkin", "tk_z") as s:
        s.answer("admitted", http=200)
    with pytest.raises(ValueError, match="never answered"):
        async with h.record(3, "checkin", "tk_z"):
            pass
    lines = h.lines()
    assert lines[0] == {"header": {"version": 1, "capacity": {"ev_9/standard": 2}}}
    assert lines[2]["output"] == {"status": "unknown", "error": "TimeoutError"} and lines[2]["return"] is None
    assert lines[1]["call"] <= lines[1]["return"] <= lines[2]["call"]
    # (the unanswered 4th is unknown: it may have admitted after the first, which is fine)
    assert check(h.write(tmp_path / "h.jsonl")).line.startswith("ok: 4 operations, 2 partitions (2 of unknown")
    # And one flipped answer makes it fail
    h.ops[0].output["status"] = "sold_out"
    assert check(h.write(tmp_path / "flipped.jsonl")).code == 1


def _answer(status: int, body: dict[str, Any] | None = None) -> httpx.Response:
    headers = {"content-type": "application/problem+json"} if body is not None else {}
    return httpx.Response(status, json=body or {}, headers=headers)


def test_the_apis_answers_map_onto_the_models() -> None:
    base = "https://ticketry.example/problems/"
    assert reserve_status(_answer(202)) == "ok"
    assert reserve_status(_answer(409, {"title": "sold out", "type": "about:blank"})) == "sold_out"
    assert reserve_status(_answer(409, {"title": "limit per buyer", "type": "about:blank"})) == "none"
    assert reserve_status(_answer(409, {"title": "order in progress", "type": "about:blank"})) == "unknown"
    assert reserve_status(_answer(422, {"title": "unknown tier", "type": "about:blank"})) == "none"
    assert reserve_status(_answer(503, {"title": "busy", "type": "about:blank"})) == "unknown"
    assert checkin_status(_answer(200)) == "admitted"
    assert checkin_status(_answer(409, {"type": base + "already-checked-in"})) == "already"
    assert checkin_status(_answer(404, {"type": base + "unknown-code"})) == "cancelled"
    assert checkin_status(_answer(409, {"type": base + "wrong-list"})) == "none"
    assert checkin_status(_answer(503, {"type": base + "unavailable"})) == "unknown"
