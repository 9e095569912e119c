"""No credential in any log line: ``ticketry.telemetry`` redaction.

The filter is shown on the very record uvicorn makes for a WebSocket handshake
(whose path carries ``?token=``: the token is in it before, and gone after), and
``setup_logging`` on a real uvicorn server in this process, so removing the
redaction fails these tests."""

from __future__ import annotations

import asyncio
import io
import logging
import sys
import threading
from collections.abc import Iterator

import orjson
import pytest
import uvicorn
import websockets
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket
from ticketry.auth import issue_token
from ticketry.telemetry import REDACTED, JsonFormatter, RedactingFilter, redact, setup_logging
from ticketry_devstack.procs import free_port
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

KEY = "a-test-secret-of-thirty-two-bytes!"
JWT = issue_token("buyer-1", "buyer", key=KEY)
SIGNATURE = JWT.rsplit(".", 1)[1]


@pytest.fixture
def clean_logging() -> Iterator[None]:
    """setup_logging changes process-wide state: put it back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    factory = logging.getLogRecordFactory()
    access = logging.getLogger("uvicorn.access").disabled
    hooks = sys.excepthook, threading.excepthook, sys.unraisablehook
    try:
        yield
    finally:
        sys.excepthook, threading.excepthook, sys.unraisablehook = hooks
        logging.captureWarnings(False)
        root.handlers[:] = handlers
        root.setLevel(level)
        logging.setLogRecordFactory(factory)
        logging.getLogger("uvicorn.access").disabled = access


@pytest.mark.parametrize(
    ("raw", "kept", "gone"),
    [
        (f'"WebSocket /v1/orders/or_1/progress?token={JWT}&after=1-0" [accepted]', ["after=1-0", "token="], [JWT]),
        (f"GET https://h/x?a=1&access_token={SIGNATURE}", ["https://h/x?"], [SIGNATURE]),
        (f"Authorization: Bearer {SIGNATURE}", ["Authorization"], [SIGNATURE]),
        (f"{{'authorization': 'Bearer {SIGNATURE}'}}", ["authorization"], [SIGNATURE]),
        (f"[(b'authorization', b'Basic {SIGNATURE}')]", ["authorization"], [SIGNATURE]),
        (f"sec-websocket-protocol: ticketry, bearer.{JWT}", ["sec-websocket-protocol"], [JWT, SIGNATURE]),
        (f"token={SIGNATURE}&x=1", ["token="], [SIGNATURE]),
        (f"bad token {JWT[:30]}", ["bad token"], [JWT[:30]]),  # even a cut-off JWT
        ("is it ready? yes: 3/4 done", ["is it ready? yes: 3/4 done"], []),
        ("order or_0123 rendered 20/20", ["order or_0123 rendered 20/20"], []),
    ],
    # Named, not drawn from the random secrets: every xdist worker collects the same ids.
    ids=[
        "socket-query",
        "access-token",
        "bearer",
        "header-dict",
        "asgi-headers",
        "socket-protocol",
        "token-param",
        "cut-jwt",
        "plain-question",
        "plain-order",
    ],
)
def test_redact(raw: str, kept: list[str], gone: list[str]) -> None:
    out = redact(raw)
    for text in gone:
        assert text not in out
    for text in kept:
        assert text in out
    assert (REDACTED in out) is bool(gone)


def uvicorn_handshake_record(query: str) -> logging.LogRecord:
    """The record uvicorn's WebSocket protocol logs on accept, made the way it
    makes it (its own helpers format the path), bypassing any record factory."""
    scope = {"type": "websocket", "path": "/v1/orders/or_0123/progress", "query_string": query.encode(),
             "client": ("127.0.0.1", 50123)}  # fmt: skip
    return logging.LogRecord(
        "uvicorn.error", logging.INFO, __file__, 1, '%s - "WebSocket %s" [accepted]',
        (get_client_addr(scope), get_path_with_query_string(scope)), None,  # type: ignore[arg-type]
    )  # fmt: skip


def test_the_filter_redacts_uvicorns_handshake_line() -> None:
    record = uvicorn_handshake_record(f"token={JWT}&after=1700000000000-0")
    assert JWT in record.getMessage()  # what reached the logs before
    assert RedactingFilter().filter(record) is True  # never drops a record
    line = JsonFormatter("notifier").format(record)
    msg = orjson.loads(line)["msg"]
    assert msg == (
        '127.0.0.1:50123 - "WebSocket /v1/orders/or_0123/progress?token=[redacted]&after=1700000000000-0" [accepted]'
    )
    assert SIGNATURE not in line and "eyJ" not in line


def test_the_filter_redacts_extras_and_exceptions() -> None:
    try:
        raise ValueError(f"refused ws://h/x?token={JWT}")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", None, sys.exc_info())
    record.headers = {"authorization": f"Bearer {JWT}"}
    record.raw = f"bearer.{JWT}".encode()
    RedactingFilter().filter(record)
    line = JsonFormatter("api").format(record)
    assert SIGNATURE not in line and "eyJ" not in line
    out = orjson.loads(line)
    assert "ValueError: refused ws://h/x?token=[redacted]" in out["exc"]


async def test_setup_logging_on_a_real_uvicorn_server(clean_logging: None) -> None:
    # Given a library logger with a handler of its own (no propagation), made before
    own = io.StringIO()
    lib = logging.getLogger("some.library")
    lib.propagate = False
    lib.handlers[:] = [logging.StreamHandler(own)]
    # and every service's logging set up, into a buffer
    stderr, sys.stderr = sys.stderr, io.StringIO()
    try:
        setup_logging("notifier", "INFO")
        logs = sys.stderr
    finally:
        sys.stderr = stderr

    async def ws_app(ws: WebSocket) -> None:
        await ws.accept()
        await ws.send_text("hi")
        await ws.close()

    port = free_port()
    config = uvicorn.Config(
        Starlette(routes=[WebSocketRoute("/v1/orders/{order_id}/progress", ws_app)]),
        host="127.0.0.1", port=port, log_config=None, ws="websockets-sansio", lifespan="off",
    )  # fmt: skip
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        # When a client opens the progress socket with its token in the URL
        url = f"ws://127.0.0.1:{port}/v1/orders/or_0123/progress?token={JWT}&after=5-0"
        async with websockets.connect(url) as ws:
            assert await ws.recv() == "hi"
            client_port = ws.local_address[1]
        lib.warning("upstream said %s", f"Authorization: Bearer {JWT}")
        logging.getLogger("made.later").info("url %s", f"/x?token={JWT}")
    finally:
        server.should_exit = True
        await serving
        lib.handlers.clear()
        lib.propagate = True
    # Then uvicorn's handshake line is there, for this socket, without the token
    text = logs.getvalue()
    lines = [orjson.loads(line) for line in text.splitlines()]
    accepted = [ln["msg"] for ln in lines if "[accepted]" in ln["msg"]]
    assert accepted == [
        f'127.0.0.1:{client_port} - "WebSocket /v1/orders/or_0123/progress?token=[redacted]&after=5-0" [accepted]'
    ]
    assert any(ln["msg"] == "url /x?token=[redacted]" for ln in lines)
    # and no line anywhere holds it
    for out in (text, own.getvalue()):
        assert SIGNATURE not in out and "eyJ" not in out
    assert "Authorization: [redacted]" in own.getvalue()
