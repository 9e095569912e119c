"""Finding the Redis primary through Redis Sentinel.

With ``TICKETRY_REDIS_SENTINELS`` set, no service is told where the primary
is: each asks the sentinels (``SENTINEL MASTERS``) for the primary of
``TICKETRY_REDIS_SENTINEL_MASTER`` whenever it opens a connection, so after
a failover its next connection goes to the new primary. redis-py's
``SentinelConnectionPool`` does the asking; its connections drop themselves
on a ``READONLY`` answer (they reached a demoted primary) and on connection
errors, and the client's retries (``ticketry.db.connect_redis``) reconnect —
to whichever primary the sentinels name by then. Without sentinels,
``TICKETRY_REDIS_URL`` names the one Redis, as on one host. The URL's
database, user and password apply either way.

While no primary can be named (the old one is down and the sentinels have
not yet promoted a replica), connecting fails with a :class:`PrimaryNotFound`,
a ``redis.exceptions.ConnectionError``: background work retries it, a request
answers ``503``. Its subclasses say why, in words fit for ``/readyz`` (no
addresses); :func:`find_primary` is the start-up check that turns a wrong
setting into one line naming the sentinels asked.

See https://redis.io/docs/latest/operate/oss_and_stack/management/sentinel/
(the client's side: "Sentinel clients implementation").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.connection import SSLConnection, parse_url
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel, SentinelConnectionPool, SentinelManagedConnection
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError, TimeoutError

log = logging.getLogger(__name__)

Address = tuple[str, int]

DEFAULT_MASTER = "ticketry"
# A sentinel that does not answer is skipped for the next one within this
# long: one dead sentinel host must not hold up every new connection.
SENTINEL_TIMEOUT_S = 1.0
# find_primary waits this long at start-up for a primary to be named (the
# sentinels may start with the service, or be between two primaries).
PRIMARY_STARTUP_WAIT_S = 10.0


def parse_sentinels(text: str) -> tuple[Address, ...]:
    """``"host:port,host:port"`` (spaces allowed, ``[v6]:port``) as addresses;
    ``""``: none. ``ValueError`` names the first item that is not one."""
    addresses: list[Address] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"not a sentinel address (host:port): {item!r}")
        addresses.append((host, int(port)))
    return tuple(addresses)


def describe(addresses: Sequence[Address]) -> str:
    """``127.0.0.1:26379,127.0.0.1:26380``: the form of the setting."""
    return ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in addresses)


@dataclass(frozen=True)
class RedisTarget:
    """Where a service's Redis is: ``url`` alone (one Redis), or the primary
    that ``sentinels`` name for ``master`` (the URL then gives only the
    database and credentials)."""

    url: str
    sentinels: tuple[Address, ...] = ()
    master: str = DEFAULT_MASTER

    @property
    def via_sentinel(self) -> bool:
        return bool(self.sentinels)


class PrimaryNotFound(MasterNotFoundError):
    """No primary can be named for the master: a ``ConnectionError``, so it is
    retried, and a request answers 503. ``reason`` carries no address
    (``/readyz`` shows it); ``str()`` names the sentinels (for the logs)."""

    def __init__(self, reason: str, sentinels: Sequence[Address], master: str) -> None:
        self.reason = reason
        super().__init__(f"{reason}: asked sentinels {describe(sentinels)} for master {master!r}")


class NoSentinelAnswers(PrimaryNotFound):
    """None of the sentinels answered: all down, unreachable, or wrong addresses."""


class UnknownMaster(PrimaryNotFound):
    """The sentinels that answered monitor no master of that name (a wrong
    ``TICKETRY_REDIS_SENTINEL_MASTER``, or a sentinel not configured yet)."""


class PrimaryDown(PrimaryNotFound):
    """The sentinels know the master but hold its primary down: a failover is
    under way (or no replica could be promoted)."""


def sentinel_options() -> dict[str, Any]:
    """How a client talks to the sentinels themselves: no retries (the next
    sentinel is the retry), short timeouts (a dead one costs at most
    :data:`SENTINEL_TIMEOUT_S`)."""
    return {
        "socket_timeout": SENTINEL_TIMEOUT_S,
        "socket_connect_timeout": SENTINEL_TIMEOUT_S,
        "retry": Retry(NoBackoff(), 0),
    }


class Sentinels(Sentinel):
    """redis-py's ``Sentinel`` whose failure to name a primary says why
    (:class:`PrimaryNotFound`'s subclasses) instead of one generic error."""

    def __init__(self, addresses: Sequence[Address], **connection_kwargs: Any) -> None:
        super().__init__(list(addresses), sentinel_kwargs=sentinel_options(), **connection_kwargs)  # type: ignore[no-untyped-call]
        self.addresses = tuple(addresses)

    async def discover_master(self, service_name: str) -> Address:
        answered = known = 0
        for n, sentinel in enumerate(self.sentinels):
            try:
                masters = cast(Mapping[str, Any], await sentinel.sentinel_masters())
            except (ConnectionError, TimeoutError):
                continue
            answered += 1
            state = masters.get(service_name)
            if not state:
                continue
            known += 1
            if self.check_master_state(state, service_name):
                # The one that answered is asked first next time (as redis-py does).
                self.sentinels[0], self.sentinels[n] = sentinel, self.sentinels[0]
                return str(state["ip"]), int(state["port"])
        if not answered:
            raise NoSentinelAnswers("no sentinel answers", self.addresses, service_name)
        if not known:
            raise UnknownMaster(f"no sentinel knows master {service_name!r}", self.addresses, service_name)
        raise PrimaryDown(f"the primary of {service_name!r} is down (failover under way)", self.addresses, service_name)


class PrimaryConnection(SentinelManagedConnection):
    """redis-py's Sentinel connection, asking the sentinels at *every*
    (re)connect to the primary.

    redis-py (8.1) asks them in ``connect()`` only. A command whose
    connection broke is retried on the same connection, which reconnects
    through ``connect_check_health()`` (``send_packed_command``), to the
    address it had: the dead primary, for all of the command's retries
    (~35 s of background work: a notifier's read of the event stream, a
    renderer's write, stuck on a dead host while a new primary serves)."""

    connection_pool: SentinelConnectionPool

    async def connect_check_health(self, check_health: bool = True, retry_socket_connect: bool = True) -> None:
        if self.connection_pool.is_master and not self.is_connected:
            self.host, self.port = await self.connection_pool.get_master_address()  # type: ignore[no-untyped-call]
        await super().connect_check_health(check_health=check_health, retry_socket_connect=retry_socket_connect)

    async def _connect_retry(self) -> None:
        if self._reader or not self.connection_pool.is_master:
            await super()._connect_retry()  # type: ignore[no-untyped-call]
            return
        # connect_check_health asks the sentinels (redis-py would ask, then connect_to).
        await self.connect_check_health(check_health=self.connection_pool.check_connection, retry_socket_connect=False)


class PrimarySSLConnection(PrimaryConnection, SSLConnection):
    """The same over TLS (``rediss://``)."""


class _ClosesSentinels(SentinelConnectionPool):
    """Closing the pool closes the connections to the sentinels too (a client
    owns its pool, and here the pool owns its ``Sentinels``)."""

    sentinel_manager: Sentinels

    async def aclose(self) -> None:
        try:
            await super().aclose()
        finally:
            await self.sentinel_manager.aclose()


class SentinelPool(_ClosesSentinels):
    """A pool of connections to the primary the sentinels name (opens as many as asked)."""


class BlockingSentinelPool(_ClosesSentinels, BlockingConnectionPool):
    """The same, bounded: at most ``max_connections``, a caller waits up to
    ``timeout`` for a free one (then ``ConnectionError``), as
    ``BlockingConnectionPool`` does for one Redis."""


def primary_connection_class(url: str) -> type[PrimaryConnection]:
    """:class:`PrimaryConnection`, over TLS for a ``rediss://`` URL."""
    return PrimarySSLConnection if parse_url(url).get("connection_class") is SSLConnection else PrimaryConnection


def primary_client(target: RedisTarget, *, bounded: bool, **options: Any) -> Redis:
    """A client of the primary of ``target`` (which has sentinels); ``options``
    as for a connection pool (retries, timeouts; ``max_connections`` and
    ``timeout`` when ``bounded``)."""
    # The URL's database and credentials; its host and port are the sentinels' to tell.
    parsed = parse_url(target.url)
    url_options: dict[str, Any] = {k: v for k, v in parsed.items() if k not in ("host", "port", "connection_class")}
    sentinels = Sentinels(target.sentinels)
    pool_class = BlockingSentinelPool if bounded else SentinelPool
    client: Redis = sentinels.master_for(
        target.master,
        connection_pool_class=pool_class,
        connection_class=primary_connection_class(target.url),
        **url_options,
        **options,
    )
    return client


async def find_primary(target: RedisTarget, *, wait_s: float = PRIMARY_STARTUP_WAIT_S) -> Address:
    """The primary's address, asked of the sentinels at start-up: waits up to
    ``wait_s`` while no sentinel answers or the primary is down, fails at once
    when the sentinels know no such master. Raises :class:`PrimaryNotFound`
    (its message names the sentinels: the one line a refused start logs)."""
    sentinels = Sentinels(target.sentinels)
    deadline = time.monotonic() + wait_s
    try:
        while True:
            try:
                return await sentinels.discover_master(target.master)
            except UnknownMaster:
                raise
            except PrimaryNotFound as exc:
                if time.monotonic() >= deadline:
                    raise
                log.warning("redis primary not found yet; waiting", extra={"error": str(exc)})
                await asyncio.sleep(0.5)
    finally:
        await sentinels.aclose()


def check_primary(target: RedisTarget) -> None:
    """At a service's start, outside any event loop: nothing without
    sentinels; otherwise :func:`find_primary`. When it finds no primary the
    process exits (code 1) after one ``critical`` line naming the sentinels
    and the master, as a refused setting does, but without a traceback: the
    setting is wrong or the sentinels are down, the code is fine."""
    if not target.via_sentinel:
        return
    try:
        host, port = asyncio.run(find_primary(target))
    except PrimaryNotFound as exc:
        log.critical("stopped: %s: %s", type(exc).__name__, exc)
        raise SystemExit(1) from None
    log.info("redis primary found through sentinel", extra={"master": target.master, "primary": f"{host}:{port}"})
