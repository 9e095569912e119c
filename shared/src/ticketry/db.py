"""Connections to Redis and MongoDB, shared by every service.

Two kinds of caller share these clients and want opposite things from them
while a dependency is down. Background work (renderers, the projector, the
outbox sweep, the scaler) wants *patient* retries: a Redis restart is routine
and must not fail a render. A request wants a *fast* answer: a client waits for
a ``503`` with ``Retry-After`` within about a second, never a request that hangs
for the whole outage. So:

- Redis: every command retries with backoff for up to ~35 s, unless it runs
  under :func:`request_budget` (the api sets it for each HTTP request), where
  it gives up after :data:`REQUEST_RETRY_BUDGET_S` of retrying. Opening a
  connection gives up after :data:`REDIS_CONNECT_TIMEOUT_S`.
- MongoDB: server selection (finding a reachable server, which is what waits
  while the store is down) gives up after :data:`MONGO_SELECT_TIMEOUT_MS`, and
  opening a connection after :data:`MONGO_CONNECT_TIMEOUT_MS`; the
  background loops simply try again. A socket that stops answering (a hung
  store, a cut network) is given up after :data:`MONGO_SOCKET_TIMEOUT_MS`.
  Options in ``TICKETRY_MONGO_URL`` (``?serverSelectionTimeoutMS=…``) win.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import pymongo
from beanie import init_beanie
from pymongo import AsyncMongoClient
from pymongo.errors import ConnectionFailure
from pymongo.uri_parser import parse_uri
from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.driver_info import DriverInfo
from redis.exceptions import BusyLoadingError, ConnectionError, ResponseError, TimeoutError

from ticketry.documents import ALL_DOCUMENTS
from ticketry.redis_ha import RedisTarget, primary_client
from ticketry.replies import Entry, as_text

log = logging.getLogger(__name__)
T = TypeVar("T")

# A request stops retrying a Redis command after this long (then: 503).
REQUEST_RETRY_BUDGET_S = 0.5
# Opening a connection to a Redis that does not answer (a refused one fails at
# once): a request then answers 503 within about a second; background work
# simply retries.
REDIS_CONNECT_TIMEOUT_S = 1.0
# Waiting for a reachable MongoDB server (what an operation does while the store
# is down) ends after this; a request then answers 503, a background loop retries.
MONGO_SELECT_TIMEOUT_MS = 500
# Opening a connection to a host that does not answer (a refused one fails at
# once). pymongo also bounds its monitor's heartbeat with it: short enough that
# a request is answered soon, long enough that a busy store is not taken for a
# dead one.
MONGO_CONNECT_TIMEOUT_MS = 2_000
# A store that accepted a command and then went silent (hung, network cut).
MONGO_SOCKET_TIMEOUT_MS = 10_000
# Index creation at start-up may build an index on a big collection: no socket
# timeout of its own, only this bound.
MONGO_INDEX_TIMEOUT_S = 600.0
# connect_mongo waits this long for the store to be reachable at start-up.
MONGO_STARTUP_WAIT_S = 60.0

_budget: contextvars.ContextVar[float | None] = contextvars.ContextVar("ticketry_redis_budget", default=None)


@contextlib.contextmanager
def request_budget(seconds: float = REQUEST_RETRY_BUDGET_S) -> Iterator[None]:
    """Within this block (and tasks started from it), a Redis command that
    fails to connect retries for at most ``seconds`` instead of ~35 s."""
    token = _budget.set(seconds)
    try:
        yield
    finally:
        _budget.reset(token)


class BudgetRetry(Retry):
    """redis-py's :class:`Retry`, bounded in time under :func:`request_budget`.

    The budget is read per call, so one client (and one connection pool) serves
    the api's requests (fast) and its projector and sweep (patient) alike."""

    async def call_with_retry(
        self,
        do: Callable[[], Awaitable[T]],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> T:
        do = _lost_on_closed_transport(do)
        budget = _budget.get()
        if budget is None:
            return await super().call_with_retry(do, fail, is_retryable, with_failure_count)
        deadline = time.monotonic() + budget
        self._backoff.reset()  # type: ignore[no-untyped-call]
        failures = 0
        while True:
            try:
                return await do()
            except self._supported_errors as error:
                if is_retryable is not None and not is_retryable(error):
                    raise
                failures += 1
                # As redis-py does: `fail` drops the broken connection.
                await (fail(error, failures) if with_failure_count else fail(error))
                pause = self._backoff.compute(failures)
                if (self._retries >= 0 and failures > self._retries) or time.monotonic() + pause > deadline:
                    raise error
                if pause > 0:
                    await asyncio.sleep(pause)


def _lost_on_closed_transport(do: Callable[[], Awaitable[T]]) -> Callable[[], Awaitable[T]]:
    """``do`` with uvloop's "handler is closed" read as the lost connection it is.

    When the peer vanishes (a Redis primary killed, its host gone), uvloop
    closes the transport and the next write on it raises ``RuntimeError``, not
    an ``OSError``: redis-py would pass it up as an unexpected error (a 500),
    where a dropped connection is retried on a fresh one or answered 503."""

    async def guarded() -> T:
        try:
            return await do()
        except RuntimeError as error:
            if "handler is closed" not in str(error):
                raise
            raise ConnectionError(f"connection lost: {error}") from error

    return guarded


def connect_redis(
    target: RedisTarget | str,
    *,
    timeout_s: float = 10.0,
    max_connections: int | None = None,
    wait_s: float = 20.0,
    driver_info: DriverInfo | None = None,
) -> Redis:
    """The one Redis client factory: a client that reconnects by itself
    (Redis restarts and failovers are routine, not fatal): ~35 s of retries
    per command, or :data:`REQUEST_RETRY_BUDGET_S` under :func:`request_budget`.

    ``target``: a URL (one Redis) or a :class:`~ticketry.redis_ha.RedisTarget`
    (``CommonSettings.redis_target``), whose sentinels, if any, name the
    primary at each new connection. ``max_connections``: at most that many
    connections, a caller waiting up to ``wait_s`` for a free one (then
    ``ConnectionError``: a 503) instead of opening one per concurrent caller.
    ``timeout_s``: a command's socket timeout (mind blocking reads)."""
    if isinstance(target, str):
        target = RedisTarget(target)
    options: dict[str, Any] = {
        "retry": BudgetRetry(ExponentialBackoff(cap=2.0, base=0.05), retries=20),
        "retry_on_error": [ConnectionError, TimeoutError, BusyLoadingError],
        "health_check_interval": 15,
        "socket_timeout": timeout_s,
        "socket_connect_timeout": REDIS_CONNECT_TIMEOUT_S,
    }
    if driver_info is not None:
        options["driver_info"] = driver_info
    if max_connections is not None:
        options |= {"max_connections": max_connections, "timeout": wait_s}
    if target.via_sentinel:
        return primary_client(target, bounded=max_connections is not None, **options)
    pool_class = ConnectionPool if max_connections is None else BlockingConnectionPool
    return Redis.from_pool(pool_class.from_url(target.url, **options))


def mongo_options(url: str) -> dict[str, Any]:
    """Our client timeouts, except where ``url`` sets its own."""
    given = {k.lower() for k in parse_uri(url).get("options", {})}
    defaults = {
        "serverSelectionTimeoutMS": MONGO_SELECT_TIMEOUT_MS,
        "connectTimeoutMS": MONGO_CONNECT_TIMEOUT_MS,
        "socketTimeoutMS": MONGO_SOCKET_TIMEOUT_MS,
    }
    return {k: v for k, v in defaults.items() if k.lower() not in given}


async def wait_for_mongo(client: AsyncMongoClient[dict[str, object]], timeout_s: float) -> None:
    """Ping until the store answers (a service may start before it), at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await client.admin.command("ping")
            return
        except ConnectionFailure:
            if time.monotonic() >= deadline:
                raise
            log.warning("store not reachable yet; waiting")
            await asyncio.sleep(0.5)


async def connect_mongo(
    url: str, *, create_indexes: bool = False, pool_size: int = 16, startup_wait_s: float = MONGO_STARTUP_WAIT_S
) -> AsyncMongoClient[dict[str, object]]:
    """Connect (waiting up to ``startup_wait_s`` for the store to answer) and
    initialise beanie on the database named in ``url``, with the client
    timeouts of :func:`mongo_options`.

    Only the api (the schema's owner) creates indexes (:func:`create_indexes`,
    here with ``create_indexes``, or by itself once it has the store's traits).
    """
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(
        url, tz_aware=True, maxPoolSize=pool_size, **mongo_options(url)
    )
    db_name = parse_uri(url).get("database") or "ticketry"
    await wait_for_mongo(client, startup_wait_s)
    await init_beanie(database=client[db_name], document_models=ALL_DOCUMENTS, skip_indexes=True)
    if create_indexes:
        await create_indexes_for(await store_traits(client))
    return client


async def create_indexes_for(traits: StoreTraits) -> None:
    """Every model's indexes on the database beanie was initialised with, one
    ``createIndexes`` per index (FerretDB 1.24 panics when one call re-creates
    several existing ones). A model's ``query_indexes`` serve queries by other
    fields than ``_id`` and are created where the store uses them
    (:attr:`StoreTraits.indexed_queries`)."""
    # A deadline of its own for the whole block, instead of the socket timeout.
    with pymongo.timeout(MONGO_INDEX_TIMEOUT_S):
        for model in ALL_DOCUMENTS:
            settings = getattr(model, "Settings", None)
            wanted = list(getattr(settings, "indexes", []))
            if traits.indexed_queries:
                wanted += getattr(settings, "query_indexes", [])
            for index in wanted:
                await model.get_pymongo_collection().create_indexes([index])


@dataclass(frozen=True)
class StoreTraits:
    """What the MongoDB-wire server behind ``TICKETRY_MONGO_URL`` does well,
    told by its ``buildInfo`` at start-up (capability detection).

    FerretDB v1 names itself there (``ferretdbVersion``); on its SQLite backend
    only a filter that is exactly ``{"_id": …}`` is served by an index, any
    other filter or sort decodes the whole collection. Any other server is
    taken to be MongoDB, where indexed filters and sorts are served by their
    indexes. Every read the store makes is correct either way; the traits
    only choose the cheaper one (``ticketry_api.store``).
    """

    server: str  # for the logs: "FerretDB 1.24.2 (MongoDB 7.0.42 wire)", "MongoDB 8.0.4"
    indexed_queries: bool  # filters and sorts on indexed fields other than _id use their index

    @classmethod
    def of(cls, build_info: Mapping[str, Any]) -> StoreTraits:
        """The traits a ``buildInfo`` reply tells."""
        version = str(build_info.get("version", "unknown"))
        if "ferretdbVersion" in build_info:
            return cls(f"FerretDB {build_info['ferretdbVersion']} (MongoDB {version} wire)", indexed_queries=False)
        return cls(f"MongoDB {version}", indexed_queries=True)


async def store_traits(client: AsyncMongoClient[dict[str, object]]) -> StoreTraits:
    """The traits of the server ``client`` talks to (one ``buildInfo``)."""
    return StoreTraits.of(await client.admin.command("buildInfo"))


async def ensure_group(redis: Redis, stream: str, group: str, *, start: str = "0") -> None:
    """Create ``group`` at the very start of ``stream`` (and the stream) if missing.

    Starting at ``0``, not ``$``: entries added before the group existed are not
    skipped. Deploys create groups up front (KEDA errors on a missing group).
    (``start="$"``: a group for what comes from now on only.)
    """
    try:
        await redis.xgroup_create(stream, group, id=start, mkstream=True)
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


async def ensure_groups(redis: Redis) -> None:
    """Every consumer group of the system (idempotent)."""
    from ticketry import streams

    for lane in streams.RENDER_LANES:
        await ensure_group(redis, lane, streams.RENDERERS_GROUP)
    await ensure_group(redis, streams.TICKET_EVENTS, streams.PROJECTOR_GROUP)


def next_cursor(cursor: str, entries: list[Entry]) -> str:
    """Where a consumer's next XREADGROUP reads after one that gave ``entries``.

    A consumer starts (and restarts after a failed batch) at ``"0"``: its own
    pending entries, in batches from the last one read. A read that gives none
    means they are done, and from then on ``">"``: new entries. (Staying on an
    id after that would read an empty history forever, without blocking.)"""
    if cursor == ">":
        return ">"
    return entries[-1][0].decode() if entries else ">"


def entries_of(resp: Any) -> list[Entry]:
    """The entries of a single-stream XREAD/XREADGROUP reply (or an XRANGE/XCLAIM list)."""
    if not resp:
        return []
    if isinstance(resp[0], (list, tuple)) and len(resp[0]) == 2 and isinstance(resp[0][1], list):
        return cast(list[Entry], resp[0][1])
    return cast(list[Entry], resp)


async def read_all(redis: Redis, stream: str, *, page: int = 500) -> list[Entry]:
    """Every entry of ``stream``, oldest first, read ``page`` entries at a time
    (XRANGE from just past the last id read: https://redis.io/docs/latest/commands/xrange/)."""
    out: list[Entry] = []
    start = "-"
    while True:
        chunk = entries_of(await redis.xrange(stream, min=start, max="+", count=page))
        if not chunk:
            return out
        out += chunk
        start = "(" + as_text(chunk[-1][0])
