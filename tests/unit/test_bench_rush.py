"""The rush bench's verdicts (bench/rush.py) as plain data: what a burst's
answers must be, and the waiting room's order checks read back from the line."""

from __future__ import annotations

from typing import Any

import pytest

from bench.rush import Answer, admitted_out_of_line, answer_class, burst_verdict, placed_out_of_order

PACED = 400.0  # accepted/s


def burst(statuses: dict[str, int], accepted_per_s: float, *, max_s: float = 2.0) -> dict[str, Any]:
    return {
        "sent": sum(statuses.values()), "statuses": statuses, "accepted_per_s": accepted_per_s,
        "shed": statuses.get("503", 0), "max_s": max_s,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (Answer(202), "202"),
        (Answer(409), "409"),
        (Answer(503, headers={"retry-after": "2"}), "503"),
        (Answer(503), "503 without Retry-After"),
        (Answer(500), "500"),
        (Answer(0, "timeout"), "timeout"),
        (Answer(0, "connection error"), "connection error"),
    ],
)
def test_each_answer_counts_as_its_class(answer: Answer, expected: str) -> None:
    assert answer_class(answer) == expected


@pytest.mark.parametrize(
    ("statuses", "rate", "max_s", "failed"),
    [
        # at the paced rate, all accepted
        ({"202": 500}, 470.0, 1.0, []),
        # slower than 80 %, the excess shed: 0.5 of paced leaves 1 - 0.5/0.8 = 37.5 % to shed
        ({"202": 200, "503": 300}, 200.0, 1.0, []),
        ({"202": 312, "503": 188}, 200.0, 1.0, []),
        # the case: everything accepted slowly, nobody shed
        ({"202": 500}, 37.0, 13.5, ["accepted at 0.09"]),
        # a few shed, the rest kept waiting
        ({"202": 460, "503": 40}, 200.0, 2.5, ["fewer than the excess (188)"]),
        # answers that are not allowed, whatever the rate
        ({"202": 99, "500": 401}, 470.0, 1.0, ["not allowed: 401 × 500"]),
        ({"202": 490, "503 without Retry-After": 10}, 470.0, 1.0, ["not allowed: 10 × 503 without Retry-After"]),
        ({"202": 497, "timeout": 2, "connection error": 1}, 470.0, 30.0, ["1 × connection error, 2 × timeout"]),
        # too slow an answer
        ({"202": 500}, 470.0, 31.0, ["took 31.0 s"]),
    ],
)
def test_burst_verdict(statuses: dict[str, int], rate: float, max_s: float, failed: list[str]) -> None:
    got = burst_verdict(PACED, burst(statuses, rate, max_s=max_s))
    assert len(got) == len(failed), got
    for reason, part in zip(got, failed, strict=True):
        assert part in reason


def test_later_arrivals_in_arrival_order_pass() -> None:
    # (join sent, join answered, score): each answered before the next was sent
    late = [(0.0, 1.0, 1.0), (2.0, 3.0, 2.0), (4.0, 5.0, 3.0)]
    assert placed_out_of_order(late) == 0


def test_a_later_arrival_placed_ahead_of_an_earlier_one_is_counted() -> None:
    # the third joined after the first was answered, yet holds a place ahead of it
    late = [(0.0, 1.0, 2.0), (2.0, 3.0, 3.0), (4.0, 5.0, 1.5)]
    assert placed_out_of_order(late) == 1


def test_concurrent_joins_may_be_placed_either_way() -> None:
    # both sent before either was answered: the api may place them in any order
    late = [(0.0, 2.0, 2.0), (1.0, 3.0, 1.0)]
    assert placed_out_of_order(late) == 0


def test_admitted_ahead_of_their_place_is_counted() -> None:
    line = ["a", "b", "c", "d"]
    assert admitted_out_of_line(line, 2, ["a", "b"]) == 0
    assert admitted_out_of_line(line, 2, ["a", "d"]) == 1
