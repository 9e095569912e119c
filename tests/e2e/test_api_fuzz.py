"""Property-based fuzzing of the api from its own OpenAPI (schemathesis) against
the running stack: no input may produce a 5xx, and every response must match
the documented status codes, content types and schemas.

Bounded (``MAX_EXAMPLES`` per operation and mode, no example database: about
a minute per role and mode on two cores) in ``just test``, where the
independent schemathesis run (test_api_stateful_fuzz.py: every check, both
modes, stateful links, four roles) covers the same operations too; raise
``TICKETRY_FUZZ_EXAMPLES`` for a longer run. (schemathesis' lazy pytest integration, ``from_fixture``, does not
work with pytest 9, so each operation's strategy is driven with ``@given``.)
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from ticketry.auth import issue_token
from ticketry.settings import DEV_JWT_SECRET
from ticketry_devstack.procs import Stack

pytestmark = pytest.mark.e2e

MAX_EXAMPLES = int(os.environ.get("TICKETRY_FUZZ_EXAMPLES", "15"))
CHECKS = [not_a_server_error, response_schema_conformance, status_code_conformance, content_type_conformance]


def run_operation(operation: Any, mode: GenerationMode, base_url: str, headers: dict[str, str]) -> None:
    @given(case=operation.as_strategy(mode))
    @settings(
        max_examples=MAX_EXAMPLES, deadline=None, database=None, derandomize=True,
        suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
    )  # fmt: skip
    def check(case: Any) -> None:
        case.call_and_validate(base_url=base_url, headers=headers, checks=CHECKS, timeout=30)

    check()


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["positive", "negative"])
@pytest.mark.parametrize("role", ["admin", "buyer"])
def test_api_answers_every_input_without_5xx(stack: Stack, mode: GenerationMode, role: str) -> None:
    schema = schemathesis.openapi.from_url(f"{stack.api_url}/openapi.json", timeout=30)
    # Admin may call every route, so the fuzzer gets past auth into the handlers;
    # a buyer also meets the role and ownership checks.
    tok = issue_token(f"fuzz-{role}", role, key=DEV_JWT_SECRET)  # type: ignore[arg-type]
    headers = {"Authorization": f"Bearer {tok}"}
    failures = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10
    for op in operations:
        try:
            run_operation(op, mode, stack.api_url, headers)
        except Unsatisfiable:
            # Nothing to make invalid: the operation takes no parameters and no body.
            assert mode == GenerationMode.NEGATIVE and not op.path_parameters and op.path in ("/healthz", "/readyz")
        except Exception as exc:
            failures.append(f"{op.method.upper()} {op.path}: {exc}")
    assert not failures, "\n\n".join(failures)
