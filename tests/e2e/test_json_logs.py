"""One log format: every line every service writes is one JSON object, with a
UTC millisecond timestamp, and the ids of the work it is about, its trace id
included, with the default configuration (no trace exporter): a stack of its
own at INFO, its renderers under the scaler, one ticket made to fail so the
renderer logs about it, a cancel that the api logs."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from ticketry import streams
from ticketry.telemetry import setup_logging

from tests.chaos.support import redis_of, wait_until
from tests.conftest import TokenFactory, make_stack
from tests.helpers import bearer, create_event, place_order

pytestmark = pytest.mark.e2e

# A caller's W3C trace context (a browser's or a gateway's), unsampled.
CALLER_TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
OTLP_VARS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
QUIET = ("weasyprint", "fontTools", "faststream")
ENV = {
    "TICKETRY_LOG_LEVEL": "INFO",
    "TICKETRY_RENDER_MAX_ATTEMPTS": "2",
    "TICKETRY_RETRY_BASE_S": "0.1",
    "TICKETRY_RETRY_CAP_S": "0.2",
}


def log_lines(logs: Path) -> list[tuple[str, dict[str, Any]]]:
    """Every line of every log of the stack, parsed; fails on the first that is not one JSON object."""
    out = []
    for path in sorted(logs.glob("*.log")):
        for n, raw in enumerate(path.read_bytes().splitlines(), 1):
            assert raw.strip(), f"{path.name}:{n}: an empty line"
            try:
                line = orjson.loads(raw)
            except orjson.JSONDecodeError:
                pytest.fail(f"{path.name}:{n} is not JSON: {raw[:300]!r}")
            assert isinstance(line, dict), f"{path.name}:{n}: {raw[:300]!r}"
            out.append((path.name, line))
    return out


@pytest.mark.timeout(300)
async def test_every_line_of_every_service_is_one_json_object(tmp_path: Path, token: TokenFactory) -> None:
    # No trace exporter configured: trace ids are there all the same
    stack = await asyncio.to_thread(make_stack, tmp_path / "stack", 0, ENV)
    assert not ({"TICKETRY_TRACE_FILE", *OTLP_VARS} & {*os.environ, *stack.env}), "an exporter is configured"
    redis = redis_of(stack)
    try:
        # Given an order placed before any renderer runs, one of its tickets
        # doomed (a directory squats on its PDF's path, as in the poison test)
        async with httpx.AsyncClient(base_url=stack.api_url, timeout=60) as api:
            event = await create_event(api, token("logs-org", "organizer"), capacity=10)
            r = await place_order(api, token("logs-buyer", "buyer"), event["id"], 5)
            assert r.status_code == 202, r.text
            order = r.json()
        doomed = order["tickets"][0]
        (Path(stack.env["TICKETRY_STORAGE_DIR"]) / order["id"] / f"{doomed}.pdf" / "x").mkdir(parents=True)
        entries: Any = await redis.xrange(streams.render_lane("standard", 5))
        traceparents = {orjson.loads(f[b"data"])["traceparent"] for _, f in entries}
        (traceparent,) = traceparents  # one order, one trace

        # When the scaler starts its renderers and they finish the order
        stack.start_service("scaler", {"TICKETRY_RENDERERS_MIN": "1", "TICKETRY_SCALER_METRICS_PORT": "0"})

        async def completed() -> bool:
            return bool(await redis.hget(streams.order_progress(order["id"]), "completed"))

        await wait_until(completed, 180)

        # And when the buyer cancels it, the request carrying a trace of its own
        async with httpx.AsyncClient(base_url=stack.api_url, timeout=60) as api:
            headers = {**bearer(token("logs-buyer", "buyer")), "traceparent": CALLER_TRACEPARENT}
            r = await api.post(f"/v1/orders/{order['id']}/cancel", headers=headers)
            assert r.status_code == 200, r.text
    finally:
        await redis.aclose()
        await asyncio.to_thread(stack.stop)

    # Then every line of every log (api, notifier, scaler with its renderers) is one JSON object
    lines = log_lines(stack.data_dir / "logs")
    for name, line in lines:
        assert {"ts", "level", "service", "logger", "msg"} <= line.keys(), (name, line)
        assert TS.match(line["ts"]), (name, line["ts"])
        assert "\x1b[" not in orjson.dumps(line).decode("unicode_escape"), (name, line)  # no colour codes
        # and third-party chatter stays below WARNING
        if line["logger"].startswith(QUIET):
            assert line["level"] in ("warning", "error", "critical"), (name, line)

    # And the lines we know of are there: uvicorn's through ours, each service's own
    def seen(service: str, msg: str) -> list[dict[str, Any]]:
        return [ln for _, ln in lines if ln["service"] == service and ln["msg"] == msg]

    assert seen("api", "Application startup complete.") and seen("notifier", "Application startup complete.")
    assert seen("scaler", "scaler started") and seen("renderer", "renderer started")
    # And the renderer's lines about the doomed ticket name it, its order and
    # its trace: the one the api started for the order's request
    assert traceparent, "the order's render requests carry no trace"
    trace_id = traceparent.split("-")[1]
    assert re.fullmatch(r"[0-9a-f]{32}", trace_id) and trace_id != "0" * 32, traceparent
    failed = seen("renderer", "render failed")
    assert failed, [ln for _, ln in lines if ln["service"] == "renderer"]
    for ln in failed:
        assert (ln["ticket_id"], ln["order_id"], ln["trace_id"]) == (doomed, order["id"], trace_id), ln
        assert ln["level"] == "warning"
    # And the api's line of the cancel request carries the caller's trace
    (cancelled,) = seen("api", "cancel: PDFs deleted")
    assert (cancelled["order_id"], cancelled["trace_id"]) == (order["id"], CALLER_TRACEPARENT.split("-")[1])


def test_a_library_that_prints_its_own_lines_is_routed_through_ours() -> None:
    # Given FastStream's logger, which prints coloured text to the terminal itself
    import faststream  # noqa: F401 - attaches its handler at import

    lib = logging.getLogger("faststream")
    assert any(type(h) is logging.StreamHandler for h in lib.handlers) or lib.propagate
    root = logging.getLogger()
    saved = root.handlers[:], root.level, lib.handlers[:], lib.propagate, lib.level
    excepthook = sys.excepthook
    out = io.StringIO()
    try:
        # When the service sets up logging (its lines read here)
        setup_logging("renderer", "INFO")
        (ours,) = root.handlers
        assert isinstance(ours, logging.StreamHandler)
        ours.setStream(out)
        lib.warning("subscriber %s failed", "ticketry:render:std")
        lib.info("FastStream app started successfully!")  # chatter
        logging.getLogger("weasyprint.progress").info("Step 1 - Fetching and parsing HTML")
    finally:
        root.handlers[:], level, lib.handlers[:], lib.propagate, lib_level = saved
        sys.excepthook = excepthook  # setup_logging routes warnings and uncaught exceptions: not in pytest's process
        logging.captureWarnings(False)
        root.setLevel(level)
        lib.setLevel(lib_level)
    # Then its warning is one of our JSON lines, and its INFO chatter is gone
    lines = [orjson.loads(raw) for raw in out.getvalue().splitlines()]
    assert [(ln["logger"], ln["level"], ln["msg"]) for ln in lines] == [
        ("faststream", "warning", "subscriber ticketry:render:std failed")
    ]
    assert TS.match(lines[0]["ts"])
