"""Logging is set up before anything else, so every line a service prints is
one of ours: a refused start, a warning, an exception nothing caught (in the
main thread, a thread, a finaliser). ``TICKETRY_LOG_FORMAT=console`` gives
people one readable line instead. And without any exporter, spans still get
trace ids (``ticketry.tracing``), so log lines carry them.

The processes here are real ones (``python -c``), each reading only the
environment it is given: the hooks are process-wide, so they are tested where
they are installed, in a fresh interpreter.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry import trace
from ticketry.telemetry import ConsoleFormatter, log_context
from ticketry.tracing import context_from, current_traceparent, tracer_provider

SHORT_SECRET = "too-short-a-secret"
SERVICES = ("api", "notifier", "renderer", "scaler")
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-{flags}"


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter with only ``env`` of TICKETRY_*/OTEL_*."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TICKETRY_", "OTEL_"))}
    return subprocess.run(
        [sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True, timeout=120, check=False
    )


def _json_lines(stderr: str) -> list[dict[str, Any]]:
    """Every line of ``stderr``, parsed; fails on the first that is not one JSON object."""
    lines = []
    for n, raw in enumerate(stderr.splitlines(), 1):
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError:
            pytest.fail(f"line {n} is not JSON: {raw[:300]!r}\n---\n{stderr[:3000]}")
        assert isinstance(line, dict), raw
        lines.append(line)
    return lines


@pytest.mark.parametrize("service", SERVICES)
def test_a_refused_start_is_told_in_json_lines_only(service: str) -> None:
    # Given a secret too short for HS256, when the service's entry point starts
    proc = _python(f"from ticketry_{service}.main import run; run()", {"TICKETRY_JWT_SECRET": SHORT_SECRET})
    # Then it stops, every line it printed is one JSON object, and one says why (no traceback: the code is fine)
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = _json_lines(proc.stderr)
    (stop,) = [ln for ln in lines if ln["level"] == "critical"]
    assert stop["service"] == service
    assert stop["msg"].startswith("stopped: TICKETRY_JWT_SECRET has 18 bytes"), stop
    assert "RFC 7518" in stop["msg"] and "exc" not in stop
    assert SHORT_SECRET not in proc.stderr  # the value itself is never printed


def test_a_setting_of_the_wrong_type_is_told_field_by_field() -> None:
    # Given a port that is no number (pydantic's ValidationError, not one of ours)
    proc = _python(
        "from ticketry_api.main import run; run()",
        {"TICKETRY_DEV_MODE": "1", "TICKETRY_API_PORT": "eighty", "TICKETRY_JWT_SECRET": "s" * 32},
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    (stop,) = [ln for ln in _json_lines(proc.stderr) if ln["level"] == "critical"]
    # Then the line names the variable, its value (a number's: nothing secret) and what it must be
    assert re.match(r"stopped: TICKETRY_API_PORT=eighty: must be a valid integer", stop["msg"]), stop


@pytest.mark.parametrize(
    ("service", "env", "says"),
    [
        ("renderer", {"TICKETRY_STD_BATCH": "-1"}, "TICKETRY_STD_BATCH=-1: must be greater than or equal to 1"),
        # a class the api reads besides its own (the webhooks'), under its own prefix
        ("api", {"TICKETRY_WEBHOOKS_TIMEOUT_S": "0"}, "TICKETRY_WEBHOOKS_TIMEOUT_S=0: must be greater than 0"),
        # a URL may hold a password: named, its value not shown
        ("api", {"TICKETRY_API_PUBLIC_URL": "ftp://u:pw@h"}, "TICKETRY_API_PUBLIC_URL: String should match"),
    ],
)
def test_a_bad_value_stops_the_start_in_one_line_naming_the_variable(
    service: str, env: dict[str, str], says: str
) -> None:
    # Given one value out of its range, when the service's entry point starts (people's format)
    dev = {"TICKETRY_DEV_MODE": "1", "TICKETRY_LOG_FORMAT": "console"}
    proc = _python(f"from ticketry_{service}.main import run; run()", {**dev, **env})
    # Then it stops with an error code, after one line that names the variable and its range
    assert proc.returncode == 1, proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert f"stopped: {says}" in line, line
    assert "pw@" not in line


def test_a_level_that_is_no_level_stops_the_start_in_json() -> None:
    proc = _python("from ticketry_api.main import run; run()", {"TICKETRY_LOG_LEVEL": "verbose"})
    assert proc.returncode == 1, proc.stderr[-2000:]
    (stop,) = _json_lines(proc.stderr)
    assert (stop["level"], stop["service"]) == ("critical", "api")
    assert "TICKETRY_LOG_LEVEL='VERBOSE' is no log level" in stop["msg"], stop


PYTHON_OUTPUT = """
import gc, threading, warnings
from ticketry.telemetry import setup_logging

setup_logging("api")
warnings.warn("an old way of doing it", DeprecationWarning, stacklevel=1)

def crash():
    raise LookupError("in a thread")

t = threading.Thread(target=crash, name="worker-1")
t.start()
t.join()

class Finaliser:
    def __del__(self):
        raise OSError("in a finaliser")

