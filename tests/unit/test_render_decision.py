"""What becomes of a render request that failed (ticketry_renderer.decision.decide):
retry now, retry after a backoff, or dead-letter with a reason. Plain data, no server."""

from __future__ import annotations

import pytest
from ticketry.backoff import backoff_ceiling
from ticketry_renderer.config import RendererSettings
from ticketry_renderer.decision import (
    FIRST_PART,
    DeadLetter,
    ErrorKind,
    RenderRetryPolicy,
    Retries,
    RetryAfter,
    RetryNow,
    decide,
    parts,
    touch_due,
)

POLICY = RenderRetryPolicy(max_attempts=5, base_s=0.5, cap_s=30.0)


@pytest.mark.parametrize("kind", ["undecodable", "invalid_ids"])
@pytest.mark.parametrize("attempt", [1, 2, 5, 99])
def test_a_permanent_error_is_dead_lettered_at_once_with_its_reason(kind: ErrorKind, attempt: int) -> None:
    got = decide(attempt, kind, "malformed render request: data", POLICY, 0.7)
    assert got == DeadLetter("malformed render request: data", exhausted=False)


@pytest.mark.parametrize("kind", ["render", "storage"])
@pytest.mark.parametrize("attempt", [1, 2, 3, 4])
def test_a_passing_error_with_attempts_left_is_retried_after_a_backoff(kind: ErrorKind, attempt: int) -> None:
    got = decide(attempt, kind, "RenderTimeout: render exceeded 10 s", POLICY, 0.5)
    assert got == RetryAfter(0.5 * 0.5 * 2 ** (attempt - 1))


@pytest.mark.parametrize("attempt", [5, 6, 50])
def test_the_last_attempt_is_dead_lettered_as_exhausted(attempt: int) -> None:
    got = decide(attempt, "render", "IsADirectoryError: [Errno 21]", POLICY, 0.5)
    assert got == DeadLetter("IsADirectoryError: [Errno 21]", exhausted=True)


@pytest.mark.parametrize("attempt", [5, 6, 50])
def test_a_store_outage_is_waited_out_past_the_last_attempt(attempt: int) -> None:
    patient = RenderRetryPolicy(max_attempts=5, base_s=0.5, cap_s=30.0, storage_patience_s=900.0)
    # While the request is younger than the patience: retried, at most the cap apart
    got = decide(attempt, "storage", "StorageUnavailable: S3: connect", patient, 0.5, age_s=899.0)
    assert got == RetryAfter(0.5 * min(30.0, 0.5 * 2 ** (attempt - 1)))
    # Past it: exhausted like any other error
    got = decide(attempt, "storage", "StorageUnavailable: S3: connect", patient, 0.5, age_s=900.0)
    assert got == DeadLetter("StorageUnavailable: S3: connect", exhausted=True)
    # A render error of the same age is not waited out
    assert decide(attempt, "render", "boom", patient, 0.5, age_s=1.0) == DeadLetter("boom", exhausted=True)


def test_one_attempt_means_no_retry() -> None:
    assert decide(1, "render", "boom", RenderRetryPolicy(1, 0.5, 30.0), 0.9) == DeadLetter("boom", exhausted=True)


def test_a_zero_delay_is_a_retry_now() -> None:
    assert decide(1, "render", "boom", POLICY, 0.0) == RetryNow()


@pytest.mark.parametrize(
    ("attempt", "ceiling"), [(0, 0.5), (1, 0.5), (2, 1.0), (3, 2.0), (6, 16.0), (7, 30.0), (10_000, 30.0)]
)
def test_the_delay_ceiling_doubles_up_to_the_cap(attempt: int, ceiling: float) -> None:
    assert backoff_ceiling(attempt, 0.5, 30.0) == ceiling


@pytest.mark.parametrize("jitter", [0.0, 0.25, 0.999999])
def test_the_delay_is_the_jitter_share_of_the_ceiling(jitter: float) -> None:
    got = decide(7, "render", "boom", RenderRetryPolicy(10, 0.5, 30.0), jitter)
    assert got == (RetryNow() if jitter == 0 else RetryAfter(jitter * 30.0))


def test_the_policy_comes_from_the_renderer_settings() -> None:
    settings = RendererSettings(render_max_attempts=3, retry_base_s=0.25, retry_cap_s=4.0, storage_patience_s=60)
    assert RenderRetryPolicy.of(settings) == RenderRetryPolicy(3, 0.25, 4.0, 60.0)


def test_the_retry_book_hands_out_due_entries_by_lane_and_keeps_each_history_until_forgotten() -> None:
    book = Retries()
    # Given two failed entries of one lane and one of another, due at different times
    for lane, entry, due in (("std", "1-0", 10.0), ("std", "2-0", 20.0), ("vip", "3-0", 10.0)):
        book.failed(entry, 1, "boom")
        book.retry_at(lane, entry, due)
    assert book.failed("1-0", 2, "bang") == ["attempt 1: boom", "attempt 2: bang"]
    # Then each lane's due ones come out at their time, and only those wait for a retry
    assert book.due("std", 15.0) == ["1-0"] and book.due("std", 20.0) == ["1-0", "2-0"]
    assert book.due("vip", 9.0) == [] and book.waiting("vip", "3-0") and not book.waiting("std", "3-0")
    # And one forgotten (acked) is due no more and starts its history afresh
    book.forget("std", "1-0")
    assert book.due("std", 99.0) == ["2-0"] and book.failed("1-0", 3, "again") == ["attempt 3: again"]


@pytest.mark.parametrize(("untouched_ms", "due"), [(0, False), (9_999, False), (10_000, True), (60_000, True)])
def test_a_batch_touches_its_entries_once_a_third_of_the_claim_idle_time_passed(untouched_ms: int, due: bool) -> None:
    assert touch_due(untouched_ms, 30_000) is due


def test_a_batch_after_an_idle_lane_is_handled_in_growing_parts_and_a_backlog_whole() -> None:
    # A new order's first tickets go out after a part of 16, then 32, 64, the rest
    assert parts(128, busy=False) == [FIRST_PART, 32, 64, 16]
    assert parts(5, busy=False) == [5]
    assert parts(48, busy=False) == [16, 32]
    # a lane with a backlog (its last read was full) handles each read whole
    assert parts(128, busy=True) == [128]
    assert parts(0, busy=False) == parts(0, busy=True) == []
    for n in range(300):  # every entry is in exactly one part, in order
        assert sum(parts(n, busy=False)) == n and all(p > 0 for p in parts(n, busy=False))
