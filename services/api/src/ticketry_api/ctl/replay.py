"""``ticketryctl replay``: rebuild the read models from the ticket events and
compare them with the live ones.

The projector folds the ticket-event stream into ``ticket_states`` and
``order_states``. Replay reads the same stream from its first entry and folds
it with the projector's own code (``projector.apply``, in batches) into a
fresh database on the same server, then compares document by document:

* a document rebuilt but missing from the live database, or different there
  (ticket: order, status, reason, time; order: status, counters, last event),
  is a difference;
* a live document the stream should have rebuilt but did not is a difference;
  "should": nothing was ever removed from the stream (its ``entries-added``
  equals its ``length``), or the document is younger than the stream's first
  entry;
* older live documents are "older than the stream": their events were trimmed
  (after ``EVENTS_RETENTION_S`` and once every group acked them), so replay
  cannot rebuild them, and says so without calling it a difference.

Replay stops at the last event the projector has acked (it first waits, up to
``--settle``, for the projector to catch up), and documents that events after
that point touched are left out of the comparison: the live side has moved on.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any
from urllib.parse import urlsplit, urlunsplit

import typer
from pymongo import AsyncMongoClient
from pymongo.uri_parser import parse_uri
from redis.asyncio import Redis
from ticketry import streams
from ticketry.db import connect_mongo, entries_of
from ticketry.events import DecodeError, TicketEvent, decode_ticket_event
from ticketry.replies import as_text

from ticketry_api.ctl.common import JsonOpt, console, err, fail, print_json, redis_client, run, settings
from ticketry_api.loops import projector
from ticketry_api.store import Store

BATCH = 2000
TICKET_FIELDS = ("order_id", "status", "reason", "at")
ORDER_FIELDS = ("status", "total", "rendered", "failed", "last_event", "completed_at")

HELP = f"""Rebuild the read models (ticket_states, order_states) from the ticket-event
stream into a fresh database on the same server, compare them with the live
ones and print every difference (exit 1 if there is any).

Ticket events are kept {streams.EVENTS_RETENTION_S // 3600} h (streams.EVENTS_RETENTION_S), and longer
while a consumer group still owes them; older ones are trimmed. So replay
rebuilds the states of tickets and orders whose events are still in the
stream (about the last day); older live documents are counted as "older than
the stream", not as differences. The fresh database is dropped afterwards
unless --keep is given."""


def database_url(url: str, name: str) -> str:
    """``url`` with its database replaced by ``name``."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def _ms(entry_id: str) -> int:
    return streams.stream_key(entry_id)[0]


@dataclass
class Report:
    database: str
    kept: bool
    settled: bool
    events: dict[str, Any] = field(default_factory=dict)
    ticket_states: dict[str, int] = field(default_factory=dict)
    order_states: dict[str, int] = field(default_factory=dict)
    differences: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "database": self.database, "kept": self.kept, "settled": self.settled, "events": self.events,
            "ticket_states": self.ticket_states, "order_states": self.order_states,
            "differences": self.differences, "identical": not self.differences,
        }  # fmt: skip


async def settle(redis: Redis, timeout_s: float) -> tuple[str, bool]:
    """Wait until the projector group has nothing pending and nothing unread;
    ``(its last delivered id, settled?)``."""
    deadline = time.monotonic() + timeout_s
    while True:
        groups: list[dict[Any, Any]] = await redis.xinfo_groups(streams.TICKET_EVENTS)
        g = next((x for x in groups if as_text(x["name"]) == streams.PROJECTOR_GROUP), None)
        if g is None:
            raise fail("the ticket-event stream has no projector group (no api ever ran?)")
        info: dict[str, Any] = await redis.xinfo_stream(streams.TICKET_EVENTS)
        last = as_text(g["last-delivered-id"])
        caught_up = last == as_text(info["last-generated-id"]) or g.get("lag") == 0
        if int(g["pending"]) == 0 and caught_up:
            return last, True
        if time.monotonic() >= deadline:
            return last, False
        await asyncio.sleep(0.2)


