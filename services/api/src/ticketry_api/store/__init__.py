"""The api's store code shaped by FerretDB v1's limits, in one package: one
:class:`Store` per process, made in the api's lifespan and reached through the
app state (``deps.AppState.db``) or passed to whoever writes. The rest of
the api speaks to the store through it (and through beanie's documents for
what no limit shapes).

What each FerretDB v1 (SQLite backend) limit costs, and where:

- **No atomic conditional update** (``$inc`` with a filter, ``findAndModify``):
  capacity is an append-only ledger whose unique ``_id`` lets one writer win
  each entry (``ledger``); a release is an entry of its own, and group commit
  makes one entry serve many orders. Cost: an insert per batch of orders,
  and a head search after a lost race.
- **Only a filter that is exactly ``{"_id": …}`` is pushed down** (any other
  filter or sort decodes the whole collection): the ledger's head is found by
  point reads, doubling then bisecting (``ledger_core.find_head``, 2·log2(n)
  reads); what is read by a known set of ids is read one ``_id`` at a time,
  side by side (``reads``): an order's tickets' outcomes and check-ins up to
  ``reads.POINT_READS_UP_TO`` tickets, by a scan above (``find_by_ids``), the
  orders of a batch of ticket events for the webhook dispatcher
  (``find_each``; an ``$in`` on ``_id`` would scan too), an order's status
  (``stored_status``). Cost: a round trip per document, side by side.
- **SQLite takes one writer at a time** (concurrent writers sleep 1, 2, 5… ms
  in its busy handler): every hot insert of the process queues on one
  ``writer.Writer``, which writes each collection's queued calls as one
  ``insert_many`` (``batches.runs``, at most ``batches.MAX_DOCS`` documents).
  Cost: one queue hop per insert.
- **Every update is a transaction of its own**: the hot paths insert and never
  update (an order's fate, a check-in, a render outcome are unique inserts).
- **No transactions**: each step of an order is safe to crash after (see
  ``orders``); nothing here needs more than one document to change at once.

The pure rules are in ``ledger_core`` and ``batches`` (unit-tested without a
server); ``ledger``, ``writer``, ``reads`` and ``events`` do the I/O.

On a real MongoDB all of this runs as it is (every store test here runs it on
FerretDB). A MongoDB adapter would instead keep each event's sold counts in
one document and reserve with one conditional ``$inc`` (``find_one_and_update``
with ``sold + n <= capacity`` in the filter, per tier likewise), read lists
and an order's tickets with indexed filters instead of point reads, and write
each insert directly (the server takes concurrent writers); none of that is
built, since no MongoDB server can be run here to test it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ticketry.documents import Event

from ticketry_api.store.events import EventCache
from ticketry_api.store.ledger import Ledger
from ticketry_api.store.writer import Writer

__all__ = ["EventCache", "Ledger", "Store", "Writer"]


@dataclass(eq=False)
class Store:
    """This process's way to the store: its one writer, the capacity ledgers
    that write through it, and the events it has read."""

    writer: Writer
    ledger: Ledger
    events: EventCache

    @classmethod
    def create(cls) -> Store:
        writer = Writer()
        return cls(writer, Ledger(writer), EventCache())

    async def event(self, event_id: str) -> Event | None:
        """The event, read once per process (see ``EventCache``)."""
        return await self.events.get(event_id)
