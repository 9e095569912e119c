"""The Redis client's retry (``ticketry.db.BudgetRetry``) reads uvloop's
"handler is closed" (a write on a transport the vanished peer closed: a
primary killed mid-failover) as the lost connection it is: retried on a fresh
connection, and if that fails too, a ``ConnectionError`` (answered 503), never
a ``RuntimeError`` (a 500)."""

from __future__ import annotations

import pytest
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError
from ticketry.db import BudgetRetry, request_budget

CLOSED = RuntimeError("unable to perform operation on <TCPTransport closed=True>; the handler is closed")


def _retry() -> BudgetRetry:
    return BudgetRetry(NoBackoff(), retries=2, supported_errors=(ConnectionError,))


class Flaky:
    """A command whose first ``failures`` sends hit a closed transport."""

    def __init__(self, failures: int, error: Exception = CLOSED) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0
        self.dropped: list[Exception] = []

    async def do(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "PONG"

    async def fail(self, error: Exception) -> None:
        self.dropped.append(error)


@pytest.mark.parametrize("budget", [None, 5.0])
async def test_a_closed_transport_is_retried_like_a_dropped_connection(budget: float | None) -> None:
    flaky = Flaky(failures=1)
    if budget is None:
        got = await _retry().call_with_retry(flaky.do, flaky.fail)
    else:
        with request_budget(budget):
            got = await _retry().call_with_retry(flaky.do, flaky.fail)
    assert got == "PONG" and flaky.calls == 2
    assert [type(e) for e in flaky.dropped] == [ConnectionError]  # the broken connection is dropped


async def test_a_transport_that_stays_closed_ends_as_a_connection_error() -> None:
    flaky = Flaky(failures=10)
    with pytest.raises(ConnectionError, match="handler is closed"):
        await _retry().call_with_retry(flaky.do, flaky.fail)
    assert flaky.calls == 3


async def test_any_other_runtime_error_is_left_alone() -> None:
    flaky = Flaky(failures=1, error=RuntimeError("something else"))
    with pytest.raises(RuntimeError, match="something else"):
        await _retry().call_with_retry(flaky.do, flaky.fail)
    assert flaky.calls == 1 and flaky.dropped == []
