"""Events as this process has seen them: events never change once created
(there is no update route), so each is read from the store once per process
(it saves a read per order)."""

from __future__ import annotations

from datetime import datetime

from ticketry.documents import Event

from ticketry_api.store.reads import page_by_id

EVENT_CACHE_SIZE = 1024


class EventCache:
    """Up to ``size`` events by id; the oldest goes first."""

    def __init__(self, size: int = EVENT_CACHE_SIZE) -> None:
        self.size = size
        self._events: dict[str, Event] = {}

    @staticmethod
    async def insert(event: Event) -> None:
        await event.insert()

    @staticmethod
    async def of_organizer(organizer_id: str | None, cursor: str | None, limit: int) -> tuple[list[Event], str | None]:
        """A page of an organiser's events (None: everyone's) in id order; the next page's cursor."""
        query: dict[str, object] = {} if organizer_id is None else {"organizer_id": organizer_id}
        found, nxt = await page_by_id(Event.get_pymongo_collection(), query, cursor, limit)
        return [Event.model_validate(d) for d in found], nxt

    @staticmethod
    async def upcoming(after: datetime, limit: int) -> list[Event]:
        """Up to ``limit`` events that start after ``after`` (a scan on FerretDB: rare)."""
        return await Event.find({"starts_at": {"$gt": after}}).limit(limit).to_list()

    @staticmethod
    async def started_before(before: datetime) -> list[str]:
        """The ids of the events that started before ``before`` (a scan on FerretDB: rare)."""
        found = Event.get_pymongo_collection().find({"starts_at": {"$lt": before}}, {"_id": 1})
        return [d["_id"] async for d in found]

    async def get(self, event_id: str) -> Event | None:
        """The event (None: no such event; a miss is not cached)."""
        if (cached := self._events.get(event_id)) is not None:
            return cached
        event = await Event.get(event_id)
        if event is not None:
            if len(self._events) >= self.size:
                self._events.pop(next(iter(self._events)))  # the oldest entry
            self._events[event_id] = event
        return event