async def _fold(redis: Redis, stop_id: str) -> tuple[int, int]:
    """Fold every event up to ``stop_id`` into the database beanie is bound to."""
    replayed = undecodable = 0
    start = "-"
    tickets = Store.create().tickets  # this command's own, as the api has its own
    while True:
        chunk = entries_of(await redis.xrange(streams.TICKET_EVENTS, min=start, max=stop_id, count=BATCH))
        if not chunk:
            return replayed, undecodable
        events: list[TicketEvent] = []
        for eid, fields in chunk:
            try:
                events.append(decode_ticket_event(eid, fields))
            except DecodeError:
                undecodable += 1
        await projector.apply(tickets, events)
        replayed += len(chunk)
        start = "(" + as_text(chunk[-1][0])


async def _touched_after(redis: Redis, stop_id: str) -> tuple[set[str], set[str]]:
    """Tickets and orders that events after ``stop_id`` touch."""
    tickets: set[str] = set()
    orders: set[str] = set()
    start = "(" + stop_id
    while True:
        chunk = entries_of(await redis.xrange(streams.TICKET_EVENTS, min=start, max="+", count=BATCH))
        if not chunk:
            return tickets, orders
        for eid, fields in chunk:
            try:
                ev = decode_ticket_event(eid, fields)
            except DecodeError:
                continue
            orders.add(ev.order_id)
            if ev.ticket_id:
                tickets.add(ev.ticket_id)
        start = "(" + as_text(chunk[-1][0])


async def _docs(client: AsyncMongoClient[dict[str, Any]], db: str, col: str, fields: tuple[str, ...]) -> dict[str, Any]:
    projection = dict.fromkeys(fields, 1)
    return {d["_id"]: d async for d in client[db][col].find({}, projection)}


