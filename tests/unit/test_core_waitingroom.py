"""The waiting room's pure rules (ticketry_api.core.waitingroom): places,
positions, the admission rate (table), whole admissions per tick, permissions."""

from __future__ import annotations

import statistics

import pytest
from ticketry_api.core import waitingroom
from ticketry_api.core.waitingroom import RateLimits, Signals

LIM = RateLimits(min_rate=1.0, max_rate=1000.0, step=10.0, backoff=0.5, probe=1.2, window_s=5.0, window_min=20)


def sig(capacity: float = 100.0, used: float = 0.0, shed: float = 0.0, outstanding: int = 0) -> Signals:
    return Signals(capacity_per_s=capacity, used_per_s=used, shed_per_s=shed, outstanding=outstanding)


@pytest.mark.parametrize(
    ("prev", "signals", "expected", "why"),
    [
        (1.0, sig(), 11.0, "healthy: one step up"),
        (115.0, sig(capacity=100.0), 120.0, "healthy: up to 1.2x the measured capacity, no further"),
        (200.0, sig(capacity=100.0), 120.0, "capacity fell: straight down to what it sustains"),
        (100.0, sig(used=80.0, shed=3.0), 40.0, "503s: half of what went through"),
        (30.0, sig(used=80.0, shed=3.0), 15.0, "503s: never above the last rate"),
        (2.0, sig(used=0.0, shed=5.0), 1.0, "503s: never below the floor"),
        (50.0, sig(used=12.0, outstanding=400), 12.0, "unused permissions pile up: as fast as they are used"),
        (50.0, sig(used=0.0, outstanding=400), 1.0, "nobody uses them: the floor"),
        (50.0, sig(used=12.0, outstanding=240), 60.0, "within the window (50/s x 5 s): keep probing"),
        (5.0, sig(used=1.0, outstanding=20), 15.0, "the window never below 20 permissions"),
        (995.0, sig(capacity=5000.0), 1000.0, "never above the ceiling"),
        (1.0, sig(capacity=0.0), 1.0, "nothing measured: the floor"),
    ],
)
def test_admission_rate(prev: float, signals: Signals, expected: float, why: str) -> None:
    assert waitingroom.admission_rate(prev, signals, LIM) == pytest.approx(expected), why


@pytest.mark.parametrize(
    ("rate", "dt", "carry", "waiting", "left", "outstanding", "expected"),
    [
        (10.0, 1.0, 0.0, 100, 100, 0, (10, 0.0)),
        (2.5, 1.0, 0.0, 100, 100, 0, (2, 0.5)),  # the half carries over …
        (2.5, 1.0, 0.5, 100, 100, 0, (3, 0.0)),  # … and is admitted next tick
        (10.0, 1.0, 0.0, 4, 100, 0, (4, 0.0)),  # never more than wait
        (10.0, 1.0, 0.0, 100, 7, 2, (5, 0.0)),  # never more than the tickets left beyond permissions out
        (10.0, 1.0, 0.0, 100, 5, 9, (0, 0.0)),  # every ticket left may go to a permission already out
        (10.0, 0.0, 0.0, 100, 100, 0, (0, 0.0)),
        (0.4, 1.0, 0.9, 100, 100, 0, (1, 0.3)),
    ],
)
def test_to_admit(
    rate: float, dt: float, carry: float, waiting: int, left: int, outstanding: int, expected: tuple[int, float]
) -> None:
    n, rest = waitingroom.to_admit(rate, dt, carry, waiting=waiting, tickets_left=left, outstanding=outstanding)
    assert (n, round(rest, 6)) == expected


def test_early_scores_are_a_fair_draw_before_every_later_place() -> None:
    draws = [waitingroom.early_score() for _ in range(20_000)]
    assert all(0.0 <= d < waitingroom.EARLY_LIMIT and waitingroom.is_early(d) for d in draws)
    assert len(set(draws)) == len(draws)  # no ties in practice
    # Uniform: each tenth of [0, 1) gets its share (±15 %), the mean is ½.
    per_tenth = [sum(1 for d in draws if k / 10 <= d < (k + 1) / 10) for k in range(10)]
    assert min(per_tenth) > 1700 and max(per_tenth) < 2300, per_tenth
    assert statistics.mean(draws) == pytest.approx(0.5, abs=0.02)
    later = [waitingroom.late_score(n) for n in (1, 2, 3)]
    assert later == sorted(later) and all(not waitingroom.is_early(s) and s > max(draws) for s in later)


@pytest.mark.parametrize(
    ("rank", "admitted", "drawn", "expected"),
    [(0, 0, True, 1), (9, 0, True, 10), (9, 4, True, 6), (3, 4, True, 0), (3, 400, True, 0), (5, 0, False, None)],
)
def test_position(rank: int, admitted: int, drawn: bool, expected: int | None) -> None:
    assert waitingroom.position(rank, admitted, drawn=drawn) == expected


def test_positions_only_move_forward_as_admission_grows() -> None:
    for rank in (0, 1, 17, 250):
        seen = [waitingroom.position(rank, a, drawn=True) for a in range(0, 300, 7)]
        assert all(p is not None for p in seen)
        assert seen == sorted(seen, key=lambda p: -(p or 0)), rank


def test_eta() -> None:
    assert waitingroom.eta_s(10, 5.0) == 2.0
    assert waitingroom.eta_s(0, 5.0) == 0.0
    assert waitingroom.eta_s(None, 5.0, until_on_sale_s=12.34) == 12.3  # not drawn: the time to the sale
    assert waitingroom.eta_s(None, 5.0) is None
    assert waitingroom.eta_s(10, 5.0, until_on_sale_s=3.0) == 5.0


KEY = waitingroom.permission_key("x" * 32)


def test_permission_for_its_buyer_and_event_only() -> None:
    token = waitingroom.sign_permission(KEY, "ev_1", "alice", "qu_1", 2_000)
    got = waitingroom.verify_permission(KEY, token, "ev_1", "alice", 1_000)
    assert got == waitingroom.Permission("qu_1", 2_000)
    bad: list[tuple[bytes, str | None, str, str, int]] = [
        (KEY, token, "ev_1", "bob", 1_000),  # another buyer's
        (KEY, token, "ev_2", "alice", 1_000),  # another event
        (KEY, token, "ev_1", "alice", 2_000),  # expired
        (waitingroom.permission_key("y" * 32), token, "ev_1", "alice", 1_000),  # another secret
        (KEY, token.replace(".2000.", ".9000."), "ev_1", "alice", 1_000),  # expiry stretched
        (KEY, None, "ev_1", "alice", 1_000),
        (KEY, "", "ev_1", "alice", 1_000),
        (KEY, "QP1.qu_1.x.y", "ev_1", "alice", 1_000),
        (KEY, "eyJhbGciOiJIUzI1NiJ9.e30.sig", "ev_1", "alice", 1_000),  # a token is no permission
    ]
    for args in bad:
        with pytest.raises(waitingroom.BadPermission):
            waitingroom.verify_permission(*args)


@pytest.mark.parametrize(
    ("max_queue", "rate", "expected"),
    [
        (100_000, 0.0, 60),  # no rate yet: a minute
        (100_000, 100.0, 100),  # a tenth of the line at 100/s
        (100_000, 10.0, 300),  # capped at 5 minutes
        (1_000, 500.0, 1),  # at least a second
        (5, 1.0, 1),  # a tiny bound: one place
    ],
)
def test_full_retry_after(max_queue: int, rate: float, expected: int) -> None:
    assert waitingroom.full_retry_after_s(max_queue, rate) == expected
