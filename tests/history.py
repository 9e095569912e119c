"""Histories of client operations, and their check by a linearizability checker.

A test records every client operation it makes (``History``), writes the
history as JSON lines, and ``check`` runs ``.bin/linearize`` (porcupine,
infra/linearize/) on it against two models:

* capacity, per tier: ``reserve`` of ``k`` tickets answers ``ok`` only if
  ``sold + k <= capacity`` (then ``sold += k``) and ``sold_out`` only if not;
* check-in, per ticket: the first ``checkin`` admits, every later one says
  ``already`` (a cancelled ticket's scans say ``cancelled``; a ``cancel``
  succeeds unless the ticket was admitted).

The file (schema version 1, one JSON object a line)::

    {"header": {"version": 1, "capacity": {"<tier key>": 20}}}
    {"client": 3, "op": "reserve", "key": "<tier key>", "input": {"k": 2},
     "output": {"status": "ok", "http": 202}, "call": <ns>, "return": <ns>}

``client`` is an integer >= 0 (one per concurrent client; porcupine's
visualization draws a row per client), ``call`` and ``return`` are
``time.monotonic_ns()`` at the invocation and at the answer. A reserve's
capacity comes from the header (or ``input.capacity`` on every reserve of the
key). ``output.status`` is the model's answer:

* reserve: ``ok`` | ``sold_out`` | ``unknown`` | ``none``
* checkin: ``admitted`` | ``already`` | ``cancelled`` | ``unknown`` | ``none``
* cancel:  ``ok`` | ``refused`` | ``unknown`` | ``none``

``unknown``: the client cannot tell whether the operation took effect (a
timeout, a lost connection, a 5xx other than a refusal made before any
write). Its ``return`` is written as ``null``; the checker gives it a return
time after everything else, so it may be linearized anywhere after its call
(or never: last). ``none``: it certainly took no effect (refused before any
write: 422, 429, a per-buyer limit, a 503 shed at the door); it is left out.
Anything else in ``output`` (the HTTP status, the problem type) is only shown
in the visualization.

A retried operation (the same Idempotency-Key after a 503) is ONE operation:
its call is the first attempt's, its return and answer the last's.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import orjson

ROOT = Path(__file__).resolve().parent.parent
LINEARIZE = ROOT / ".bin" / "linearize"

Op = Literal["reserve", "hold", "release", "checkin", "cancel"]
STATUSES: dict[str, frozenset[str]] = {
    "reserve": frozenset({"ok", "sold_out", "unknown", "none"}),
    # What an order cut off mid-way held (its ledger entry), and the outbox sweep gave back.
    "hold": frozenset({"ok"}),
    "release": frozenset({"ok"}),
    "checkin": frozenset({"admitted", "already", "cancelled", "unknown", "none"}),
    "cancel": frozenset({"ok", "refused", "unknown", "none"}),
}


@dataclass
class Operation:
    """One client operation: invoked at ``call``; answered at ``ret`` with ``output``
    (``ret`` None while pending, and for an answer of unknown effect)."""

    client: int
    op: Op
    key: str
    input: dict[str, Any]
    call: int
    output: dict[str, Any] = field(default_factory=dict)
    ret: int | None = None
    done: bool = False

    def answer(self, status: str, **extra: Any) -> None:
        """The operation's answer, now (``extra``: e.g. ``http=202``, for the visualization)."""
        if status not in STATUSES[self.op]:
            raise ValueError(f"{self.op} cannot answer {status!r}")
        self.output = {"status": status, **extra}
        self.ret = None if status == "unknown" else time.monotonic_ns()
        self.done = True

    def line(self) -> dict[str, Any]:
        return {
            "client": self.client, "op": self.op, "key": self.key, "input": self.input,
            "output": self.output or {"status": "unknown"}, "call": self.call, "return": self.ret,
        }  # fmt: skip


