"""``just bench --against <rev>`` (bench/against.py) as plain data: the order of
the rounds, each side's median and the ratio, the table rows, the options."""

from __future__ import annotations

import pytest

from bench.__main__ import _parse_args
from bench.against import HERE, THERE, met, rows, schedule, summarise


def test_the_sides_alternate_this_tree_first_every_round() -> None:
    assert schedule(2) == [(1, HERE), (1, THERE), (2, HERE), (2, THERE)]
    assert [side for _, side in schedule(3)] == [HERE, THERE] * 3


@pytest.mark.parametrize("rounds", [0, 1, -3])
def test_fewer_than_two_rounds_a_side_is_refused(rounds: int) -> None:
    with pytest.raises(ValueError, match="at least 2"):
        schedule(rounds)


def test_each_side_has_its_median_and_the_ratio_is_this_tree_over_rev() -> None:
    got = summarise({HERE: [900.0, 1100.0, 1000.0], THERE: [480.0, 520.0]})
    assert got["median"] == {HERE: 1000.0, THERE: 500.0}
    assert got["ratio"] == 2.0
    assert got["tickets_per_s"][HERE] == [900.0, 1100.0, 1000.0]


def test_a_side_without_a_measured_round_has_no_median_and_no_ratio() -> None:
    got = summarise({HERE: [900.0, 1100.0], THERE: []})
    assert got["median"] == {HERE: 1000.0, THERE: None}
    assert got["ratio"] is None
    assert summarise({THERE: [500.0]})["ratio"] is None


def _run(here: list[float], there: list[float]) -> dict[str, object]:
    return {"rev": "c0d30fa", "quantity": 10_000, "summary": summarise({HERE: here, THERE: there})}


def test_the_rows_show_the_medians_the_ratio_and_each_round() -> None:
    got = rows(_run([1210.0, 1190.0], [530.5, 540.0]))
    assert got[0] == (
        "end to end A/B, 10,000-ticket order: this tree vs c0d30fa, median (tickets/s)",
        "1,200 vs 535",
        "≥ 2×",
        "2.24×",
    )
    assert got[1][1] == "1,210, 1,190 / 530, 540"
    assert rows(_run([1200.0, 1100.0], []))[1][1] == "1,200, 1,100 / n/a"


def test_the_target_is_twice_the_revisions_tickets_per_second() -> None:
    assert met(_run([1000.0, 1000.0], [500.0, 500.0]))
    assert not met(_run([999.0, 999.0], [500.0, 500.0]))
    assert not met(_run([1000.0, 1000.0], []))


def test_the_options_run_the_ab_alone_or_beside_the_rest() -> None:
    args = _parse_args(["--against", "c0d30fa"])
    assert (args.against, args.against_rounds, args.against_only) == ("c0d30fa", 3, False)
    args = _parse_args(["--against", "HEAD~3", "--against-rounds", "2", "--against-only"])
    assert (args.against, args.against_rounds, args.against_only) == ("HEAD~3", 2, True)
    assert _parse_args([]).against is None


@pytest.mark.parametrize("argv", [["--against-only"], ["--against", "c0d30fa", "--against-rounds", "1"]])
def test_an_ab_without_a_revision_or_with_one_round_is_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        _parse_args(argv)
    assert exc.value.code == 2
