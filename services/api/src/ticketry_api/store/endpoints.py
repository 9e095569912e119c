"""Shops' webhook endpoints in the store (few per event: each read is small)."""

from __future__ import annotations

import asyncio
from typing import Any

from ticketry.webhook_documents import WebhookEndpoint


class Endpoints:
    """The events' webhook endpoints."""

    @staticmethod
    async def get(endpoint_id: str) -> WebhookEndpoint | None:
        return await WebhookEndpoint.get(endpoint_id)

    @staticmethod
    async def of_event(event_id: str) -> list[WebhookEndpoint]:
        """An event's endpoints in id order."""
        return await WebhookEndpoint.find({"event_id": event_id}).sort("_id").to_list()

    @staticmethod
    async def count(event_id: str, limit: int | None = None) -> int:
        """How many endpoints the event has (counting stops at ``limit``)."""
        col = WebhookEndpoint.get_pymongo_collection()
        if limit is None:  # a $limit stage of 0 is refused
            return await col.count_documents({"event_id": event_id})
        return await col.count_documents({"event_id": event_id}, limit=limit)

    @staticmethod
    async def insert(endpoint: WebhookEndpoint) -> None:
        await endpoint.insert()

    @staticmethod
    async def delete(endpoint_id: str) -> None:
        await WebhookEndpoint.get_pymongo_collection().delete_one({"_id": endpoint_id})

    @staticmethod
    async def events() -> set[str]:
        """Every event that has an endpoint."""
        return {str(e) for e in await WebhookEndpoint.get_pymongo_collection().distinct("event_id")}

    @staticmethod
    async def types_by_event(event_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        """Each event's endpoints (``_id`` and ``types``) in id order, one query per event, side by side."""
        col = WebhookEndpoint.get_pymongo_collection()
        found = await asyncio.gather(
            *(col.find({"event_id": e}, {"types": 1}).sort("_id", 1).to_list() for e in event_ids)
        )
        return dict(zip(event_ids, found, strict=True))
