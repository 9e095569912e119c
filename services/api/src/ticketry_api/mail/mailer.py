"""Completed orders → one email each (group ``mailer`` on the ticket events).

Every api runs a mailer beside its webhook dispatcher: a consumer of the
group (``ticketry.consumer.GroupConsumer``), so it never holds up rendering or
the projector. Of each batch of ticket events it keeps the ``order.completed``
ones, reads which of those orders carry an ``email`` (one store read per
batch), and makes each one's first try while it holds the batch (keeping its
entries from being claimed by a peer as long as it works). What comes of a
try is :func:`ticketry_api.core.deliveries.decide`'s, as for a webhook:

* sent: the once-only marker (``streams.mail_sent``) is set right after the
  server's 250 to DATA, before anything is acked;
* retry (a 4xx, a timeout, a lost connection): the next try goes into the
  retry set, due after the backoff;
* dead letter (a 5xx, or the last try failed): ``ticketry:mail:dead``, with
  the reason and the history.

Retries and dead letters are written in the MULTI that acks the batch. Due
retries are tried between reads, each leased first (its score moved a lease
ahead), so one api at a time tries it and a killed one's lease runs out.

Exactly one email per order: a try first looks for the marker, so an order
whose events come again (an api killed mid-batch: a peer claims them) or
whose retry is tried again is not mailed twice. What is left is the instant
between the server's 250 and the marker's SET (docs/email.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.message import EmailMessage
from typing import Any, Protocol, runtime_checkable

import aiosmtplib
import orjson
from aiosmtplib.email import flatten_message
from prometheus_client import Counter
from redis.asyncio import Redis
from ticketry import streams
from ticketry.consumer import CLAIM_INTERVAL_S, GroupConsumer
from ticketry.ids import ticket_ids
from ticketry.replies import Entry, as_text
from ticketry.storage import PdfStore

from ticketry_api.core.deliveries import DeadLetter, Decision, Done, Failure, Retry, decide, describe
from ticketry_api.mail.config import MailSettings, SmtpServer
from ticketry_api.mail.message import Attachments, OrderMail, build, fits, message_id
from ticketry_api.store import Store
from ticketry_api.web.links import LinkSettings, status_page_url
from ticketry_api.web.pdfs import join_pdfs
from ticketry_api.webhooks.deadletters import dead_fields

log = logging.getLogger(__name__)

BATCH = 500
_COMPLETED = b"order.completed"

OUTCOMES = Counter("ticketry_mail", "Order emails tried, by outcome (sent, retry, dead, skipped)", ["outcome"])

# KEYS: 1 retry set. ARGV: 1 member, 2 now ms, 3 lease end ms. Leases a due
# member: of all the apis that saw it due, one moves it and tries it.
_LEASE_LUA = """
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s or tonumber(s) > tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], 'XX', ARGV[3], ARGV[1])
return 1
"""


@runtime_checkable
class PassStore(Protocol):
    """A PDF store that also keeps wallet passes (``<order>/<ticket>.pkpass``)."""

    async def read_pass(self, order_id: str, ticket_id: str) -> bytes | None: ...


@dataclass(frozen=True)
class Job:
    """One order's mail at its ``attempt``-th try."""

    order_id: str
    attempt: int = 1
    history: tuple[str, ...] = ()

    def to_fields(self) -> dict[str, str]:
        return {"order": self.order_id, "attempt": str(self.attempt), "history": orjson.dumps(self.history).decode()}

    def member(self) -> str:
        return orjson.dumps(self.to_fields()).decode()

    @classmethod
    def from_fields(cls, f: dict[str, Any]) -> Job:
        return cls(str(f["order"]), int(f["attempt"]), tuple(orjson.loads(f.get("history") or "[]")))


@dataclass(frozen=True)
class Sent:
    pass


@dataclass(frozen=True)
class Tried:
    """What came of one try (``Done``: nothing to send: already sent, cancelled,
    gone) and, in words, why."""

    outcome: Sent | Decision
    what: str


def smtp_failure(exc: Exception, timeout_s: float) -> Failure:
    """What a failed SMTP try was: a 5xx is permanent, anything else is retried."""
    if isinstance(exc, aiosmtplib.SMTPRecipientsRefused) and exc.recipients:
        exc = exc.recipients[0]
    if isinstance(exc, aiosmtplib.SMTPResponseException) and exc.code >= 400:
        return Failure(f"SMTP {exc.code} {exc.message}"[:300], "permanent" if exc.code >= 500 else "retryable")
    if isinstance(exc, TimeoutError):
        return Failure(f"timed out after {timeout_s:g} s")
    return Failure(f"{type(exc).__name__}: {exc}"[:300])


def next_step(attempt: int, failure: Failure, settings: MailSettings) -> Decision:
    """After try ``attempt`` (1-based) failed: retry after the backoff, or the dead letters."""
    s = settings
    return decide(attempt, s.mail_max_attempts, failure, base_s=s.mail_backoff_base_s, cap_s=s.mail_backoff_cap_s)


