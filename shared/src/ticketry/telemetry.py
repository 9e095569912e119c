"""Structured logs: one JSON object per line, from every logger, with
credentials redacted from every record.

Every service calls :func:`setup_logging` first thing, before it reads its
settings (it needs only ``TICKETRY_LOG_LEVEL`` and ``TICKETRY_LOG_FORMAT``), so
even a refused start is told in JSON lines. It

* routes the root logger to stderr as JSON lines (``TICKETRY_LOG_FORMAT=console``
  gives one readable text line instead, for people at a terminal); each line has
  ``ts`` (UTC, ISO 8601 with milliseconds: ``2026-12-01T03:20:11.123Z``),
  ``level``, ``service``, ``logger``, ``msg``, the record's ``extra`` fields
  (``order_id``, ``ticket_id``…), the fields bound with :func:`log_context`,
  ``trace_id``/``span_id`` when a trace is current (``ticketry.tracing``), and
  ``exc`` for a traceback;
* takes over library loggers that print to the terminal themselves (FastStream
  attaches a coloured text handler to ``faststream``): their terminal handlers
  go and their records reach ours, so no other format is interleaved;
* turns third-party chatter down to WARNING (WeasyPrint, fontTools, FastStream:
  dozens of INFO lines per design build or per batch);
* routes what Python itself prints to stderr through the same handler: warnings
  (``logging.captureWarnings``, logger ``py.warnings``), an uncaught exception
  (``sys.excepthook``: one ``critical`` line whose ``msg`` says why the process
  stopped, say a setting refused at start), one in a thread
  (``threading.excepthook``) and one Python could not raise
  (``sys.unraisablehook``). Only hooks still at Python's default are replaced:
  one a test runner or debugger installed stays;
* makes sure no bearer token reaches a log line, from whichever logger: uvicorn
  logs each WebSocket handshake with its path and query
  (``"WebSocket /v1/orders/…/progress?token=eyJ…" [accepted]``), and an
  exception message may quote a URL or a header. :func:`redact` is the one
  rule; it is applied when a record is made (so handlers of other libraries
  get clean records too), again on the root handler (``extra`` fields), and to
  each finished line.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from types import TracebackType
from typing import Any, Literal

import orjson
from opentelemetry import trace
from pydantic import ValidationError

_RESERVED = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message"}

REDACTED = "[redacted]"

# Query parameters whose values are kept: ids that help debugging and are no secret.
_SAFE_PARAMS = frozenset({"after"})
# ``/path?query`` or ``scheme://host/path?query``: every value not in _SAFE_PARAMS goes.
# (Values here stop at a backslash: in a JSON line it escapes the closing quote.)
_QUERY = re.compile(r"(/[^\s?\"'<>\\]*)\?([^\s\"'<>\\]+)")
# ``token=…`` and friends anywhere (a fragment, a form body, a query not after a path).
_SECRET_PARAM = re.compile(
    r"(?i)\b(token|access_token|id_token|refresh_token|jwt|api_key|apikey|secret|password|passwd|signature)"
    r"(=|%3D)([^&\s\"'#;,<>\\]+)"
)
# ``Authorization: Bearer x``, ``'authorization': 'Basic x'``, ``(b'authorization', b'x')``.
_AUTH_HEADER = re.compile(
    r"(?i)\b((?:proxy-)?authorization|sec-websocket-protocol)(['\"]?\s*[:=,]\s*(?:b?['\"])?)([^\"'\n\\]+)"
)
# ``Bearer x`` and the WebSocket subprotocol form ``bearer.x``.
_BEARER = re.compile(r"(?i)\b(bearer)([ .]+)([A-Za-z0-9\-._~+/]+=*)")
# A JWT (or the start of one, say in a truncated message): base64url JSON begins ``eyJ``.
_JWT = re.compile(r"eyJ[A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]*){0,2}")


def _redact_query(m: re.Match[str]) -> str:
    parts = []
    for part in re.split(r"([&;])", m.group(2)):
        if part in ("&", ";", ""):
            parts.append(part)
            continue
        name, eq, _ = part.partition("=")
        parts.append(part if eq and name.lower() in _SAFE_PARAMS else f"{name}={REDACTED}" if eq else REDACTED)
    return f"{m.group(1)}?{''.join(parts)}"


def redact(text: str) -> str:
    """``text`` without credentials: query-string values (but ``after``), ``token=``
    values, ``Authorization`` / ``Sec-WebSocket-Protocol`` header values, bearer
    tokens and anything shaped like a JWT become ``[redacted]``."""
    if not text:
        return text
    text = _QUERY.sub(_redact_query, text)
    text = _SECRET_PARAM.sub(rf"\1\2{REDACTED}", text)
    text = _AUTH_HEADER.sub(rf"\1\2{REDACTED}", text)
    text = _BEARER.sub(rf"\1\2{REDACTED}", text)
    return _JWT.sub(REDACTED, text)


def _redact_value(value: Any, depth: int = 0) -> Any:
    if isinstance(value, str):
        return redact(value)
    if depth < 3 and isinstance(value, dict):
        return {k: _redact_value(v, depth + 1) for k, v in value.items()}
    if depth < 3 and isinstance(value, list | tuple):
        return type(value)(_redact_value(v, depth + 1) for v in value)
    if isinstance(value, bytes):
        text = value.decode("utf-8", "replace")
        clean = redact(text)
        return value if clean == text else clean
    return value


def redact_record(record: logging.LogRecord) -> None:
    """Redact one record in place: its message with its arguments (formatted
    now), its exception and stack text, and every ``extra`` field."""
    if record.args or not isinstance(record.msg, str):
        try:
            message = record.getMessage()
        except Exception:  # a broken format string stays the handler's problem
            message = None
        if message is not None:
            record.msg, record.args = message, None
    if isinstance(record.msg, str):
        record.msg = redact(record.msg)
    if record.exc_info and not record.exc_text:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        record.exc_text = redact(record.exc_text)
    if record.stack_info:
        record.stack_info = redact(record.stack_info)
    for key, value in list(record.__dict__.items()):
        if key not in _RESERVED:
            record.__dict__[key] = _redact_value(value)


class RedactingFilter(logging.Filter):
    """A filter that never drops a record, only redacts it (:func:`redact_record`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        redact_record(record)
        return True


# Fields bound for the work in hand (a ticket, an order), added to every line logged within.
_CONTEXT: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("ticketry_log_context", default=None)
_BASE = ("ts", "level", "service", "logger", "msg")
# Extras that only repeat the message for a terminal (uvicorn's, with colour codes).
_DROPPED = frozenset({"color_message"})

LogFormat = Literal["json", "console"]

# Libraries whose INFO lines are chatter to an operator: WeasyPrint and
# fontTools print dozens per design build, FastStream two per batch.
QUIET_LOGGERS = ("weasyprint", "fontTools", "faststream")


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Add ``fields`` (say ``order_id=…``) to every line logged inside the block
    (this task and the tasks it starts); a record's own ``extra`` wins."""
    token = _CONTEXT.set({**(_CONTEXT.get() or {}), **fields})
    try:
        yield
    finally:
        _CONTEXT.reset(token)


def utc_timestamp(created: float) -> str:
    """``2026-12-01T03:20:11.123Z``: UTC, ISO 8601, milliseconds."""
    whole = int(created)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{int((created - whole) * 1000):03d}Z"


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    """A record's context: bound fields, the current trace, its ``extra`` fields.
    An extra named like a base field (``ts``…) keeps its value as ``extra_<name>``."""
    out: dict[str, Any] = dict(_CONTEXT.get() or {})
    ctx = trace.get_current_span().get_span_context()
    if ctx.is_valid:
        out["trace_id"] = f"{ctx.trace_id:032x}"
        out["span_id"] = f"{ctx.span_id:016x}"
    for key, value in record.__dict__.items():
        if key not in _RESERVED and key not in _DROPPED:
            out[f"extra_{key}" if key in _BASE else key] = value
    return out


class JsonFormatter(logging.Formatter):
    """One JSON object per line (see the module docstring for its fields)."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self._service = service

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": utc_timestamp(record.created),
            "level": record.levelname.lower(),
            "service": self._service,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update(_fields(record))
        if record.exc_info or record.exc_text:
            out["exc"] = record.exc_text or self.formatException(record.exc_info)  # type: ignore[arg-type]
        if record.stack_info:
            out["stack"] = record.stack_info
        return redact(orjson.dumps(out, default=str).decode())


class ConsoleFormatter(logging.Formatter):
    """One readable line per record, for people (``TICKETRY_LOG_FORMAT=console``):
    ``03:20:11.123Z INFO  api ticketry_api.main: message key=value …``."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self._service = service

    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{k}={v}" for k, v in _fields(record).items())
        line = (
            f"{utc_timestamp(record.created)[11:]} {record.levelname:<5} {self._service} {record.name}: "
            f"{record.getMessage()}{' ' + fields if fields else ''}"
        )
        if record.exc_info or record.exc_text:
            line += "\n" + (record.exc_text or self.formatException(record.exc_info))  # type: ignore[arg-type]
        return redact(line)


def _install_record_factory() -> None:
    """Redact every record when it is made, whichever logger and handler it goes to."""
    current = logging.getLogRecordFactory()
    if getattr(current, "_ticketry_redacting", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = current(*args, **kwargs)
        redact_record(record)
        return record

    factory._ticketry_redacting = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


def _prints_to_terminal(handler: logging.Handler) -> bool:
    """A plain StreamHandler on stdout or stderr (by object or by descriptor)."""
    if type(handler) is not logging.StreamHandler:
        return False
    stream = handler.stream
    if stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        return True
    try:
        return int(stream.fileno()) in (1, 2)
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return False


def adopt_library_loggers() -> None:
    """Library loggers that print to the terminal themselves (FastStream's
    coloured ``faststream`` handler) lose those handlers and propagate to the
    root, so every line has our format; handlers to anywhere else stay, with
    the redaction filter added."""
    for logger in list(logging.root.manager.loggerDict.values()):
        if not isinstance(logger, logging.Logger):
            continue
        for h in list(logger.handlers):
            if _prints_to_terminal(h):
                logger.removeHandler(h)
                logger.propagate = True
            elif not any(isinstance(f, RedactingFilter) for f in h.filters):
                h.addFilter(RedactingFilter())


def _reason(exc: BaseException) -> str:
    """Why the process stopped, in one line: each field's message of a settings
    error (pydantic's ``ValidationError``, without the input: it may be a
    secret), else ``Type: first line of the message``."""
    if isinstance(exc, ValidationError):
        return "; ".join(
            (".".join(map(str, e["loc"])) + ": " if e["loc"] else "") + e["msg"]
            for e in exc.errors(include_input=False, include_url=False)
        )
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


_HOOK_LOG = logging.getLogger("ticketry.uncaught")


def _uncaught(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    if issubclass(exc_type, KeyboardInterrupt):  # Ctrl-C: Python's one quiet line
        sys.__excepthook__(exc_type, exc, tb)
        return
    _HOOK_LOG.critical("stopped: %s", _reason(exc), exc_info=(exc_type, exc, tb))


def _uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:  # as threading's own hook: a thread's exit is no error
        return
    name = args.thread.name if args.thread is not None else "?"
    exc = args.exc_value if args.exc_value is not None else args.exc_type()
    _HOOK_LOG.error("thread %s stopped: %s", name, _reason(exc), exc_info=(args.exc_type, exc, args.exc_traceback))


def _unraisable(args: sys.UnraisableHookArgs) -> None:
    exc = args.exc_value if args.exc_value is not None else args.exc_type()
    try:
        what = repr(args.object)[:200]
    except Exception:  # a broken __repr__ must not break the hook
        what = type(args.object).__name__
    _HOOK_LOG.warning(
        "%s %s: %s",
        args.err_msg or "Exception ignored in",
        what,
        _reason(exc),
        exc_info=(args.exc_type, exc, args.exc_traceback),
    )


def _route_python_output() -> None:
    """Warnings and uncaught exceptions to the logs (see the module docstring)."""
    logging.captureWarnings(True)
    if sys.excepthook is sys.__excepthook__:
        sys.excepthook = _uncaught
    if threading.excepthook is threading.__excepthook__:
        threading.excepthook = _uncaught_in_thread
    if sys.unraisablehook is sys.__unraisablehook__:
        sys.unraisablehook = _unraisable


def setup_logging(service: str, level: str | None = None, fmt: LogFormat | None = None) -> None:
    """Route every logger, warnings and uncaught exceptions to stderr in one
    format (JSON lines unless ``fmt`` or ``TICKETRY_LOG_FORMAT`` says
    ``console``), at ``level`` (default: ``TICKETRY_LOG_LEVEL``, else INFO),
    with credentials redacted and third-party chatter at WARNING (see the
    module docstring). Reads nothing but those two variables, so a service
    calls it before its settings; a level that is no level stops the start
    (after the handler is in place, so that too is one JSON line)."""
    chosen = (fmt or os.environ.get("TICKETRY_LOG_FORMAT") or "json").strip().lower()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(ConsoleFormatter(service) if chosen == "console" else JsonFormatter(service))
    handler.addFilter(RedactingFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    _install_record_factory()
    _route_python_output()
    wanted = (level or os.environ.get("TICKETRY_LOG_LEVEL") or "INFO").strip().upper()
    if not isinstance(logging.getLevelName(wanted), int):
        raise ValueError(f"TICKETRY_LOG_LEVEL={wanted!r} is no log level (DEBUG, INFO, WARNING, ERROR, CRITICAL)")
    root.setLevel(wanted)
    if chosen not in ("json", "console"):
        logging.getLogger(__name__).warning("unknown TICKETRY_LOG_FORMAT %r: JSON lines", chosen)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
    adopt_library_loggers()
    # Access logs are off anyway (one line per request is noise at our rates).
    logging.getLogger("uvicorn.access").disabled = True
