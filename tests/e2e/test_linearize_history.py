"""A recorded history of racing buyers and scanners on the real stack, checked
by the porcupine checker (.bin/linearize): the system's answers are
linearizable against the capacity and check-in models, and the same history
with one answer flipped is not."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

import httpx
import pytest

from tests.conftest import TokenFactory
from tests.helpers import bearer, checkin_list, codes_of, create_event, place_order
from tests.history import History, check, read_lines, recorded_order, recorded_scan, write_lines

pytestmark = pytest.mark.e2e

CAPACITY = 20
BUYERS = 30
TICKETS = 6  # tickets scanned, each by SCANNERS racing
SCANNERS = 4


@pytest.mark.slow
@pytest.mark.timeout(900)  # beside the --ha topology in the slow lane it took over 300 s
async def test_racing_orders_and_scans_make_a_linearizable_history(
    api: httpx.AsyncClient, token: TokenFactory, tmp_path: Path
) -> None:
    org = token("lin-org-1", "organizer")
    staff = token("lin-staff-1", "staff", org="lin-org-1")
    history = History()
    # Given a tier of 20 tickets, and an order of 6 tickets with a check-in list
    sale = await create_event(api, org, capacity=CAPACITY)
    history.tier(f"{sale['id']}/standard", CAPACITY)
    door_event = await create_event(api, org, capacity=TICKETS)
    door = await checkin_list(api, org, door_event["id"])
    holder = token("lin-holder-1", "buyer")
    r = await place_order(api, holder, door_event["id"], TICKETS)
    assert r.status_code == 202, r.text
    order = r.json()
    codes = await codes_of(api, order, holder)

    # When 30 buyers race for 1-3 tickets each (one Idempotency-Key each; every
    # third one sends its request again once answered, as a buyer whose answer
    # got lost), while 4 scanners race over each of the 6 tickets
    async def buyer(i: int) -> httpx.Response | None:
        tok, key = token(f"lin-buyer-{i}", "buyer"), f"lin-key-{i}-{sale['id']}"
        kw = {"buyer": tok, "event_id": sale["id"], "quantity": 1 + i % 3, "idempotency_key": key}
        first = await recorded_order(api, history, i, **kw)
        if i % 3 == 0 and first is not None:
            # (the same request again is not another operation: it answers the first's outcome)
            again = await place_order(api, tok, sale["id"], 1 + i % 3, idempotency_key=key)
            assert again.status_code == first.status_code, (first.text, again.text)
            if first.status_code == 202:
                assert again.json()["id"] == first.json()["id"]
        return first

    scans = [
        recorded_scan(api, history, BUYERS + s * TICKETS + t, staff=staff, code=codes[t],
                      ticket_id=order["tickets"][t], list_id=door)
        for t in range(TICKETS) for s in range(SCANNERS)
    ]  # fmt: skip
    answers = await asyncio.gather(*(buyer(i) for i in range(BUYERS)), *scans)
    orders, scanned = answers[:BUYERS], answers[BUYERS:]

    # Then every operation got a definite answer, the stock sold is what the
    # 202s took, and each ticket admitted once
    assert all(a is not None for a in answers)
    assert {a.status_code for a in orders if a is not None} <= {202, 409}, [a.text for a in orders if a]
    taken = sum(a.json()["quantity"] for a in orders if a is not None and a.status_code == 202)
    got = (await api.get(f"/v1/events/{sale['id']}", headers=bearer(org))).json()
    assert taken == got["sold"] <= CAPACITY
    assert sorted(a.status_code for a in scanned if a is not None) == [200] * TICKETS + [409] * (
        TICKETS * (SCANNERS - 1)
    )
    statuses = [o.output["status"] for o in history.ops]
    assert "unknown" not in statuses and "none" not in statuses, statuses
    # And the checker finds the history linearizable
    path = history.write(tmp_path / "history.jsonl")
    verdict = check(path, viz=tmp_path / "history.html")
    n_ops = BUYERS + TICKETS * SCANNERS
    assert verdict.code == 0, verdict
    assert verdict.line.startswith(f"ok: {n_ops} operations, {1 + TICKETS} partitions"), verdict
    sold_out = sum(1 for o in history.ops if o.output["status"] == "sold_out")
    print(f"\nLINEARIZABLE: {n_ops} operations ({taken} tickets of {CAPACITY} sold, {sold_out} sold-out answers, "
          f"{TICKETS} tickets x {SCANNERS} scanners)")  # fmt: skip

    # But one flipped answer is caught, whichever: a sold-out answered ok (an
    # oversell: every refused order was bigger than what was left at the end),
    # or an "already" answered as a second admission
    lines = read_lines(path)
    refused = [i for i, line in enumerate(lines) if line.get("output", {}).get("status") == "sold_out"]
    already = [i for i, line in enumerate(lines) if line.get("output", {}).get("status") == "already"]
    assert refused and already
    for i, flipped_to in [(refused[0], "ok"), (refused[-1], "ok"), (already[0], "admitted"), (already[-1], "admitted")]:
        doctored = copy.deepcopy(lines)
        doctored[i]["output"]["status"] = flipped_to
        bad = check(write_lines(tmp_path / f"flipped-{i}.jsonl", doctored))
        model = "capacity" if flipped_to == "ok" else "checkin"
        assert bad.code == 1 and bad.line.startswith(f"not linearizable: model {model}, partition "), bad
        assert doctored[i]["key"] in bad.line