def _norm(doc: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    out = {}
    for f in fields:
        v = doc.get(f)
        out[f] = v.astimezone(UTC).isoformat() if isinstance(v, datetime) else v
    return out


def compare(
    name: str,
    rebuilt: dict[str, Any],
    live: dict[str, Any],
    fields: tuple[str, ...],
    moved_on: set[str],
    covered: Any,
) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """Differences between one collection's rebuilt and live documents.
    ``covered(doc)``: whether the stream should have rebuilt a live document."""
    diffs: list[dict[str, Any]] = []
    counts = {"rebuilt": len(rebuilt), "live": len(live), "compared": 0, "older_than_stream": 0, "moved_on": 0}
    for _id, doc in rebuilt.items():
        if _id in moved_on:
            counts["moved_on"] += 1
            continue
        counts["compared"] += 1
        mine = _norm(doc, fields)
        if _id not in live:
            diffs.append({"collection": name, "id": _id, "kind": "missing_in_live", "rebuilt": mine, "live": None})
        elif (theirs := _norm(live[_id], fields)) != mine:
            diffs.append({"collection": name, "id": _id, "kind": "differs", "rebuilt": mine, "live": theirs})
    for _id, doc in live.items():
        if _id in rebuilt or _id in moved_on:
            continue
        if covered(doc):
            diffs.append(
                {"collection": name, "id": _id, "kind": "not_in_stream", "rebuilt": None, "live": _norm(doc, fields)}
            )
        else:
            counts["older_than_stream"] += 1
    return counts, diffs


def nothing_removed(info: dict[str, Any]) -> bool:
    """Whether no entry ever left the stream (``XINFO STREAM``'s reply).

    ``entries-added`` counts every entry ever appended, ``length`` those left.
    Not ``max-deleted-entry-id``: only XDEL sets it, and the stream is trimmed
    with XTRIM MINID (``ticketry_api.adapters.trim``), which leaves it at 0-0
    (https://redis.io/docs/latest/commands/xinfo-stream/). Without
    ``entries-added`` (Redis before 7.0) the answer is no: older documents are
    then judged by their time.
    """
    added = info.get("entries-added")
    return added is not None and int(added) == int(info.get("length", 0))


async def replay(database: str | None, keep: bool, settle_s: float) -> Report:
    s = settings()
    live_db = parse_uri(s.mongo_url).get("database") or "ticketry"
    fresh = database or f"{live_db}_replay_{int(time.time())}"
    if fresh == live_db:
        raise fail("the replay database must not be the live one")
    async with redis_client() as redis:
        if not await redis.exists(streams.TICKET_EVENTS):
            raise fail("there is no ticket-event stream to replay")
        stop_id, settled = await settle(redis, settle_s)
        info: dict[str, Any] = await redis.xinfo_stream(streams.TICKET_EVENTS)
        first = entries_of(await redis.xrange(streams.TICKET_EVENTS, "-", "+", count=1))
        first_id = as_text(first[0][0]) if first else None
        never_trimmed = nothing_removed(info)
        probe: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(s.mongo_url, serverSelectionTimeoutMS=10_000)
        try:
            if fresh in await probe.list_database_names():
                raise fail(f"database {fresh} exists already; name a new one (replay never writes into old data)")
        finally:
            await probe.close()
        client = await connect_mongo(database_url(s.mongo_url, fresh), create_indexes=True, pool_size=4)
        try:
            replayed, undecodable = await _fold(redis, stop_id)
            tickets_after, orders_after = await _touched_after(redis, stop_id)
            report = Report(database=fresh, kept=keep, settled=settled)
            report.events = {
                "replayed": replayed, "undecodable": undecodable, "first": first_id, "last": stop_id,
                "trimmed_before_first": not never_trimmed, "retention_s": streams.EVENTS_RETENTION_S,
            }  # fmt: skip
            # A document whose event is in the stream is at or after the first entry's
            # time; a minute's margin for clocks of other hosts.
            since = datetime.fromtimestamp(_ms(first_id) / 1000, UTC) + timedelta(minutes=1) if first_id else None
            first_key = streams.sortable_stream_id(first_id) if first_id else None

            def ticket_covered(doc: dict[str, Any]) -> bool:
                at = doc.get("at")
                return never_trimmed or (since is not None and isinstance(at, datetime) and at >= since)

            def order_covered(doc: dict[str, Any]) -> bool:
                return never_trimmed or (first_key is not None and str(doc.get("last_event", "")) >= first_key)

            for name, fields, moved, covered in (
                ("ticket_states", TICKET_FIELDS, tickets_after, ticket_covered),
                ("order_states", ORDER_FIELDS, orders_after, order_covered),
            ):
                counts, diffs = compare(
                    name, await _docs(client, fresh, name, fields), await _docs(client, live_db, name, fields),
                    fields, moved, covered,
                )  # fmt: skip
                setattr(report, name, counts)
                report.differences += diffs
            return report
        finally:
            if not keep:
                await client.drop_database(fresh)
            await client.close()


def replay_cmd(
    json: JsonOpt = False,
    keep: Annotated[bool, typer.Option("--keep", help="keep the rebuilt database (its name is printed)")] = False,
    database: Annotated[
        str | None, typer.Option("--database", help="name of the fresh database (default: <live>_replay_<time>)")
    ] = None,
    settle_s: Annotated[
        float, typer.Option("--settle", help="seconds to wait for the projector to catch up first", min=0)
    ] = 30.0,
) -> None:
    report = run(lambda: replay(database, keep, settle_s))
    if json:
        print_json(report.as_dict())
    else:
        ev = report.events
        console.print(
            f"replayed {ev['replayed']} events ({ev['first']} … {ev['last']}) into {report.database}"
            + (" (kept)" if report.kept else " (dropped)"),
            markup=False,
        )
        if not report.settled:
            err.print("[yellow]the projector had not caught up: documents it was folding may show as differences[/]")
        for name in ("ticket_states", "order_states"):
            c = getattr(report, name)
            console.print(
                f"{name}: {c['rebuilt']} rebuilt, {c['live']} live, {c['compared']} compared, "
                f"{c['older_than_stream']} older than the stream, {c['moved_on']} moved on since",
                markup=False,
            )
        for d in report.differences:
            console.print(f"DIFF {d['collection']} {d['id']} {d['kind']}: rebuilt={d['rebuilt']} live={d['live']}",
                          markup=False)  # fmt: skip
        console.print("identical" if not report.differences else f"{len(report.differences)} difference(s)")
    raise typer.Exit(1 if report.differences else 0)