class History:
    """The operations of one test run, in invocation order."""

    def __init__(self) -> None:
        self.capacity: dict[str, int] = {}
        self.ops: list[Operation] = []

    def tier(self, key: str, capacity: int) -> None:
        """Declare a tier (a capacity partition) and its capacity."""
        self.capacity[key] = capacity

    def invoke(self, client: int, op: Op, key: str, input: dict[str, Any] | None = None) -> Operation:
        """An operation invoked now; answer it with ``Operation.answer`` (unanswered, it is unknown)."""
        o = Operation(client, op, key, dict(input or {}), time.monotonic_ns())
        self.ops.append(o)
        return o

    @contextlib.asynccontextmanager
    async def record(
        self, client: int, op: Op, key: str, input: dict[str, Any] | None = None
    ) -> AsyncIterator[Operation]:
        """``async with history.record(...) as o: ...; o.answer(status)``. An exception
        out of the block before an answer (a timeout, a lost connection) makes
        the operation ``unknown``, and goes on; no answer and no exception is a bug
        of the test (ValueError)."""
        o = self.invoke(client, op, key, input)
        try:
            yield o
        except BaseException as exc:
            if not o.done:
                o.answer("unknown", error=type(exc).__name__)
            raise
        if not o.done:
            raise ValueError(f"operation {op} {key} of client {client} was never answered")

    def lines(self) -> list[dict[str, Any]]:
        header = {"header": {"version": 1, "capacity": dict(self.capacity)}}
        return [header, *(o.line() for o in self.ops)]

    def write(self, path: Path) -> Path:
        path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in self.lines()))
        return path


def write_lines(path: Path, lines: Iterable[dict[str, Any]]) -> Path:
    """A history file of these lines (for hand-written and doctored histories)."""
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(raw) for raw in path.read_bytes().splitlines() if raw.strip()]


@dataclass(frozen=True)
class CheckResult:
    """The checker's verdict: ``code`` 0 linearizable, 1 not (``line`` names the
    model and partition), 2 malformed input, 3 no verdict in time."""

    code: int
    line: str
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.code == 0


def check(path: Path, *, model: str = "auto", viz: Path | None = None, timeout_s: float = 120) -> CheckResult:
    """Run ``.bin/linearize`` (built by infra/bootstrap.sh) on the history at ``path``."""
    if not LINEARIZE.exists():
        raise FileNotFoundError(f"{LINEARIZE} is missing: run infra/bootstrap.sh")
    args = [str(LINEARIZE), "-model", model, "-timeout", f"{timeout_s}s"]
    if viz is not None:
        args += ["-viz", str(viz)]
    done = subprocess.run([*args, str(path)], capture_output=True, text=True, timeout=timeout_s + 60, check=False)
    first = (done.stdout or done.stderr).splitlines()
    return CheckResult(done.returncode, first[0] if first else "", done.stdout, done.stderr)


# Recorded client operations against a running api (one HTTP client each,
# the same for the chaos tests).


def _retry_after(r: httpx.Response | None) -> float:
    try:
        return min(5.0, max(0.1, float(r.headers.get("Retry-After", "1")))) if r is not None else 0.5
    except ValueError:
        return 1.0


