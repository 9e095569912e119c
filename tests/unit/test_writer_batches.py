"""The api writer's pure rules (ticketry_api.core.batches): cutting a
collection's queued calls into insert_many runs, and telling each caller which
of its documents were duplicates. Plain data, no server."""

from __future__ import annotations

import itertools

import pytest
from ticketry_api.core.batches import DUPLICATE_KEY, MAX_DOCS, outcomes, runs


def cut(sizes: list[int], max_docs: int = MAX_DOCS) -> list[list[int]]:
    return runs(sizes, lambda n: n, max_docs)


def test_no_calls_make_no_run() -> None:
    assert cut([]) == []


def test_small_calls_share_one_run_in_order() -> None:
    assert cut([1, 5, 2, 1]) == [[1, 5, 2, 1]]


@pytest.mark.parametrize(
    ("sizes", "want"),
    [
        ([MAX_DOCS], [[MAX_DOCS]]),  # exactly the limit: one run
        ([MAX_DOCS - 1, 1], [[MAX_DOCS - 1, 1]]),
        ([MAX_DOCS, 1], [[MAX_DOCS], [1]]),  # one past it: a new run
        ([1, MAX_DOCS], [[1], [MAX_DOCS]]),
        ([MAX_DOCS + 5], [[MAX_DOCS + 5]]),  # a call is never split: bigger alone
        ([3, MAX_DOCS * 3, 2], [[3], [MAX_DOCS * 3], [2]]),
        ([1500, 600, 1400, 600, 1], [[1500], [600, 1400], [600, 1]]),
    ],
)
def test_runs_hold_at_most_max_docs_and_never_split_a_call(sizes: list[int], want: list[list[int]]) -> None:
    assert cut(sizes) == want


def test_runs_keep_every_call_once_in_order() -> None:
    sizes = [(i * 37) % 450 + 1 for i in range(200)]
    got = cut(sizes, 1000)
    assert [n for run in got for n in run] == sizes
    assert all(sum(run) <= 1000 for run in got)
    # a run ends only when its next call would not fit
    assert all(sum(a) + b[0] > 1000 for a, b in itertools.pairwise(got))


def test_calls_are_kept_whole_objects() -> None:
    calls = [("a", 2), ("b", 2), ("c", 2)]
    assert runs(calls, lambda c: c[1], 4) == [[("a", 2), ("b", 2)], [("c", 2)]]


def dup(i: int) -> dict[str, int]:
    return {"index": i, "code": DUPLICATE_KEY}


def test_a_run_without_errors_has_no_duplicates_for_anyone() -> None:
    assert outcomes([2, 1, 3], []) == [[], [], []]


def test_duplicates_go_to_their_call_numbered_from_its_first_document() -> None:
    # calls of 2, 1 and 3 documents: run indexes 0-1, 2, 3-5
    assert outcomes([2, 1, 3], [dup(1), dup(3), dup(5)]) == [[1], [], [0, 2]]


def test_a_call_boundary_belongs_to_the_later_call() -> None:
    assert outcomes([2, 2], [dup(2)]) == [[], [0]]


def test_another_error_is_its_calls_alone_and_wins_over_its_duplicates() -> None:
    other = {"index": 4, "code": 121, "errmsg": "validation"}
    assert outcomes([2, 3], [dup(0), dup(2), other]) == [[0], other]


def test_empty_calls_get_nothing() -> None:
    assert outcomes([0, 2, 0], [dup(0)]) == [[], [0], []]
