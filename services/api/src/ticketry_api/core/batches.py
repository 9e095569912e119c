"""The pure rules of the api's one writer (``writes`` does the I/O): how the
queued calls into one collection are cut into ``insert_many`` runs, and which
caller each of a run's write errors belongs to."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
DUPLICATE_KEY = 11000
MAX_DOCS = 2000  # per insert_many; one call's documents are never split
# Per insert_many of the read models' (background) work: what an order's write
# may have to wait behind (~0.3-0.6 ms a document on FerretDB under load).
BACKGROUND_DOCS = 32


def runs(calls: Sequence[T], size: Callable[[T], int], max_docs: int = MAX_DOCS) -> list[list[T]]:
    """``calls`` in order, cut into runs of at most ``max_docs`` documents; a
    call is never split (one bigger than ``max_docs`` makes a run alone)."""
    out: list[list[T]] = []
    docs = 0
    for c in calls:
        n = size(c)
        if not out or (out[-1] and docs + n > max_docs):
            out.append([])
            docs = 0
        out[-1].append(c)
        docs += n
    return out


def outcomes(sizes: Sequence[int], errors: Sequence[Mapping[str, Any]]) -> list[list[int] | Mapping[str, Any]]:
    """Per call of a run (``sizes``: its number of documents, in run order),
    given the run's ``writeErrors``: the indexes of its documents that were
    duplicates (its own numbering), or the first of its errors that is not a
    duplicate."""
    out: list[list[int] | Mapping[str, Any]] = []
    start = 0
    for n in sizes:
        mine = [e for e in errors if start <= e["index"] < start + n]
        other = next((e for e in mine if e.get("code") != DUPLICATE_KEY), None)
        out.append(other if other is not None else [e["index"] - start for e in mine])
        start += n
    return out


def pieces(n: int, size: int = BACKGROUND_DOCS) -> list[range]:
    """``range(n)`` cut into consecutive pieces of at most ``size``."""
    return [range(start, min(start + size, n)) for start in range(0, n, size)]