async def recorded_order(
    api: httpx.AsyncClient,
    history: History,
    client: int,
    *,
    buyer: str,
    event_id: str,
    quantity: int,
    tier: str = "standard",
    idempotency_key: str | None = None,
    attempts: int = 30,
    holder: str = "Ada Lovelace",
) -> httpx.Response | None:
    """``POST /v1/orders`` as a careful buyer does: one Idempotency-Key, the same
    request again after an answer of unknown effect (5xx, a lost connection,
    "order in progress"), waiting its Retry-After, until a definite answer or
    ``attempts``. Recorded as ONE ``reserve`` on the partition ``<event>/<tier>``
    (the tier's capacity must be declared with ``History.tier``). The last answer
    (None: no answer at all)."""
    key = idempotency_key or uuid.uuid4().hex
    body = {"event_id": event_id, "quantity": quantity, "holder_name": holder, "tier": tier}
    headers = {"Authorization": f"Bearer {buyer}", "Idempotency-Key": key}
    last: httpx.Response | None = None
    async with history.record(client, "reserve", f"{event_id}/{tier}", {"k": quantity}) as op:
        for attempt in range(1, attempts + 1):
            try:
                last = await api.post("/v1/orders", json=body, headers=headers)
            except httpx.TransportError:
                last = None
            status = reserve_status(last) if last is not None else "unknown"
            if status != "unknown" or attempt == attempts:
                extra = {"http": last.status_code} if last is not None else {}
                op.answer(status, attempts=attempt, **extra)
                break
            await asyncio.sleep(_retry_after(last))  # the client's back-off, as the answer asks
    return last


async def recorded_scan(
    api: httpx.AsyncClient,
    history: History,
    client: int,
    *,
    staff: str,
    code: str,
    ticket_id: str,
    list_id: str,
    attempts: int = 30,
) -> httpx.Response | None:
    """``POST /v1/checkins`` of one code, recorded as a ``checkin`` on the
    partition ``ticket_id``. With a nonce of its own, so a retry after an answer
    of unknown effect gets the first upload's answer, never a second check-in."""
    body = {"code": code, "list_id": list_id, "nonce": uuid.uuid4().hex}
    headers = {"Authorization": f"Bearer {staff}"}
    last: httpx.Response | None = None
    async with history.record(client, "checkin", ticket_id) as op:
        for attempt in range(1, attempts + 1):
            try:
                last = await api.post("/v1/checkins", json=body, headers=headers)
            except httpx.TransportError:
                last = None
            status = checkin_status(last) if last is not None else "unknown"
            if status != "unknown" or attempt == attempts:
                extra = {"http": last.status_code} if last is not None else {}
                op.answer(status, attempts=attempt, **extra)
                break
            await asyncio.sleep(_retry_after(last))
    return last


# How the api's answers map onto the models (pure; the HTTP status and the
# problem's type decide).


def _kind(r: httpx.Response) -> str:
    if not r.headers.get("content-type", "").startswith("application/problem+json"):
        return ""
    try:
        return str(r.json().get("type", "")).rsplit("/", 1)[-1]
    except ValueError:
        return ""


def reserve_status(r: httpx.Response) -> str:
    """``POST /v1/orders``: 202 reserved its tickets; 409 "sold out" refused for
    capacity (the event's or the tier's); the other 409s (per-buyer limit, an
    Idempotency-Key of another buyer) and 4xx refuse before any reservation;
    "order in progress" and every 5xx may or may not have reserved."""
    if r.status_code in (200, 202):
        return "ok"
    if r.status_code == 409:
        title = r.json().get("title", "") if r.headers.get("content-type", "").endswith("json") else ""
        if title == "sold out":
            return "sold_out"
        return "unknown" if title == "order in progress" else "none"
    if 400 <= r.status_code < 500:
        return "none"
    return "unknown"


def checkin_status(r: httpx.Response) -> str:
    """``POST /v1/checkins``: 200 admitted; 409 ``…/already-checked-in`` already;
    404 ``…/unknown-code`` for a genuine code is a cancelled ticket; other
    4xx (wrong list, forbidden) judge before any admission; "scan in progress"
    and every 5xx may or may not have admitted."""
    kind = _kind(r)
    if r.status_code == 200:
        return "admitted"
    if r.status_code == 409 and kind == "already-checked-in":
        return "already"
    if r.status_code == 404 and kind == "unknown-code":
        return "cancelled"
    if r.status_code == 409 and kind not in ("wrong-list",):
        return "unknown"  # "scan in progress": the first upload of the nonce is still being judged
    if 400 <= r.status_code < 500:
        return "none"
    return "unknown"
