"""The operators' audit log (``streams.OPS_AUDIT``): who re-drove or deleted
which dead letters, when, and what came of it. Written by the one function
each action goes through (``audited``), whether the console or ``ticketryctl``
asked; a waiting room's pause, resume or close (kind ``room``) by its route
(``routes/waitingroom.py``), whoever called it."""

from __future__ import annotations

import getpass
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

import orjson
from redis.asyncio import Redis
from ticketry import streams
from ticketry.db import entries_of
from ticketry.replies import as_text

Action = Literal["redrive", "delete", "pause", "resume", "close"]
Kind = Literal["render", "webhooks", "room"]
DeadLetterAction = Callable[[Redis, Sequence[str]], Awaitable[dict[str, str]]]


async def record(redis: Redis, who: str, action: Action, kind: Kind, target: str, outcome: dict[str, str]) -> None:
    await redis.xadd(
        streams.OPS_AUDIT,
        {"who": who, "action": action, "kind": kind, "target": target,
         "outcome": orjson.dumps(outcome), "at": str(int(time.time() * 1000))},
        maxlen=streams.OPS_AUDIT_MAXLEN, approximate=True,
    )  # fmt: skip


async def audited(
    redis: Redis, who: str, action: Action, kind: Kind, act: DeadLetterAction, ids: Sequence[str], target: str = ""
) -> dict[str, str]:
    """``act`` on ``ids``, then its audit entry (``target``: the ids unless given)."""
    outcome = await act(redis, ids)
    await record(redis, who, action, kind, target or " ".join(ids), outcome)
    return outcome


def by_ctl(action: Action, kind: Kind, act: DeadLetterAction) -> DeadLetterAction:
    """``act`` as ``ticketryctl`` runs it: audited as ``ticketryctl:<login>``."""
    who = f"ticketryctl:{getpass.getuser()}"

    async def run(redis: Redis, ids: Sequence[str]) -> dict[str, str]:
        return await audited(redis, who, action, kind, act, ids)

    return run


async def recent(redis: Redis, count: int = 50) -> list[dict[str, Any]]:
    """The newest ``count`` entries, newest first."""
    out = []
    for entry_id, fields in entries_of(await redis.xrevrange(streams.OPS_AUDIT, count=count)):
        f = {as_text(k): as_text(v) for k, v in fields.items()}
        try:
            outcome = orjson.loads(f.get("outcome", "{}"))
        except orjson.JSONDecodeError:
            outcome = {}
        out.append({
            "id": as_text(entry_id), "who": f.get("who", ""), "action": f.get("action", ""),
            "kind": f.get("kind", ""), "target": f.get("target", ""), "outcome": outcome,
            "at": int(f.get("at", "0") or 0),
        })  # fmt: skip
    return out
