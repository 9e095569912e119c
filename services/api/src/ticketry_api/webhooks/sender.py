"""Delivers webhooks from the deliveries stream (group ``webhook-senders``).

Every api runs a sender. It keeps up to ``concurrency`` attempts in flight,
each bounded by ``timeout_s`` (connect, send and status line together; the
response body is never read), so a slow or silent shop costs one slot for a
few seconds and never holds up the dispatcher or other shops. What comes of an
attempt is :func:`decide`'s; it is carried out in one MULTI with the entry's
XACK and XDEL:

* done: nothing else;
* retry: the next attempt goes into the retry set, due after the backoff, and
  is moved back onto the stream when due (by any sender);
* dead letter: the delivery, its history and the reason go to
  ``ticketry:webhooks:dead``.

A sender killed mid-attempt leaves its entries pending; a live one claims
them after ``claim_idle_ms`` and tries again (same ``webhook-id``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import httpcore
import httpx
import orjson
from redis.asyncio import Redis
from ticketry import streams
from ticketry.consumer import CLAIM_INTERVAL_S, Claimer
from ticketry.db import ensure_group, entries_of
from ticketry.events import DecodeError
from ticketry.replies import Entry, as_text
from ticketry.retry import Retrying
from ticketry.webhook_documents import WebhookEndpoint

from ticketry_api.core import signing
from ticketry_api.core.deliveries import DeadLetter, Failure, Retry, decide, describe
from ticketry_api.store.endpoints import Endpoints
from ticketry_api.webhooks.config import WebhookSettings
from ticketry_api.webhooks.deadletters import dead_fields
from ticketry_api.webhooks.destinations import (
    PinnedBackend,
    RefusedDestination,
    Resolver,
    Unresolvable,
    check_destination,
    check_url,
    resolve,
)
from ticketry_api.webhooks.models import Delivery

log = logging.getLogger(__name__)

USER_AGENT = "Ticketry-Webhooks/1"
READ_BLOCK_MS = 500  # also how late a due retry can be moved back
MOVE_BATCH = 100

# KEYS: 1 retry set, 2 deliveries. ARGV: 1 member, 2.. field/value pairs.
# Whoever removes the member appends it: each due retry moves exactly once.
_MOVE_LUA = """
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return false end
local f = {}
for i = 2, #ARGV do f[#f + 1] = ARGV[i] end
return redis.call('XADD', KEYS[2], '*', unpack(f))
"""


def _pinned(settings: WebhookSettings, limits: httpx.Limits, resolver: Resolver) -> httpx.AsyncHTTPTransport:
    """httpx's transport, its connection pool on :class:`PinnedBackend` (httpx
    takes no network backend of its own; its pool is httpcore's)."""
    transport = httpx.AsyncHTTPTransport(trust_env=False, limits=limits)
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=httpx.create_ssl_context(trust_env=False),
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=PinnedBackend(allow_private=settings.allow_private, resolver=resolver),
    )
    return transport


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class Sender:
    """One api's sender; built in the lifespan, closed with it."""

    def __init__(self, redis: Redis, settings: WebhookSettings, consumer: str, *, resolver: Resolver = resolve) -> None:
        self.redis = redis
        self.settings = settings
        self.consumer = consumer
        self.resolver = resolver
        limits = httpx.Limits(max_connections=settings.concurrency, max_keepalive_connections=8)
        self.http = httpx.AsyncClient(
            timeout=httpx.Timeout(settings.timeout_s, connect=min(5.0, settings.timeout_s)),
            follow_redirects=False,  # a redirect could point anywhere (SSRF)
            trust_env=False,
            proxy=settings.proxy,
            limits=limits,
            # Behind a proxy the proxy connects (and is where egress is enforced).
            transport=None if settings.proxy else _pinned(settings, limits, resolver),
        )
        self._move = redis.register_script(_MOVE_LUA)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def attempt(self, d: Delivery, endpoint: WebhookEndpoint) -> int | Failure:
        """POST the message once; its HTTP status, or why there is none."""
        try:
            if self.settings.proxy:
                # The proxy resolves the name: check it here, best effort.
                await check_destination(endpoint.url, allow_private=self.settings.allow_private, resolver=self.resolver)
            else:
                # The connection checks the addresses it connects to (PinnedBackend).
                check_url(endpoint.url)
        except Unresolvable as exc:
            return Failure(str(exc))
        except RefusedDestination as exc:
            return Failure(str(exc), "permanent")
        ts = int(time.time())
        headers = {
            **signing.headers(endpoint.secret, d.msg_id, ts, d.body),
            "content-type": "application/json",
            "user-agent": USER_AGENT,
        }
        try:
            async with (
                asyncio.timeout(self.settings.timeout_s),
                self.http.stream("POST", endpoint.url, content=d.body, headers=headers) as resp,
            ):
                return resp.status_code
        except Unresolvable as exc:
            return Failure(str(exc))
        except RefusedDestination as exc:
            return Failure(str(exc), "permanent")
        except TimeoutError:
            return Failure(f"timed out after {self.settings.timeout_s:g} s")
        except httpx.HTTPError as exc:
            return Failure(f"{type(exc).__name__}: {exc}"[:300])

    async def handle(self, entry_id: bytes, fields: dict[bytes, bytes]) -> None:
        """Deliver one entry and record what came of it."""
        eid = as_text(entry_id)
        try:
            d = Delivery.from_fields(fields)
        except DecodeError as exc:
            raw = {as_text(k): as_text(v) for k, v in fields.items()}
            await self._finish(eid, dead=dead_fields(raw, str(exc), eid))
            return
        endpoint = await Endpoints.get(d.endpoint_id)
        outcome = Failure("endpoint deleted", "gone") if endpoint is None else await self.attempt(d, endpoint)
        s = self.settings
        decision = decide(d.attempt, s.max_attempts, outcome, base_s=s.backoff_base_s, cap_s=s.backoff_cap_s)
        note = f"attempt {d.attempt}: {describe(outcome)} at {_now_iso()}"
        log.info(
            "webhook attempt",
            extra={"webhook_id": d.msg_id, "endpoint": d.endpoint_id, "order_id": d.order_id, "outcome": note,
                   "decision": type(decision).__name__},
        )  # fmt: skip
        if isinstance(decision, Retry):
            nxt = d.next_attempt(note)
            due_ms = int((time.time() + decision.delay_s) * 1000)
            await self._finish(eid, retry=(orjson.dumps(nxt.to_fields()).decode(), due_ms))
        elif isinstance(decision, DeadLetter):
            dead = replace(d, history=(*d.history, note))
            await self._finish(eid, dead=dead_fields(dead.to_fields(), decision.reason, eid))
        else:
            await self._finish(eid)

    async def _finish(
        self, entry_id: str, *, retry: tuple[str, int] | None = None, dead: dict[str, str] | None = None
    ) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            if retry is not None:
                pipe.zadd(streams.WEBHOOK_RETRIES, {retry[0]: retry[1]})
            if dead is not None:
                pipe.xadd(streams.WEBHOOK_DEAD, dead)  # type: ignore[arg-type]
            pipe.xack(streams.WEBHOOK_DELIVERIES, streams.WEBHOOK_SENDERS_GROUP, entry_id)
            pipe.xdel(streams.WEBHOOK_DELIVERIES, entry_id)
            await pipe.execute()

    async def move_due(self) -> int:
        """Put retries whose time has come back on the deliveries stream."""
        now_ms = int(time.time() * 1000)
        due: list[Any] = await self.redis.zrangebyscore(streams.WEBHOOK_RETRIES, "-inf", now_ms, 0, MOVE_BATCH)
        moved = 0
        for member in due:
            text = as_text(member)
            try:
                fields: dict[str, str] = orjson.loads(text)
            except orjson.JSONDecodeError:
                log.error("webhooks: malformed retry dropped", extra={"member": text[:200]})
                await self.redis.zrem(streams.WEBHOOK_RETRIES, member)
                continue
            args = [text, *(x for kv in fields.items() for x in kv)]
            moved += bool(await self._move(keys=[streams.WEBHOOK_RETRIES, streams.WEBHOOK_DELIVERIES], args=args))
        return moved

    async def _claim(self, count: int) -> list[Entry]:
        """Deliveries a dead sender held (the shared claimer: trimmed ones are acked)."""
        return await Claimer(
            self.redis, streams.WEBHOOK_DELIVERIES, streams.WEBHOOK_SENDERS_GROUP, self.consumer,
            self.settings.claim_idle_ms, count,
        ).abandoned()  # fmt: skip

    async def _handle_logged(self, entry_id: bytes, fields: dict[bytes, bytes]) -> None:
        try:
            await self.handle(entry_id, fields)
        except Exception:
            # Left pending: claimed and tried again after claim_idle_ms.
            log.exception("webhooks: delivery failed unexpectedly", extra={"entry": entry_id})

    async def run(self, stop: asyncio.Event) -> None:
        """Deliver until ``stop``; attempts in flight then get a short grace."""
        inflight: set[asyncio.Task[None]] = set()
        regroup = True  # (again) make the group, inside the loop: Redis may be down at start
        next_claim = time.monotonic()
        retry = Retrying("webhooks sender", log, stop)
        while not stop.is_set():
            try:
                if regroup:
                    await ensure_group(self.redis, streams.WEBHOOK_DELIVERIES, streams.WEBHOOK_SENDERS_GROUP)
                    regroup = False
                await self.move_due()
                free = self.settings.concurrency - len(inflight)
                if free <= 0:
                    await asyncio.wait(inflight, timeout=READ_BLOCK_MS / 1000, return_when=asyncio.FIRST_COMPLETED)
                    continue
                entries: list[Entry] = []
                if time.monotonic() >= next_claim:
                    entries = await self._claim(free)
                    next_claim = time.monotonic() + (0 if entries else CLAIM_INTERVAL_S)
                if not entries:
                    resp: Any = await self.redis.xreadgroup(
                        streams.WEBHOOK_SENDERS_GROUP, self.consumer, {streams.WEBHOOK_DELIVERIES: ">"},
                        count=free, block=READ_BLOCK_MS,
                    )  # fmt: skip
                    entries = entries_of(resp)
                for entry_id, fields in entries:
                    task = asyncio.create_task(self._handle_logged(entry_id, fields))
                    inflight.add(task)
                    task.add_done_callback(inflight.discard)
                retry.ok()
            except Exception as exc:
                regroup = await retry.failed(exc) == "nogroup"
        if inflight:
            # What does not finish stays pending and is claimed by a live sender.
            _, late = await asyncio.wait(inflight, timeout=min(5.0, self.settings.timeout_s))
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
