"""No credential in any log line, with every service logging at INFO.

uvicorn logs each WebSocket handshake with its path and query, so a progress
socket opened with ``?token=`` put the buyer's JWT in the notifier's log. This
stack logs at INFO (the suite's stacks log at WARNING, where that line never
shows): the test waits for the handshake line of each of its sockets, so the
lines that would carry a token are known to be there, stops every service (each
flushes its last lines on the way out, and each must have written a line we
know), and then finds no token, no signature and nothing JWT-shaped in any log
file. The filter itself is unit-tested on uvicorn's record in
``tests/unit/test_log_redaction.py``.
"""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path

import httpx
import websockets
from ticketry.auth import issue_token
from ticketry.settings import DEV_JWT_SECRET
from ticketry_devstack.procs import Stack, free_port
from websockets.typing import Subprotocol

from tests.conftest import make_stack
from tests.helpers import bearer, create_event, place_order


def token(sub: str, role: str = "buyer", ttl_s: int = 3600) -> str:
    return issue_token(sub, role, key=DEV_JWT_SECRET, ttl_s=ttl_s)  # type: ignore[arg-type]


async def open_socket(url: str, until: str = "", **kw: object) -> int:
    """Open a progress socket, read until a message of type ``until`` (else the
    first) or the close; the client port (uvicorn's handshake line names the
    socket by it)."""
    async with websockets.connect(url, **kw) as ws:  # type: ignore[arg-type]
        port: int = ws.local_address[1]
        try:
            async with asyncio.timeout(120):
                while until not in str(await ws.recv()):
                    pass
        except websockets.ConnectionClosed:
            pass
    return port


def logs_of(stack: Stack) -> dict[Path, str]:
    return {p: p.read_text(errors="replace") for p in sorted(stack.data_dir.rglob("*.log"))}


async def test_no_token_reaches_any_log(tmp_path: Path) -> None:
    stack = await asyncio.to_thread(make_stack, tmp_path / "stack", 1, {"TICKETRY_LOG_LEVEL": "INFO"})
    try:
        await asyncio.to_thread(
            stack.start_service,
            "scaler",
            {"TICKETRY_SCALER_BACKEND": "dry-run", "TICKETRY_SCALER_METRICS_PORT": str(free_port())},
        )
        # Given buyers, their orders and requests with tokens in every place a client puts them
        buyer, other = token("logs-buyer"), token("logs-other")
        expired = token("logs-buyer", ttl_s=-120)
        async with httpx.AsyncClient(base_url=stack.api_url, timeout=60) as api:
            event = await create_event(api, token("logs-org", "organizer"), capacity=10)
            order = (await place_order(api, buyer, event["id"], 2)).json()
            await api.get(f"/v1/orders/{order['id']}", headers=bearer(buyer))
            await api.get(f"/v1/orders/{order['id']}?token={buyer}")  # a client's mistake: token in a URL
            await api.get(f"/v1/orders/{order['id']}", headers=bearer(expired))
        progress = order["progress_url"]
        # When progress sockets open with ?token= (good, expired, not the owner) and by subprotocol
        ports = [
            await open_socket(f"{progress}?token={buyer}&after=0-0", until="order.completed"),
            await open_socket(f"{progress}?token={expired}"),
            await open_socket(f"{progress}?token={other}"),
            await open_socket(progress, subprotocols=[Subprotocol("ticketry"), Subprotocol(f"bearer.{buyer}")]),
        ]
        # Then the notifier logged each handshake (with its query, redacted)
        notifier_log = stack.data_dir / "logs" / "notifier.log"
        scaler_log = stack.data_dir / "logs" / "scaler.log"

        def handshakes() -> list[str]:
            text = notifier_log.read_text(errors="replace")
            return [ln for ln in text.splitlines() if "[accepted]" in ln and "/progress" in ln]

        async with asyncio.timeout(60):
            while not all(any(f"127.0.0.1:{p} - " in ln for ln in handshakes()) for p in ports):
                await asyncio.sleep(0.1)
            while "scaler started" not in scaler_log.read_text(errors="replace"):
                await asyncio.sleep(0.1)
        by_port = {p: next(ln for ln in handshakes() if f"127.0.0.1:{p} - " in ln) for p in ports}
        assert "?token=[redacted]&after=0-0" in by_port[ports[0]]
        assert "?token=[redacted]" in by_port[ports[1]] and "?token=[redacted]" in by_port[ports[2]]
        assert "?" not in by_port[ports[3]].split("WebSocket ", 1)[1].split('"', 1)[0]
    finally:
        # Every service flushes its last lines as it stops
        await asyncio.to_thread(stack.stop)
    try:
        logs = logs_of(stack)
        known = {
            "api.log": "Finished server process",
            "notifier.log": "Finished server process",
            "renderer-0.log": "renderer drained",  # it rendered the order: it was up
            "scaler.log": "scaler stopped",
        }
        for name, line in known.items():
            assert line in logs[stack.data_dir / "logs" / name], f"{name} lacks {line!r}"
        # And no log file holds a token, its signature, or anything shaped like a JWT
        for path, text in logs.items():
            for tok in (buyer, other, expired):
                assert tok.rsplit(".", 1)[1] not in text, path
            found = re.findall(r"eyJ[A-Za-z0-9_\-]{4,}", text)
            assert not found, (path, found[:3])
    finally:
        shutil.rmtree(tmp_path / "stack", ignore_errors=True)
