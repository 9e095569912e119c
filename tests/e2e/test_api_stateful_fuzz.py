"""An integrator's fuzzer over the real stack: schemathesis' CLI with every
check (``--checks all``) and every phase (examples, coverage, fuzzing and the
stateful phase that follows the document's links), once per role: organiser,
buyer, staff (bound to the organiser by ``org``) and admin. Any finding fails.

Bounded by ``TICKETRY_FUZZ_EXAMPLES`` per operation (a fixed seed, so a run is
repeatable); raise it for a longer run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from ticketry.auth import issue_token
from ticketry.settings import DEV_JWT_SECRET
from ticketry_devstack.procs import Stack

pytestmark = pytest.mark.e2e

EXAMPLES = os.environ.get("TICKETRY_FUZZ_EXAMPLES", "10")
ORGANISER = "fuzz-organiser"
CONFIG = Path(__file__).with_name("schemathesis.toml")  # its one exception, and why


def _token(role: str) -> str:
    org = ORGANISER if role == "staff" else None
    sub = ORGANISER if role == "organizer" else f"fuzz-{role}"
    return issue_token(sub, role, key=DEV_JWT_SECRET, ttl_s=3600, org=org)  # type: ignore[arg-type]


@pytest.mark.parametrize("role", ["organizer", "buyer", "staff", "admin"])
def test_schemathesis_all_checks_and_stateful_find_nothing(stack: Stack, role: str, tmp_path: object) -> None:
    cli = shutil.which("schemathesis")
    assert cli is not None
    run = subprocess.run(
        [
            cli, "--config-file", str(CONFIG), "run", f"{stack.api_url}/openapi.json",
            "-H", f"Authorization: Bearer {_token(role)}",
            "--checks", "all", "--phases", "examples,coverage,fuzzing,stateful",
            "-n", EXAMPLES, "--seed", "1", "--suppress-health-check", "all",
            "--request-timeout", "30", "--output-truncate", "false",
        ],
        capture_output=True, text=True, timeout=600, cwd=str(tmp_path),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-20000:] + run.stderr[-5000:]
