"""Check-ins in the store: lists, admissions (one per ticket and list, by a
unique ``_id``), the ticket's first admission, every attempt, and scan answers
kept under their nonce. Each read is by ``_id``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ticketry.documents import Admission, Checkin, CheckinAttempt, CheckinList, Passage, ScanAnswer

from ticketry_api.store.writer import Writer


class Checkins:
    """The check-ins, inserted through the process's one writer."""

    def __init__(self, writer: Writer) -> None:
        self._writer = writer

    async def checkin_list(self, list_id: str) -> CheckinList | None:
        return await CheckinList.get(list_id)

    @staticmethod
    async def create_list(lst: CheckinList) -> None:
        await lst.insert()

    @staticmethod
    async def lists_of(event_id: str) -> list[CheckinList]:
        """An event's check-in lists in id order."""
        return await CheckinList.find({"event_id": event_id}).sort("_id").to_list()

    async def attempt(self, attempt: CheckinAttempt) -> None:
        await attempt.insert()

    async def admit(self, admission: Admission) -> datetime | None:
        """Insert ``admission``; None if it is the ticket's first on its list,
        else when the first one was."""
        if not await self._writer.insert(Admission.get_pymongo_collection(), [admission.model_dump(by_alias=True)]):
            return None
        first = await Admission.get(admission.id)
        return first.at if first is not None else admission.at

    async def first_admission(self, checkin: Checkin) -> None:
        """Record the ticket's first admission on any list (a later one is not its first)."""
        await self._writer.insert(Checkin.get_pymongo_collection(), [checkin.model_dump(by_alias=True)])

    @staticmethod
    async def last_move(admission_id: str) -> int:
        """The number of an admission's last move on a re-entry list (0: not
        admitted; 1: the admission itself; then its :class:`Passage`s)."""
        moves = {"$gt": f"{admission_id}/", "$lt": f"{admission_id}0"}  # "0" follows "/"
        last = await Passage.get_pymongo_collection().find_one({"_id": moves}, {"n": 1}, sort=[("_id", -1)])
        if last is not None:
            return int(last["n"])
        return 1 if await Admission.get_pymongo_collection().find_one({"_id": admission_id}, {"_id": 1}) else 0

    async def move(self, passage: Passage) -> bool:
        """Insert ``passage``; False if another scan made that move first."""
        return not await self._writer.insert(Passage.get_pymongo_collection(), [passage.model_dump(by_alias=True)])

    @staticmethod
    async def counts(list_id: str) -> tuple[int, int, int]:
        """A list's admissions, its re-entries and its exits: three counts."""
        admitted = await Admission.get_pymongo_collection().count_documents({"list_id": list_id})
        passages = Passage.get_pymongo_collection()
        entries = await passages.count_documents({"list_id": list_id, "direction": "entry"})
        exits = await passages.count_documents({"list_id": list_id, "direction": "exit"})
        return admitted, entries, exits

    async def claim_nonce(self, key: str) -> bool:
        """Claim a scan's nonce for its first upload; False if it was claimed before."""
        claim = ScanAnswer(id=key, status=0, body={}).model_dump(by_alias=True)
        return not await self._writer.insert(ScanAnswer.get_pymongo_collection(), [claim])

    async def answer(self, key: str) -> dict[str, Any] | None:
        """The claim of a nonce: its ``status`` (0 until answered), ``body``, ``outcome`` and ``at``."""
        return await ScanAnswer.get_pymongo_collection().find_one({"_id": key})

    async def keep_answer(self, key: str, status: int, body: dict[str, Any], outcome: str) -> None:
        await ScanAnswer.get_pymongo_collection().update_one(
            {"_id": key}, {"$set": {"status": status, "body": body, "outcome": outcome}}
        )

    @staticmethod
    async def forget_answers(before: datetime) -> int:
        """Delete the scan answers (claims included) kept since before ``before``;
        how many. One ``deleteMany`` by ``at``: FerretDB v1 has no TTL index."""
        gone = await ScanAnswer.get_pymongo_collection().delete_many({"at": {"$lt": before}})
        return int(gone.deleted_count)

    @staticmethod
    async def admissions_between(list_id: str, first: str, last: str) -> dict[str, datetime]:
        """Ticket id → when it was admitted on ``list_id``, for the tickets from
        ``first`` to ``last`` (one range of ``_id``s: ``<list>/<ticket>``)."""
        span = {"$gte": f"{list_id}/{first}", "$lte": f"{list_id}/{last}"}
        found = Admission.get_pymongo_collection().find({"_id": span}, {"ticket_id": 1, "at": 1})
        return {a["ticket_id"]: a["at"] async for a in found}
