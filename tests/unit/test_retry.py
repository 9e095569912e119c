"""How a Redis loop rides out a failed step (ticketry.retry): which failure is
which, how long it waits, when it logs. Plain data, and one loop's log lines
with its stop already set (no waiting)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from redis.exceptions import BusyLoadingError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from ticketry.retry import Decision, Retrying, RetryPolicy, decide, kind_of

POLICY = RetryPolicy()


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (RedisConnectionError("Connection refused"), "unavailable"),
        (RedisTimeoutError("Timeout reading from socket"), "unavailable"),
        (BusyLoadingError("Redis is loading the dataset in memory"), "unavailable"),
        (ResponseError("NOGROUP No such key 'ticketry:ticket-events' or consumer group 'projector'"), "nogroup"),
        (ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"), "redis"),
        (ValueError("a bad batch"), "other"),
        (ConnectionError("not Redis's"), "other"),
    ],
)
def test_each_failure_has_its_kind(exc: Exception, kind: str) -> None:
    assert kind_of(exc) == kind


def test_an_outage_backs_off_doubling_up_to_the_cap() -> None:
    assert [POLICY.backoff(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 2.0, 2.0, 2.0]
    assert RetryPolicy(first_s=0.1, cap_s=1.0, factor=3.0).backoff(3) == pytest.approx(0.9)


def test_an_outage_is_logged_once_when_it_starts() -> None:
    failures, logged, waits = 0, [], []
    for _ in range(5):
        d = decide(POLICY, "unavailable", failures)
        failures = d.failures
        logged.append(d.log)
        waits.append(d.wait_s)
    assert logged == [True, False, False, False, False]
    assert waits == [0.5, 1.0, 2.0, 2.0, 2.0] and failures == 5


def test_a_missing_group_is_made_again_at_once() -> None:
    assert decide(POLICY, "nogroup", 0) == Decision(0.0, log=False, failures=0)


def test_other_failures_wait_their_own_time_are_always_logged_and_keep_the_outage() -> None:
    assert decide(POLICY, "redis", 3) == Decision(POLICY.redis_error_s, log=True, failures=3)
    assert decide(POLICY, "other", 3) == Decision(POLICY.error_s, log=True, failures=3)
    assert decide(RetryPolicy(error_s=0.5), "other", 0).wait_s == 0.5


async def test_a_loop_logs_an_outage_once_and_its_end_once(caplog: pytest.LogCaptureFixture) -> None:
    stop = asyncio.Event()
    stop.set()  # every wait ends at once
    retry = Retrying("projector", logging.getLogger("test.retry"), stop)
    caplog.set_level(logging.INFO, logger="test.retry")
    for _ in range(4):
        assert await retry.failed(RedisConnectionError("Connection refused")) == "unavailable"
    retry.ok()
    retry.ok()
    assert await retry.failed(ResponseError("NOGROUP no group")) == "nogroup"
    assert [r.getMessage() for r in caplog.records] == [
        "projector: redis unavailable, retrying",
        "projector: redis is back",
    ]
    assert getattr(caplog.records[1], "failures", None) == 4
