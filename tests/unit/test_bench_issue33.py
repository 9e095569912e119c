"""``just bench``'s issue-33 figures (bench/renderer_cpu.py, bench/intake.py) as
plain data: their table rows, and which scenarios a run's options select."""

from __future__ import annotations

from typing import Any

import pytest

from bench import intake, renderer_cpu
from bench.__main__ import SCENARIOS, Measured, _parse_args, _reported, _rows, wanted


def _side(ms: float, kb: float, order_mb: float, shared_mb: float | None) -> dict[str, Any]:
    side: dict[str, Any] = {
        "ascii": {"cpu_ms_per_ticket_median": ms, "cpu_ms_per_ticket_min": ms - 0.1, "pdf_bytes_mean": kb * 1000},
        "intl": {"cpu_ms_per_ticket_median": ms * 2, "cpu_ms_per_ticket_min": ms, "pdf_bytes_mean": kb * 1000},
        "order_pdf_bytes": {"tickets": 1000, "parts": 4, "bytes": order_mb * 1e6},
    }
    if shared_mb is not None:
        side["order_pdf_shared"] = {"tickets": 1000, "bytes": shared_mb * 1e6, "cpu_ms": 90.0}
    return side


def test_renderer_rows_give_this_tree_the_target_and_the_earlier_revision_and_their_ratio() -> None:
    got = renderer_cpu.rows(
        {"now": _side(0.5, 24.0, 20.0, 1.5), "before": {**_side(1.6, 40.0, 30.0, None), "rev": "c0d30fa0123"}}
    )
    assert got[0] == ("renderer CPU ms per ticket, ASCII names (ms)", "0.500 (least 0.400)",
                      "≤ 0.6; c0d30fa: 1.600 (least 1.500)", "0.31×")  # fmt: skip
    assert got[2][0] == "kB per single-ticket PDF, ASCII (kB)"
    assert got[2][1:] == ("24.0", "≤ 25; c0d30fa: 40.0", "0.60×")
    assert got[4][0] == "MB of a 1,000-ticket order's download-all (api join) (MB)"
    assert got[4][1:] == ("20.0", "≤ 3; c0d30fa: 30.0", "0.67×")
    # the earlier revision had no order PDF with shared pages: no value, no ratio
    assert got[5][1:] == ("1.5", "≤ 3", "")


def test_renderer_rows_without_an_earlier_revision_show_the_targets_only() -> None:
    got = renderer_cpu.rows({"now": _side(0.5, 24.0, 20.0, 1.5)})
    assert [r[2] for r in got] == ["≤ 0.6", "≤ 0.6", "≤ 25", "≤ 25", "≤ 3", "≤ 3"]
    assert {r[3] for r in got} == {""}


def _leg(workers: int, cpu: float, p99: float | None, done: bool) -> dict[str, Any]:
    return {
        "workers": workers,
        "api_cpu_ms_per_order": cpu,
        "api_idle_cpu_ms_per_s": 12.34,
        "post": {"sent": 4000, "refused": 3, "accepted_per_s": 199.6, "p50_ms": 8.04, "p99_ms": p99,
                 "big_order_done_during_load": done},
    }  # fmt: skip


def test_intake_rows_per_worker_count_cpu_p99_and_what_was_accepted() -> None:
    got = intake.rows(
        {"rate": 200.0, "seconds": 20.0, "orders": 400, "big": 4000,
         "legs": [_leg(1, 1.6, 100.0, False), _leg(2, 0.8, None, True)]}
    )  # fmt: skip
    assert got[0] == ("api CPU per one-ticket order, 1 api worker (ms)", "1.60 (12.3 ms/s idle)", "≤ 0.8", "2.00×")
    assert got[1] == ("POST /v1/orders at 200/s with renderers busy, 1 api worker: p99 / p50 (ms)",
                      "100.0 / 8.0", "p99 ≤ 50", "2.00×")  # fmt: skip
    assert got[2][1] == "199.6; 3 / 4000; the whole load"
    assert got[3][0] == "api CPU per one-ticket order, 2 api workers (ms)"
    assert got[4][1:] == ("n/a / 8.0", "p99 ≤ 50", "")  # nothing accepted: no p99
    assert got[5][1].endswith("done before the load ended")


def test_every_scenario_runs_by_default_and_the_ab_only_with_a_revision() -> None:
    args = _parse_args([])
    assert [n for n in SCENARIOS if not wanted(args, n)] == ["against"]
    assert wanted(_parse_args(["--against", "c0d30fa"]), "against")


def test_skip_options_quick_and_against_only_leave_scenarios_out() -> None:
    args = _parse_args(["--no-renderer-cpu", "--no-intake"])
    assert not wanted(args, "renderer-cpu") and not wanted(args, "intake") and wanted(args, "core")
    quick = _parse_args(["--quick"])
    assert wanted(quick, "renderer-cpu") and wanted(quick, "core")
    assert not wanted(quick, "intake") and not wanted(quick, "flood")
    ab = _parse_args(["--against", "c0d30fa", "--against-only"])
    assert [n for n in SCENARIOS if wanted(ab, n)] == ["against"]


def test_only_runs_just_the_named_scenarios() -> None:
    args = _parse_args(["--only", "renderer-cpu, intake", "--no-intake", "--quick"])
    assert [n for n in SCENARIOS if wanted(args, n)] == ["renderer-cpu", "intake"]
    args = _parse_args(["--only", "intake,against", "--against", "c0d30fa"])
    assert [n for n in SCENARIOS if wanted(args, n)] == ["intake", "against"]


@pytest.mark.parametrize(
    "argv",
    [["--only", "renderer"], ["--only", ","], ["--only", "against"],
     ["--only", "intake", "--against", "c0d30fa", "--against-only"]],
)  # fmt: skip
def test_an_unknown_scenario_or_an_ab_without_its_revision_is_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        _parse_args(argv)
    assert exc.value.code == 2


def test_the_intake_sizes_are_options() -> None:
    args = _parse_args(["--intake-workers", "0", "--intake-orders", "50", "--renderer-cpu-tickets", "100"])
    assert (args.intake_workers, args.intake_orders, args.renderer_cpu_tickets) == ([0], 50, 100)
    assert (_parse_args([]).intake_workers, _parse_args([]).intake_rate) == ([1, 0], 200.0)


def test_a_scenario_that_raises_is_named_and_the_run_goes_on() -> None:
    out: dict[str, Any] = {}
    with _reported(out, "intake"):
        raise RuntimeError("stack did not start")
    with _reported(out, "renderer_cpu"):
        pass
    assert out == {"errors": ["intake: RuntimeError: stack did not start"]}


def test_without_the_core_the_table_has_only_the_rows_of_what_ran() -> None:
    m = Measured(renderer_cpu_rows=[("a", "1", "", "")], intake_rows=[("b", "2", "", "")])
    assert _rows(m, core=False) == [("a", "1", "", ""), ("b", "2", "", "")]
    assert _rows(m)[-2:] == [("a", "1", "", ""), ("b", "2", "", "")]
