"""The alert rules in infra/prometheus/ are valid (``promtool check rules``) and
each alert fires and resolves on its unit test's series (``promtool test rules``),
with Debian's promtool (infra/bootstrap.sh installs it)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

RULES_DIR = Path(__file__).resolve().parents[2] / "infra" / "prometheus"
RULES = sorted(RULES_DIR.glob("*.rules.yml"))
TESTS = sorted(RULES_DIR.glob("*_test.yml"))


def rules() -> list[dict[str, str]]:
    return [r for p in RULES for g in yaml.safe_load(p.read_text())["groups"] for r in g["rules"]]


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    assert binary, "promtool missing: run infra/bootstrap.sh (Debian package prometheus)"
    return subprocess.run([binary, *args], cwd=RULES_DIR, capture_output=True, text=True, timeout=120, check=False)


def test_the_rules_are_valid() -> None:
    assert RULES, "no rule files"
    done = promtool("check", "rules", *(p.name for p in RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_fires_and_resolves_in_the_unit_tests() -> None:
    assert TESTS, "no rule unit tests"
    done = promtool("test", "rules", *(p.name for p in TESTS))
    assert done.returncode == 0, done.stdout + done.stderr
    # Each alert has a case where it fires (a non-empty exp_alerts) and one where it does not.
    alerts = {
        r["alert"] for p in RULES for g in yaml.safe_load(p.read_text())["groups"] for r in g["rules"] if "alert" in r
    }
    fired: set[str] = set()
    quiet: set[str] = set()
    for path in TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (fired if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert alerts, "no alerts"
    assert fired == alerts, f"never seen firing: {alerts - fired}"
    assert quiet >= alerts, f"never seen resolved or quiet: {alerts - quiet}"


@pytest.mark.parametrize(
    "alert",
    [
        "TicketryBacklogDrainSlow",
        "TicketryDeadLettersGrowing",
        "TicketryNoLiveRenderer",
        "TicketryApiErrors",
        "TicketryTicketsFailing",
        "TicketryOrderLatencyHigh",
        "TicketryProjectorLagging",
    ],
)
def test_the_operator_alerts_exist(alert: str) -> None:
    # backlog drain time over target, DLQ growing, no live renderer, error rates, POST p99, projector lag
    names = {r.get("alert") for r in rules()}
    assert alert in names


def test_a_broken_unit_test_fails(tmp_path: Path) -> None:
    # promtool's verdict is what the test above trusts: an expectation that is
    # wrong must fail it (so the suite cannot pass on a promtool that checks nothing).
    case = yaml.safe_load((RULES_DIR / "ticketry_test.yml").read_text())
    case["rule_files"] = [str(p) for p in RULES]
    first = case["tests"][0]
    first["alert_rule_test"] = [{"eval_time": "3m", "alertname": "TicketryBacklogDrainSlow", "exp_alerts": []}]
    case["tests"] = [first]
    broken = tmp_path / "broken_test.yml"
    broken.write_text(yaml.safe_dump(case))
    done = promtool("test", "rules", str(broken))
    assert done.returncode != 0
    assert "FAILED" in done.stdout + done.stderr
