"""One writer of inserts per api process, with group commit.

SQLite (FerretDB v1's backend) takes one write transaction at a time per
database; concurrent writers wait in its busy handler, which sleeps 1, 2, 5,
10 ms… between tries (at p99, 8 concurrent single inserts wait about ten
times as long as one at a time; docs/performance-notes.md). So the api's hot
inserts — ledger entries, orders, tickets, the projector's read models — queue
here instead, and one task writes them: the calls into one collection that
queued meanwhile go as one ``insert_many(ordered=False)``, one transaction.
Busy sleeps go away, and the store's cost per order falls as the load rises.
On MongoDB this costs one queue hop and batches the same way.

The read models' inserts (the projector's) are *background* work: cut into
pieces of ``BACKGROUND_DOCS``, one piece after each round of the other
inserts. An order's write then waits behind at most one small piece, not a
whole batch of ticket states (which put 40-75 ms in the p99 of
``POST /v1/orders`` while renderers render; docs/performance.md).

One :class:`Writer` per process, made at start-up (the api's lifespan; a
``ticketryctl`` command that writes makes its own). ``insert`` answers which
of the caller's documents were duplicates (unique ``_id`` or index), so each
caller keeps the meaning its unique keys give it.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import BulkWriteError

from ticketry_api.core.batches import BACKGROUND_DOCS, outcomes, pieces, runs

T = TypeVar("T")


@dataclass(eq=False)
class _Call:
    col: AsyncCollection[Any]
    docs: Sequence[Mapping[str, Any]]
    done: asyncio.Future[list[int]]
    # written next, in the same round, if this one met no duplicate
    then: list[_Call] = field(default_factory=list)


Step = tuple[AsyncCollection[Any], Sequence[Mapping[str, Any]]]


class Chain:
    """Steps written one after the other, each once the one before went in
    without a duplicate, all in one round of the writer (an order, then its
    tickets: one wait, not two)."""

    def __init__(self, steps: Sequence[Step]) -> None:
        self.size = len(steps)
        loop = asyncio.get_running_loop()
        self._calls = [(i, _Call(col, docs, loop.create_future())) for i, (col, docs) in enumerate(steps) if docs]
        for (_, before), (_, after) in itertools.pairwise(self._calls):
            before.then.append(after)

    @property
    def head(self) -> _Call | None:
        return self._calls[0][1] if self._calls else None

    async def written(self) -> tuple[int, list[int]]:
        """``(i, duplicates)`` for the first step ``i`` that met duplicates (the
        later ones are not written), else ``(len(steps), [])``. Other write
        errors raise."""
        for i, call in self._calls:
            if dups := await call.done:
                return i, dups
        return self.size, []


class Writer:
    """This process's one writer: the inserts that queue while it writes go
    together in the next round."""

    def __init__(self) -> None:
        self._pending: list[_Call] = []
        self._background: list[_Call] = []  # pieces of at most BACKGROUND_DOCS, first come, first written
        self._task: asyncio.Task[None] | None = None

    async def insert(
        self, col: AsyncCollection[Any], docs: Sequence[Mapping[str, Any]], then: Sequence[Chain] = ()
    ) -> list[int]:
        """Insert ``docs`` into ``col`` (in a batch with other callers'); the
        indexes of those that were duplicates. Other write errors raise. Each chain
        of ``then`` follows in the same round if none was a duplicate (and is not
        written otherwise)."""
        if not docs:
            return []
        call = _Call(col, docs, asyncio.get_running_loop().create_future())
        call.then = [c.head for c in then if c.head is not None]
        self._submit(call)
        return await call.done

    @property
    def background_waiting(self) -> int:
        """Pieces of background work queued, not yet being written."""
        return len(self._background)

    async def insert_background(self, col: AsyncCollection[Any], docs: Sequence[Mapping[str, Any]]) -> list[int]:
        """:meth:`insert`, as background work: written in pieces, one after each
        round of the other inserts. The indexes of the duplicates; other write errors
        raise (after every piece is settled)."""
        loop = asyncio.get_running_loop()
        cuts = pieces(len(docs))
        calls = [_Call(col, docs[r.start : r.stop], loop.create_future()) for r in cuts]
        self._background.extend(calls)
        self._wake()
        got = await asyncio.gather(*(c.done for c in calls), return_exceptions=True)
        dups: list[int] = []
        for r, outcome in zip(cuts, got, strict=True):
            if isinstance(outcome, BaseException):
                raise outcome
            dups.extend(r.start + i for i in outcome)
        return dups

    async def insert_chain(self, steps: Sequence[Step]) -> tuple[int, list[int]]:
        """Write a :class:`Chain` of ``steps``; see :meth:`Chain.written`."""
        chain = Chain(steps)
        self.start(chain)
        return await chain.written()

    def start(self, chain: Chain) -> None:
        """Queue ``chain`` on its own (not behind another write)."""
        if chain.head is not None:
            self._submit(chain.head)

    def _submit(self, call: _Call) -> None:
        self._pending.append(call)
        self._wake()

    def _wake(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._write_pending())

    async def _write_pending(self) -> None:
        """Until nothing waits: a round of what waits, then one background piece
        (so neither starves the other)."""
        while self._pending or self._background:
            if self._pending:
                await self._round()
            if self._background:
                await self._piece()

    async def _round(self) -> None:
        """What waits now: per collection (first come, first written) one
        ``insert_many`` per ``MAX_DOCS`` documents (a bigger call alone); a chain's
        next step joins the same round."""
        work: dict[str, list[_Call]] = {}
        for c in self._pending:
            work.setdefault(c.col.full_name, []).append(c)
        self._pending = []
        while work:
            group = work.pop(next(iter(work)))
            for run in runs(group, lambda c: len(c.docs)):
                for c in await _write(run):
                    for t in c.then:
                        work.setdefault(t.col.full_name, []).append(t)

    async def _piece(self) -> None:
        """One background ``insert_many``: the first pieces of one collection, at most ``BACKGROUND_DOCS``."""
        first = self._background[0].col.full_name
        piece: list[_Call] = []
        docs = 0
        for c in self._background:
            if c.col.full_name != first or (piece and docs + len(c.docs) > BACKGROUND_DOCS):
                break
            piece.append(c)
            docs += len(c.docs)
        del self._background[: len(piece)]
        await _write(piece)


async def _write(batch: list[_Call]) -> list[_Call]:
    """One ``insert_many``; settles each call, and returns those without a duplicate."""
    docs = [d for c in batch for d in c.docs]
    errors: list[dict[str, Any]] = []
    try:
        await batch[0].col.insert_many(docs, ordered=False)
    except BulkWriteError as exc:
        errors = exc.details.get("writeErrors", [])
    except Exception as exc:  # the callers answer for it; the writer goes on
        for c in batch:
            settle(c.done, exc)
        return []
    clean: list[_Call] = []
    for c, got in zip(batch, outcomes([len(c.docs) for c in batch], errors), strict=True):
        if isinstance(got, list):
            settle(c.done, got)
            if not got:
                clean.append(c)
        else:
            settle(c.done, BulkWriteError({"writeErrors": [dict(got)], "nInserted": 0}))
    return clean


def settle(done: asyncio.Future[T], outcome: T | BaseException) -> None:
    """Answer a queued caller, unless it went away (cancelled) meanwhile."""
    if done.done():
        return
    if isinstance(outcome, BaseException):
        done.set_exception(outcome)
    else:
        done.set_result(outcome)
