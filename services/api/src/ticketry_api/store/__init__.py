"""The api's store code, in one package: one :class:`Store` per process, made
in the api's lifespan for the server it found there (``StoreTraits``, from
its ``buildInfo``), reached through the app state (``deps.AppState.store``) or
passed to whoever reads or writes. The rest of the api speaks to the store
through it alone (the one port): ``ledger`` (capacity), ``orders``, ``fates``
(cancel or admitted, decided once), ``checkins``, ``tickets`` (the read
models the projector writes), ``events``, ``endpoints`` (shops' webhooks),
``devices`` (door scanners).
Only ``ticketryctl``'s operator commands and the retention purge read
collections themselves.

Most of it is shaped by FerretDB v1's limits (the local and test store);
what each costs, and what runs on MongoDB instead:

- **No atomic conditional update** (``$inc`` with a filter, ``findAndModify``):
  capacity is an append-only ledger whose unique ``_id`` lets one writer win
  each entry (``ledger``); a release is an entry of its own, and group commit
  makes one entry serve many orders. Cost: an insert per batch of orders,
  and a head search after a lost race. The same ledger runs on MongoDB
  (``docs/decisions.md``: a counter would need a transaction or an unbounded
  array to keep releases once-only).
- **Only a filter that is exactly ``{"_id": …}`` is pushed down** (any other
  filter or sort decodes the whole collection): the ledger's head is found by
  point reads, doubling then bisecting (``core.ledger.find_head``, 2·log2(n)
  reads); what is read by a known set of ids is read one ``_id`` at a time,
  side by side (``reads.Reads``): an order's tickets' outcomes and check-ins up
  to ``reads.POINT_READS_UP_TO`` tickets, by a scan above, the orders of a
  batch of ticket events for the webhook dispatcher (an ``$in`` on ``_id``
  would scan too), an order's status (``Orders.status``). Cost: a round trip
  per document, side by side. **On MongoDB** (``StoreTraits.indexed_queries``)
  each of these is one indexed query: the head by ``(event_id, seq)``, the
  rest by ``$in`` on ``_id``; the list routes' indexes (``query_indexes``)
  are created there only.
- **SQLite takes one writer at a time** (concurrent writers sleep 1, 2, 5… ms
  in its busy handler): every hot insert of the process queues on one
  ``writer.Writer``, which writes each collection's queued calls as one
  ``insert_many`` (``batches.runs``, at most ``batches.MAX_DOCS`` documents).
  Cost: one queue hop per insert; on MongoDB the same batching saves round
  trips, so it stays.
- **Every update is a transaction of its own**: the hot paths insert and never
  update (an order's fate, a check-in, a render outcome are unique inserts).
- **No transactions**: each step of an order is safe to crash after (see
  ``orders``); nothing here needs more than one document to change at once.

The pure rules are in ``ticketry_api.core.ledger`` and ``core.batches`` (unit-tested without a
server); the other modules do the I/O. Every
store test runs on FerretDB; the MongoDB forms of the reads run there too
(correct on any store, only slower on FerretDB: ``tests/e2e/test_store_traits``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ticketry.db import StoreTraits
from ticketry.documents import Event

from ticketry_api.store.checkins import Checkins
from ticketry_api.store.devices import Devices
from ticketry_api.store.endpoints import Endpoints
from ticketry_api.store.events import EventCache
from ticketry_api.store.fates import Fate, Fates
from ticketry_api.store.ledger import Baton, Ledger
from ticketry_api.store.orders import Orders, Revocations
from ticketry_api.store.reads import POINT_READS, Reads
from ticketry_api.store.tickets import Tickets
from ticketry_api.store.writer import Writer

__all__ = [
    "Checkins",
    "Devices",
    "Endpoints",
    "EventCache",
    "Fate",
    "Fates",
    "Ledger",
    "Orders",
    "Reads",
    "Revocations",
    "Store",
    "Tickets",
    "Writer",
]


@dataclass(eq=False)
class Store:
    """This process's way to the store: its one writer, the capacity ledgers,
    orders, fates and check-ins that write through it, the reads shaped by
    the server, and the events it has read."""

    writer: Writer
    ledger: Ledger
    reads: Reads
    events: EventCache
    orders: Orders
    fates: Fates
    checkins: Checkins
    tickets: Tickets
    endpoints: Endpoints
    revocations: Revocations
    devices: Devices

    @classmethod
    def create(cls, traits: StoreTraits = POINT_READS, baton: Baton | None = None) -> Store:
        """The store's objects for a server with ``traits`` (the default, point
        reads, is right on any server and cheapest on FerretDB); ``baton``: how
        its ledgers take turns with other processes (``ledger.Baton``; None: they race)."""
        writer, reads = Writer(), Reads(traits)
        orders = Orders(writer, reads)
        return cls(
            writer, Ledger(writer, traits, baton), reads, EventCache(), orders, Fates(writer), Checkins(writer),
            Tickets(writer, reads), Endpoints(), Revocations(orders, Tickets.revoked_codes), Devices(),
        )  # fmt: skip

    @staticmethod
    async def ping() -> None:
        """One round trip to the server (``/readyz``)."""
        await Event.get_pymongo_collection().database.command("ping")

    async def event(self, event_id: str) -> Event | None:
        """The event, read once per process (see ``EventCache``)."""
        return await self.events.get(event_id)
