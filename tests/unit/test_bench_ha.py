"""The several-hosts bench's figures (bench/ha.py) as plain data: which answer
ends a failover, and when the failovers meet their bound."""

from __future__ import annotations

from typing import Any

from bench.ha import ACCEPT_WITHIN_S, first_202_after, table, verdict

KILLED = 100.0


def test_a_failover_ends_at_the_first_202_to_an_order_sent_after_the_kill() -> None:
    seen = [
        (99.9, 100.2, 202),  # sent before the kill: its replica may have had it already
        (100.1, 100.4, 503),
        (100.3, 103.0, 0),  # no answer
        (102.0, 104.5, 202),
        (101.5, 104.9, 202),  # sent earlier, answered later
    ]
    assert first_202_after(seen, KILLED) == 104.5
    assert first_202_after(seen[:3], KILLED) is None


def _got(times: list[float | None]) -> dict[str, Any]:
    found = [t for t in times if t is not None]
    return {
        "intake": {"connections": 20, "direct_per_s": 160.0, "proxy_per_s": 190.0, "ratio": 190 / 160},
        "failover": {"runs": [{"kill_to_first_202_s": t} for t in times], "median_s": 4.0,
                     "max_s": max(found, default=None), "missed": len(times) - len(found)},
    }  # fmt: skip


def test_the_failovers_meet_their_bound_only_if_every_one_accepted_in_time() -> None:
    assert verdict(_got([4.3, 4.4, 4.2]))
    assert not verdict(_got([4.3, ACCEPT_WITHIN_S + 0.1, 4.2]))
    assert not verdict(_got([4.3, None, 4.2]))  # one never accepted again
    rows = table(_got([4.3, 4.4, 4.2]))
    assert rows[0][1:] == ("160 / 190", "", "1.19×")
    assert rows[1][-1] == "met"
    assert table(_got([4.3, None]))[1][-1] == "not met"