@dataclass
class Mailer:
    redis: Redis
    store: Store
    pdfs: PdfStore
    settings: MailSettings
    server: SmtpServer
    links: LinkSettings
    secret: str  # signs the order links in the mails
    consumer: str
    _lease: Any = field(init=False)

    def __post_init__(self) -> None:
        self._lease = self.redis.register_script(_LEASE_LUA)
        self._slots = asyncio.Semaphore(self.settings.mail_concurrency)

    # -- one try ---------------------------------------------------------------------
    async def content(self, order_id: str) -> tuple[OrderMail, Attachments | None] | None:
        """The order's mail and its attachments (None: over the cap); None when
        there is nothing to mail (no such order, no email, cancelled)."""
        order = await self.store.orders.summary(order_id)
        if order is None or not order.email or order.status == "cancelled":
            return None
        event = await self.store.event(order.event_id)
        if event is None:
            return None
        m = OrderMail(
            order_id=order.id, to=order.email, sender=self.settings.mail_from, event_name=event.name,
            venue=event.venue, timezone=event.timezone, starts_at=event.starts_at, doors_at=event.doors_at,
            quantity=order.quantity, holder_name=order.holder_name,
            page_url=status_page_url(self.links, order.id, order.owner_id, secret=self.secret),
        )  # fmt: skip
        return m, await self.attachments(order.id, ticket_ids(order.id, order.quantity))

    async def attachments(self, order_id: str, ids: Sequence[str]) -> Attachments | None:
        """The tickets as one PDF and their passes, or None once they would
        pass the cap (read one by one: a big order is never read whole)."""
        cap = self.settings.mail_max_attachment_bytes
        pdfs: list[bytes] = []
        passes: list[tuple[str, bytes]] = []
        sizes: list[int] = []
        for tid in ids:
            pdf = await self.pdfs.read(order_id, tid)
            pkpass = await self.pdfs.read_pass(order_id, tid) if isinstance(self.pdfs, PassStore) else None
            for part in (pdf, pkpass):
                if part is not None:
                    sizes.append(len(part))
            if not fits(sizes, cap):
                return None
            if pdf is not None:
                pdfs.append(pdf)
            if pkpass is not None:
                passes.append((f"{tid}.pkpass", pkpass))
        joined = await asyncio.to_thread(join_pdfs, pdfs)
        got = Attachments(joined, tuple(passes))
        return got if fits([got.size], cap) else None

    async def deliver(self, msg: EmailMessage, to: str, accepted: Callable[[], Awaitable[Any]]) -> None:
        """Send ``msg`` once; ``accepted`` is awaited as soon as the server has
        answered 250 to DATA, before the QUIT (one round trip less in the window
        between the server's 250 and the order's marker). What ``aiosmtplib.send``
        does, but the message (megabytes of base64 PDF) is flattened in a thread:
        on the event loop it held the api's requests up for about a second per mail."""
        s, t, sender = self.server, self.settings.mail_timeout_s, self.settings.mail_from
        utf8 = not (sender + to).isascii()
        async with asyncio.timeout(t):
            client = aiosmtplib.SMTP(
                hostname=s.host, port=s.port, use_tls=s.tls, username=s.username, password=s.password, timeout=t
            )
            async with client:
                options = ["SMTPUTF8"] if utf8 else []
                if utf8 and not client.supports_extension("smtputf8"):
                    raise aiosmtplib.SMTPNotSupported("a non-ASCII address, and the server offers no SMTPUTF8")
                eight = client.supports_extension("8BITMIME")
                if eight:
                    options.append("BODY=8BITMIME")
                flat = await asyncio.to_thread(flatten_message, msg, utf8=utf8, cte_type="8bit" if eight else "7bit")
                await client.sendmail(sender, [to], flat, mail_options=options)
                await accepted()

    def _failed(self, job: Job, failure: Failure) -> Tried:
        return Tried(next_step(job.attempt, failure, self.settings), describe(failure))

    async def attempt(self, job: Job) -> Tried:
        """One try of ``job``; what came of it."""
        marker = streams.mail_sent(job.order_id)
        if await self.redis.exists(marker):
            return Tried(Done(), "already sent")
        got = await self.content(job.order_id)
        if got is None:
            return Tried(Done(), "nothing to mail (no order, no email, or cancelled)")
        mail, files = got
        sent = False

        async def mark() -> None:
            # The marker, at once: a crash from here on must not mail the order again.
            nonlocal sent
            await self.redis.set(marker, message_id(job.order_id, self.settings.mail_from), ex=streams.MAIL_SENT_TTL_S)
            sent = True

        try:
            await self.deliver(build(mail, files), mail.to, mark)
        except (aiosmtplib.SMTPException, OSError) as exc:  # TimeoutError is an OSError
            if not sent:
                return self._failed(job, smtp_failure(exc, self.settings.mail_timeout_s))
            # only the QUIT after the 250 failed: the message is the server's
        return Tried(Sent(), "sent" if files is not None else "sent (link, over the attachment cap)")

    async def attempt_logged(self, job: Job) -> Tried:
        async with self._slots:
            try:
                tried = await self.attempt(job)
            except Exception as exc:  # the store or Redis: retried like a lost connection
                log.exception("mail: try failed unexpectedly", extra={"order_id": job.order_id})
                tried = self._failed(job, Failure(f"{type(exc).__name__}: {exc}"[:300]))
        kind = {Sent: "sent", Retry: "retry", DeadLetter: "dead"}.get(type(tried.outcome), "skipped")
        OUTCOMES.labels(kind).inc()
        log.info(
            "mail try",
            extra={"order_id": job.order_id, "attempt": job.attempt, "outcome": kind, "what": tried.what},
        )
        return tried

    # -- what comes of tries, with the acks ------------------------------------------
    def _record(self, pipe: Any, job: Job, tried: Tried, source: str) -> None:
        note = f"attempt {job.attempt}: {tried.what} at {_now_iso()}"
        out = tried.outcome
        if isinstance(out, Retry):
            nxt = Job(job.order_id, job.attempt + 1, (*job.history, note))
            pipe.zadd(streams.MAIL_RETRIES, {nxt.member(): int((time.time() + out.delay_s) * 1000)})
        elif isinstance(out, DeadLetter):
            dead = Job(job.order_id, job.attempt, (*job.history, note))
            pipe.xadd(streams.MAIL_DEAD, dead_fields(dead.to_fields(), out.reason, source))

    async def handle(self, entries: list[Entry], claimer: Any) -> None:
        """A batch of ticket events: first tries for its completed orders with an email, then the ack."""
        completed = sorted({as_text(f.get(b"order_id", b"")) for _, f in entries if f.get(b"type") == _COMPLETED})
        emails = await self.store.orders.emails(completed) if completed else {}
        jobs = [Job(o) for o in completed if o in emails]
        ids = [e for e, _ in entries]
        async with _kept(claimer, ids, self.settings.mail_claim_idle_ms):
            outs = await asyncio.gather(*(self.attempt_logged(j) for j in jobs))
        async with self.redis.pipeline(transaction=True) as pipe:
            for job, out in zip(jobs, outs, strict=True):
                self._record(pipe, job, out, "ticket-events")
            pipe.xack(streams.TICKET_EVENTS, streams.MAIL_GROUP, *ids)
            await pipe.execute()

    async def retry_due(self) -> None:
        """Try the retries that are due (a GroupConsumer chore: never raises)."""
        try:
            now = int(time.time() * 1000)
            due: list[Any] = await self.redis.zrangebyscore(
                streams.MAIL_RETRIES, "-inf", now, 0, self.settings.mail_concurrency
            )
            leased: list[tuple[str, Job]] = []
            for raw in due:
                member = as_text(raw)
                lease = [member, now, now + self.settings.mail_claim_idle_ms]
                if await self._lease(keys=[streams.MAIL_RETRIES], args=lease):
                    leased.append((member, Job.from_fields(orjson.loads(member))))
            if not leased:
                return
            outs = await asyncio.gather(*(self.attempt_logged(j) for _, j in leased))
            async with self.redis.pipeline(transaction=True) as pipe:
                for (member, job), out in zip(leased, outs, strict=True):
                    pipe.zrem(streams.MAIL_RETRIES, member)
                    self._record(pipe, job, out, "retries")
                await pipe.execute()
        except Exception:
            log.exception("mail: retries failed; will retry")

    async def run(self, stop: asyncio.Event) -> None:
        """Mail until ``stop``; never dies (``ticketry.consumer``). The group starts
        at the stream's end (``$``): orders completed before mail was on are not mailed."""
        consumer = GroupConsumer(
            self.redis, streams.TICKET_EVENTS, streams.MAIL_GROUP, self.consumer,
            lambda entries: self.handle(entries, consumer.claimer), "mailer", log,
            batch=BATCH, claim_idle_ms=self.settings.mail_claim_idle_ms, claim_interval_s=CLAIM_INTERVAL_S,
            start="$", chores=self.retry_due,
        )  # fmt: skip
        await consumer.run(stop)


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@contextlib.asynccontextmanager
async def _kept(claimer: Any, ids: Sequence[bytes], idle_ms: int) -> AsyncIterator[None]:
    """Keep a batch's entries ours while its mails go out: their idle time is
    reset a few times per ``idle_ms``, so no peer takes a live batch for a dead one's."""
    every_s = idle_ms / 3000

    async def touch() -> None:
        while True:
            await asyncio.sleep(every_s)
            with contextlib.suppress(Exception):
                await claimer.touch(ids, idle_ms // 3)

    task = asyncio.create_task(touch())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
