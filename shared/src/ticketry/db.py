"""Connections to Redis and MongoDB, shared by every service."""

from __future__ import annotations

from typing import Any, cast

from beanie import init_beanie
from pymongo import AsyncMongoClient
from pymongo.uri_parser import parse_uri
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import BusyLoadingError, ConnectionError, ResponseError, TimeoutError

from ticketry.documents import ALL_DOCUMENTS


def connect_redis(url: str, *, timeout_s: float = 10.0) -> Redis:
    """A client that reconnects by itself (Redis restarts are routine, not fatal)."""
    return Redis.from_url(
        url,
        retry=Retry(ExponentialBackoff(cap=2.0, base=0.05), retries=20),
        retry_on_error=[ConnectionError, TimeoutError, BusyLoadingError],
        health_check_interval=15,
        socket_timeout=timeout_s,
        socket_connect_timeout=5.0,
    )


async def connect_mongo(
    url: str, *, create_indexes: bool = False, pool_size: int = 16
) -> AsyncMongoClient[dict[str, object]]:
    """Connect and initialise beanie on the database named in ``url``.

    Only the api (the schema's owner) creates indexes, one ``createIndexes`` per
    index: FerretDB 1.24 panics when one call re-creates several existing ones.
    A model's ``query_indexes`` serve list queries only and are created where
    the store can use them (not on FerretDB, see :func:`is_ferretdb`).
    """
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(
        url, tz_aware=True, serverSelectionTimeoutMS=10_000, maxPoolSize=pool_size
    )
    db_name = parse_uri(url).get("database") or "ticketry"
    await init_beanie(database=client[db_name], document_models=ALL_DOCUMENTS, skip_indexes=True)
    if create_indexes:
        query_indexes = not await is_ferretdb(client)
        for model in ALL_DOCUMENTS:
            settings = getattr(model, "Settings", None)
            wanted = list(getattr(settings, "indexes", []))
            if query_indexes:
                wanted += getattr(settings, "query_indexes", [])
            for index in wanted:
                await model.get_pymongo_collection().create_indexes([index])
    return client


async def is_ferretdb(client: AsyncMongoClient[dict[str, object]]) -> bool:
    """True when the server is FerretDB (its ``buildInfo`` names it)."""
    info = await client.admin.command("buildInfo")
    return "ferretdb" in info


async def ensure_group(redis: Redis, stream: str, group: str) -> None:
    """Create ``group`` at the very start of ``stream`` (and the stream) if missing.

    Starting at ``0``, not ``$``: entries added before the group existed are not
    skipped. Deploys create groups up front (KEDA errors on a missing group).
    """
    try:
        await redis.xgroup_create(stream, group, id="0", mkstream=True)
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


async def ensure_groups(redis: Redis) -> None:
    """Every consumer group of the system (idempotent)."""
    from ticketry import streams

    for lane in streams.RENDER_LANES:
        await ensure_group(redis, lane, streams.RENDERERS_GROUP)
    await ensure_group(redis, streams.TICKET_EVENTS, streams.PROJECTOR_GROUP)


def as_text(value: Any) -> str:
    """A Redis reply value (bytes without ``decode_responses``) as ``str``."""
    return value.decode() if isinstance(value, bytes) else str(value)


# A stream entry as redis-py returns it (no decode_responses): id and field map.
Entry = tuple[bytes, dict[bytes, bytes]]


def entries_of(resp: Any) -> list[Entry]:
    """The entries of a single-stream XREAD/XREADGROUP reply (or an XRANGE/XCLAIM list)."""
    if not resp:
        return []
    if isinstance(resp[0], (list, tuple)) and len(resp[0]) == 2 and isinstance(resp[0][1], list):
        return cast(list[Entry], resp[0][1])
    return cast(list[Entry], resp)