Finaliser()
gc.collect()
raise RuntimeError("nothing caught this")
"""


def test_warnings_and_uncaught_exceptions_are_log_lines() -> None:
    # Given a process that set logging up, when Python itself has something to
    # print: a warning, an exception in a thread, one in a finaliser, one that
    # ends the process
    proc = _python(PYTHON_OUTPUT, {"PYTHONWARNINGS": "always"})
    assert proc.returncode == 1, proc.stderr[-2000:]
    # Then each is one JSON line of ours, in order, with the traceback in `exc`
    lines = _json_lines(proc.stderr)
    assert [(ln["logger"], ln["level"]) for ln in lines] == [
        ("py.warnings", "warning"),
        ("ticketry.uncaught", "error"),
        ("ticketry.uncaught", "warning"),
        ("ticketry.uncaught", "critical"),
    ], lines
    warning, thread, finaliser, stop = lines
    assert "DeprecationWarning: an old way of doing it" in warning["msg"]
    assert thread["msg"] == "thread worker-1 stopped: LookupError: in a thread" and "crash" in thread["exc"]
    assert "Finaliser.__del__" in finaliser["msg"] and "OSError: in a finaliser" in finaliser["msg"]
    assert stop["msg"] == "stopped: RuntimeError: nothing caught this" and "Traceback" in stop["exc"]


def test_console_format_is_one_readable_line() -> None:
    # Given a record with an extra field, inside a bound context, with a traceback
    try:
        raise ValueError("bad page")
    except ValueError:
        record = logging.LogRecord("ticketry_api.main", logging.WARNING, __file__, 1, "order %s", ("late",), None)
        record.exc_info = sys.exc_info()
    record.order_id = "or_1"
    record.created = 1_796_000_000.25  # 2026-11-30T00:53:20.250Z
    with log_context(event_id="ev_1"):
        text = ConsoleFormatter("api").format(record)
    # Then: UTC time with milliseconds, level, service, logger, message, fields; the traceback below
    first, *rest = text.splitlines()
    assert first == "00:53:20.250Z WARNING api ticketry_api.main: order late event_id=ev_1 order_id=or_1"
    assert rest[0] == "Traceback (most recent call last):" and rest[-1] == "ValueError: bad page"


def test_console_format_redacts_credentials() -> None:
    record = logging.LogRecord("uvicorn.error", logging.INFO, __file__, 1, "GET /x?token=eyJabc.def.ghi", None, None)
    text = ConsoleFormatter("notifier").format(record)
    assert "eyJ" not in text and text.endswith("uvicorn.error: GET /x?token=[redacted]")


def test_the_format_comes_from_the_environment() -> None:
    code = "import logging; from ticketry.telemetry import setup_logging; setup_logging('renderer'); "
    code += "logging.getLogger('ticketry_renderer.handlers').info('rendered', extra={'ticket_id': 'tk_1'})"
    console = _python(code, {"TICKETRY_LOG_FORMAT": "console"})
    assert console.returncode == 0, console.stderr
    assert re.fullmatch(
        r"\d\d:\d\d:\d\d\.\d{3}Z INFO  renderer ticketry_renderer\.handlers: rendered ticket_id=tk_1\n", console.stderr
    ), console.stderr
    # Unset (or unknown, with a warning saying so): JSON lines
    (plain,) = _json_lines(_python(code, {}).stderr)
    assert (plain["msg"], plain["ticket_id"]) == ("rendered", "tk_1")
    unknown = _json_lines(_python(code, {"TICKETRY_LOG_FORMAT": "text"}).stderr)
    assert [ln["msg"] for ln in unknown] == ["unknown TICKETRY_LOG_FORMAT 'text': JSON lines", "rendered"]


# -- trace ids without an exporter ------------------------------------------


def _sampled(traceparent: str) -> bool:
    """The W3C ``sampled`` flag (bit 0 of the last field)."""
    return bool(int(traceparent.rsplit("-", 1)[1], 16) & 1)


@pytest.fixture
def no_exporter(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)


def test_without_an_exporter_every_span_has_ids_and_none_is_recorded(no_exporter: None) -> None:
    tracer = tracer_provider("api").get_tracer(__name__)
    # A request without a traceparent: a new trace, passed on unsampled
    with tracer.start_as_current_span("POST /v1/orders") as root:
        ctx = root.get_span_context()
        assert ctx.is_valid and not root.is_recording()
        passed_on = current_traceparent()
        assert passed_on.startswith(f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-") and not _sampled(passed_on)
        with tracer.start_as_current_span("order.place") as child:
            assert child.get_span_context().trace_id == ctx.trace_id and not child.is_recording()
    # A message or request that carries one: its trace goes on
    with tracer.start_as_current_span("ticket.render", context=context_from(TRACEPARENT.format(flags="00"))) as span:
        assert f"{span.get_span_context().trace_id:032x}" == "0af7651916cd43dd8448eb211c80319c"
        assert not span.is_recording()
    # A caller that samples: its flag is passed on (recorded, though nothing exports it)
    with tracer.start_as_current_span("ticket.render", context=context_from(TRACEPARENT.format(flags="01"))) as span:
        assert span.is_recording() and _sampled(current_traceparent())


def test_with_a_trace_file_spans_are_recorded_and_exported(no_exporter: None, tmp_path: Path) -> None:
    provider = tracer_provider("renderer", tmp_path / "spans.jsonl")
    with provider.get_tracer(__name__).start_as_current_span("ticket.render") as span:
        assert span.is_recording() and _sampled(current_traceparent())
    provider.shutdown()
    (exported,) = [orjson.loads(line) for line in (tmp_path / "spans.jsonl").read_bytes().splitlines()]
    assert (exported["name"], exported["service"]) == ("ticket.render", "ticketry-renderer")
    assert trace.get_current_span() is trace.INVALID_SPAN  # nothing left current
