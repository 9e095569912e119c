"""The api's store code shaped by FerretDB v1's limits: one :class:`Store` per
process, made in the api's lifespan and reached through the app state
(``deps.AppState.db``) or passed to whoever writes.

The pure rules are in ``ledger_core`` and ``batches`` (unit-tested without a
server); ``ledger`` and ``writer`` do their I/O.
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
