"""Structured JSON logs, with credentials redacted from every record.

Every service calls :func:`setup_logging`. Besides routing the root logger to
stderr as JSON lines, it makes sure no bearer token reaches a log line, from
whichever logger: uvicorn logs each WebSocket handshake with its path and query
(``"WebSocket /v1/orders/…/progress?token=eyJ…" [accepted]``), and an exception
message may quote a URL or a header. :func:`redact` is the one rule; it is
applied when a record is made (so handlers of other libraries, FastStream's
own, get clean records too), again on the root handler (``extra`` fields), and
to each finished JSON line.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any

import orjson

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


class JsonFormatter(logging.Formatter):
    """One JSON object per line; ``extra={...}`` fields (order_id, ticket_id…) kept."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self._service = service

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "service": self._service,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update({k: v for k, v in record.__dict__.items() if k not in _RESERVED})
        if record.exc_info or record.exc_text:
            out["exc"] = record.exc_text or self.formatException(record.exc_info)  # type: ignore[arg-type]
        return redact(orjson.dumps(out, default=str).decode())


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


def setup_logging(service: str, level: str = "INFO") -> None:
    """Route the root logger to stderr as JSON lines, with credentials redacted
    from every record of every logger (see the module docstring)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service))
    handler.addFilter(RedactingFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    _install_record_factory()
    # Handlers other libraries attached to their own loggers get the filter too.
    for logger in list(logging.root.manager.loggerDict.values()):
        if isinstance(logger, logging.Logger):
            for h in logger.handlers:
                if not any(isinstance(f, RedactingFilter) for f in h.filters):
                    h.addFilter(RedactingFilter())
    # Access logs are off anyway (one line per request is noise at our rates).
    logging.getLogger("uvicorn.access").disabled = True
